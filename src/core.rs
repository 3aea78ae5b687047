//! The core of a lock service: its settings, its nodes and its counters,
//! and the per-node reports every round builds from its replies.
//!
//! Everything above this layer reaches the nodes through a [`Core`]. A
//! held lock's lease points at the core (not at the lock service), so a
//! dropped [`MultiLock`](crate::MultiLock) whose guards are gone closes its
//! connections at once: nothing below the service refers back up to it.

use std::sync::Arc;
use std::time::Duration;

use crate::background::Background;
use crate::config::{LockConfig, Target};
use crate::error::{NodeError, NodeErrorKind, NodeOutcome, NodeReport, NodeReports};
use crate::fanout::End;
use crate::node::Node;
use crate::quorum::Vote;
use crate::server_ids::ServerIds;
use crate::stats::{Counters, LockStats, bump};
use crate::telemetry;

/// Settings, nodes and counters: what every round of a lock service uses.
pub(crate) struct Core {
    pub(crate) config: LockConfig,
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) counters: Counters,
    /// Undo work still running after its caller stopped waiting.
    pub(crate) background: Arc<Background>,
    /// Set once every node's first connect has ended (see
    /// [`Core::first_connects`]).
    connected: tokio::sync::OnceCell<()>,
    /// Set once a holder of this lock service asked for a fencing token:
    /// from then on its acquires read the names' fencing counters (see
    /// [`Core::reads_fences`]).
    tokens_asked: std::sync::atomic::AtomicBool,
}

impl Core {
    /// The nodes of `config`, not yet connected.
    pub(crate) fn new(config: LockConfig) -> Core {
        let servers = ServerIds::new(config.nodes.len());
        let background = Arc::new(Background::default());
        let nodes = config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let quarantine = match &n.target {
                    Target::Sentinel(group) if !config.quarantine.is_zero() => {
                        config.quarantine + group.extra_quarantine()
                    }
                    _ => config.quarantine,
                };
                Arc::new(Node::new(
                    n.target.clone(),
                    (config.connect_timeout, config.node_timeout),
                    quarantine,
                    n.durable,
                    Arc::clone(&background),
                    (Arc::clone(&servers), i),
                ))
            })
            .collect();
        Core {
            config,
            nodes,
            background,
            counters: Counters::default(),
            connected: tokio::sync::OnceCell::new(),
            tokens_asked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether an acquire reads the fencing counters of its names, so that
    /// a token costs no read of its own (`crate::fence`): with
    /// `prefetch_fencing`, or once any holder of this lock service asked
    /// for a token. Until then nobody needs them, and the read is a fifth
    /// of an acquire's work on a node; a service's first token reads them
    /// itself (one more round trip, once).
    pub(crate) fn reads_fences(&self) -> bool {
        self.config.prefetch_fencing || self.tokens_asked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes that a holder asked for a fencing token.
    pub(crate) fn token_asked(&self) {
        self.tokens_asked
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits, once in the life of the lock service, until every node's
    /// first connect has ended, made or failed (each within the connect
    /// timeout; a refused one at once). A connect loads every script and
    /// dates the node's epoch: on a busy machine it can take longer than a
    /// round's node timeout, and a first round that paid for it would fail
    /// on nodes that are perfectly fine. Later calls return at once; a
    /// reconnect later is paid by the round that needs it, as before.
    pub(crate) async fn first_connects(&self) {
        self.connected
            .get_or_init(|| async {
                futures::future::join_all(self.nodes.iter().map(|n| n.ensure_connected())).await;
            })
            .await;
    }

    /// A snapshot of the lock's and each node's counters.
    pub(crate) fn stats(&self) -> LockStats {
        let nodes = self
            .nodes
            .iter()
            .map(|n| n.counters.snapshot(n.name()))
            .collect();
        self.counters.snapshot(nodes)
    }

    /// Nodes a quorum needs.
    pub(crate) fn required(&self) -> usize {
        self.config.required_nodes()
    }

    /// The configured TTL in whole milliseconds, for the scripts.
    pub(crate) fn ttl_ms(&self) -> u64 {
        ttl_millis(self.config.ttl)
    }

    /// How long a waiter's place in a waiter queue outlives its last
    /// attempt (`scripts/queue.lua`): a waiter attempts at least once per
    /// longest backoff, so a live one keeps its place; a dead one holds a
    /// free name back from the others for at most this long. Two longest
    /// backoffs plus a node timeout, and at least two seconds.
    pub(crate) fn queue_lease_ms(&self) -> u64 {
        let config = &self.config;
        let lease = config
            .retry
            .max_delay()
            .saturating_mul(2)
            .saturating_add(config.node_timeout)
            .max(Duration::from_secs(2));
        ttl_millis(lease)
    }

    /// How long a release or rollback may go on in the background: long
    /// enough for a reconnect and one call.
    pub(crate) fn background_bound(&self) -> Duration {
        self.config
            .connect_timeout
            .saturating_add(self.config.node_timeout)
    }

    /// Per-node outcomes for an error report of an acquire or extend round,
    /// counting the nodes that timed out.
    pub(crate) fn reports<T>(
        &self,
        replies: &mut [Option<Result<T, NodeError>>],
        end: End,
    ) -> NodeReports
    where
        T: Into<NodeOutcome>,
    {
        let deadline_passed = end == End::DeadlinePassed;
        if deadline_passed {
            for (node, _) in self
                .nodes
                .iter()
                .zip(&*replies)
                .filter(|(_, r)| r.is_none())
            {
                self.count_timeout(node);
            }
        }
        let outcomes = replies
            .iter_mut()
            .map(|reply| reply.take().map(|r| r.map(Into::into)));
        self.outcome_reports(outcomes, deadline_passed)
    }

    /// Per-node outcomes from each node's reply, in node order (`None`: no
    /// reply: a timeout if the round's deadline passed, otherwise not
    /// awaited because the round was decided first). Counts nothing.
    pub(crate) fn outcome_reports(
        &self,
        replies: impl IntoIterator<Item = Option<Result<NodeOutcome, NodeError>>>,
        deadline_passed: bool,
    ) -> NodeReports {
        let reports = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeReport {
                node: node.name().to_string(),
                outcome: match reply {
                    Some(Ok(outcome)) => outcome,
                    Some(Err(e)) => NodeOutcome::Failed(e),
                    None if deadline_passed => NodeOutcome::Failed(self.timeout_detail(node)),
                    None => NodeOutcome::NoReplyBeforeDecision,
                },
            })
            .collect();
        NodeReports::new(reports)
    }

    /// Per-node outcomes of a round decided by votes (a renewal, a fencing
    /// raise): won, not ours, or the node's error.
    pub(crate) fn vote_reports(
        &self,
        votes: &[Option<Vote>],
        errors: &[Option<NodeError>],
        deadline_passed: bool,
    ) -> NodeReports {
        let replies = votes.iter().zip(errors).map(|(vote, error)| match vote {
            Some(Vote::Won) => Some(Ok(NodeOutcome::Won)),
            Some(Vote::Contended) => Some(Ok(NodeOutcome::NotHeld)),
            // A failed vote always comes with its node's error.
            Some(Vote::Failed) => error.clone().map(Err),
            None => None,
        });
        self.outcome_reports(replies, deadline_passed)
    }

    /// A timeout error for `node`, counted.
    pub(crate) fn timeout_error(&self, node: &Node) -> NodeError {
        self.count_timeout(node);
        self.timeout_detail(node)
    }

    /// Counts a call to `node` that went unanswered for the node timeout,
    /// and marks the node suspect ([`Node::readiness`]).
    pub(crate) fn count_timeout(&self, node: &Node) {
        bump(&node.counters.timeouts);
        telemetry::node_timeout(node.name());
        node.timed_out();
    }

    /// The error reported for a suspect node a release did not wait for.
    pub(crate) fn not_waited_for(&self, node: &Node) -> NodeError {
        NodeError::new(
            node.name(),
            NodeErrorKind::Timeout,
            "no reply since a call timed out: not waited for; the release goes on in the background"
                .to_string(),
        )
    }

    /// A timeout error for `node`, without counting it.
    fn timeout_detail(&self, node: &Node) -> NodeError {
        NodeError::new(
            node.name(),
            NodeErrorKind::Timeout,
            format!(
                "no reply within the node timeout of {:?}",
                self.config.node_timeout
            ),
        )
    }
}

/// A TTL in whole milliseconds for `PX`/`PEXPIRE` (validated to fit).
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
impl Core {
    /// A core of three nodes that nothing connects to (a node connects on
    /// its first call), for the unit tests of what does no I/O: the lease,
    /// the watchdog's schedule.
    pub(crate) fn offline(
        configure: impl FnOnce(crate::LockConfigBuilder) -> crate::LockConfigBuilder,
    ) -> Arc<Core> {
        let nodes = [
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ];
        let config = configure(LockConfig::builder().nodes(nodes));
        Arc::new(Core::new(config.build().expect("valid test settings")))
    }
}
