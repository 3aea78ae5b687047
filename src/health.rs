//! Whether a node counts toward the quorum now, told to the logs once per
//! change: a `warn` event when it stops counting (with the reason) and an
//! `info` event when it counts again. A node learns these facts on every
//! call (a vote, a failed connect, a quarantined reply); logging each
//! would flood the log, so [`Health::set`] logs only when the state's kind
//! changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::telemetry;

/// What a node last showed about its vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// Its votes count.
    Counting,
    /// The connect failed (`detail`: the error, no credentials).
    Unreachable { detail: String },
    /// Its data may be incomplete: no vote for `left` more.
    Quarantined { left: Duration },
    /// Its connection answered nothing for `silent_for`.
    Silent { silent_for: Duration },
    /// It reaches the same server as node `voter`, which votes for it.
    SameServer { voter: Arc<str> },
    /// The server refused the call (`NOAUTH`, `READONLY`, a script error).
    Refused { detail: String },
}

impl NodeState {
    /// The reason as a short word, for the logs and the metrics' label.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            NodeState::Counting => "counting",
            NodeState::Unreachable { .. } => "unreachable",
            NodeState::Quarantined { .. } => "quarantined",
            NodeState::Silent { .. } => "silent",
            NodeState::SameServer { .. } => "same_server",
            NodeState::Refused { .. } => "refused",
        }
    }
}

impl NodeState {
    /// What a log line says beyond the reason.
    fn detail(&self) -> String {
        match self {
            NodeState::Counting => String::new(),
            NodeState::Unreachable { detail } | NodeState::Refused { detail } => detail.clone(),
            NodeState::Quarantined { left } => format!("no vote for {} ms more", ms(*left)),
            NodeState::Silent { silent_for } => {
                format!("no reply to anything for {} ms", ms(*silent_for))
            }
            NodeState::SameServer { voter } => format!("{voter} votes for its server"),
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One node's health: the kind of its last state (`None`: nothing learned
/// yet; a node that counts from the start is not logged).
pub(crate) struct Health {
    node: Arc<str>,
    last: Mutex<Option<&'static str>>,
    /// Whether `last` is `counting`: every counted vote reports it, and
    /// reads only this flag then, not the lock the tasks of a busy node
    /// would queue on.
    counting: AtomicBool,
}

impl Health {
    pub(crate) fn new(node: Arc<str>) -> Health {
        Health {
            node,
            last: Mutex::new(None),
            counting: AtomicBool::new(false),
        }
    }

    /// Records what the node showed; logs only a change of kind. Logged
    /// under the lock, so the events come in the order of the changes.
    /// Returns whether it logged.
    pub(crate) fn set(&self, state: NodeState) -> bool {
        if state == NodeState::Counting && self.counting.load(Ordering::Acquire) {
            return false;
        }
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let label = state.label();
        let previous = last.replace(label);
        self.counting
            .store(state == NodeState::Counting, Ordering::Release);
        if previous == Some(label) {
            return false;
        }
        let node = &*self.node;
        telemetry::node_counting(node, state == NodeState::Counting);
        if state == NodeState::Counting {
            if previous.is_some() {
                tracing::info!(node, was = previous, "node counts toward the quorum again");
            }
            return previous.is_some();
        }
        let left_ms = match &state {
            NodeState::Quarantined { left } => Some(ms(*left)),
            _ => None,
        };
        let detail = state.detail();
        tracing::warn!(node, reason = label, left_ms, %detail, "node stopped counting toward the quorum");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_change_of_kind_is_logged() {
        let health = Health::new(Arc::from("redis://127.0.0.1:1"));
        assert!(!health.set(NodeState::Counting), "counting from the start");
        let down = || NodeState::Unreachable {
            detail: "refused".into(),
        };
        assert!(health.set(down()));
        assert!(!health.set(down()), "the same state again");
        assert!(health.set(NodeState::Quarantined {
            left: Duration::from_secs(1)
        }));
        assert!(!health.set(NodeState::Quarantined {
            left: Duration::from_millis(500)
        }));
        assert!(health.set(NodeState::Counting));
        assert!(!health.set(NodeState::Counting));
    }
}
