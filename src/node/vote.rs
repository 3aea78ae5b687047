//! Voting: a script that counts toward a quorum carries the node's settled
//! epoch marker and its quarantine, and a young node's answer is
//! unwrapped into a quarantine error (its writes were done all the same).

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use redis::{Cmd, Value};

use super::Node;
use super::send::How;
use crate::error::{NodeError, NodeErrorKind};
use crate::health::NodeState;
use crate::scripts::Call;
use crate::stats::bump;
use crate::telemetry;

/// The longest epoch marker kept from a node's reply: a real one
/// (`"<run_id> <epoch id> <start ms> <origin>"`) is under 100 bytes; a
/// longer one is an unexpected reply, never stored.
pub(super) const MAX_MARKER_LEN: usize = 256;

impl Node {
    /// A vote script's reply, sent with the node's quarantine: the reply of
    /// a node that votes, or [`NodeErrorKind::Quarantined`] for a young
    /// node (which did the script's writes all the same).
    ///
    /// `reached` marks the entries whose write the call carries, right
    /// before it goes out ([`Reached`](crate::keys::Reached)).
    pub(super) async fn voting(
        self: &Arc<Self>,
        call: &impl Call,
        reached: &(dyn Fn() + Sync),
    ) -> Result<Value, NodeError> {
        let how = How {
            reached,
            ..How::plain()
        };
        match self.vote(call, how).await? {
            (Some(left), _) => Err(self.quarantined(left)),
            (None, reply) => Ok(reply),
        }
    }

    /// Runs a vote script (its marker and quarantine last) and unwraps a
    /// young node's answer: `(Some(time left), reply)`.
    pub(super) async fn vote(
        self: &Arc<Self>,
        call: &impl Call,
        how: How<'_>,
    ) -> Result<(Option<Duration>, Value), NodeError> {
        self.may_vote().await?;
        let result = self.script(call, how).await;
        self.count_failure(&result, how.cutoff);
        let reply = result?;
        let (young, reply) = self.unwrap_vote(reply)?;
        if young.is_none() {
            // A settled node's answer: its vote counts.
            self.health.set(NodeState::Counting);
        }
        Ok((young, reply))
    }

    /// Checked before a vote is asked for: the node is connected (the
    /// connection identifies the server), and no other node of this lock
    /// service reaches the same server (one server casts one vote).
    pub(super) async fn may_vote(self: &Arc<Self>) -> Result<(), NodeError> {
        if let Err(e) = self.connection().await {
            bump(&self.counters.errors);
            telemetry::node_error(self.name());
            return Err(e);
        }
        if let Some(voter) = self.servers.same_as(self.index) {
            self.health.set(NodeState::SameServer {
                voter: Arc::clone(&voter),
            });
            return Err(NodeError::new(
                &self.name,
                NodeErrorKind::SameServer,
                format!("the same Redis server (run_id) as {voter}: one server casts one vote"),
            ));
        }
        Ok(())
    }

    /// The last arguments of every vote script: the settled marker and the
    /// quarantine (`scripts/epoch.lua`).
    pub(super) fn voter_args(&self, cmd: &mut Cmd) {
        cmd.arg(&self.settled.lock().unwrap_or_else(PoisonError::into_inner)[..]);
        if self.durable {
            cmd.arg(-1);
        } else {
            cmd.arg(self.quarantine_ms);
        }
    }

    /// A vote script's reply, unwrapped: `(Some(time left), reply)` for a
    /// young node; a newly settled marker is kept.
    pub(super) fn unwrap_vote(&self, reply: Value) -> Result<(Option<Duration>, Value), NodeError> {
        let Value::Array(items) = reply else {
            return Ok((None, reply));
        };
        let mut items = match self.settle(items)? {
            Value::Array(items) => items,
            reply => return Ok((None, reply)),
        };
        let young = matches!(items.first(), Some(Value::BulkString(tag)) if tag == b"young");
        if !young {
            return Ok((None, Value::Array(items)));
        }
        match (items.pop(), items.pop()) {
            (Some(inner), Some(Value::Int(left))) if items.len() == 1 && left > 0 => {
                Ok((Some(Duration::from_millis(left.unsigned_abs())), inner))
            }
            _ => Err(self.unexpected(Value::Array(items))),
        }
    }

    /// Unwraps a vote reply that reports a newly settled epoch marker
    /// (`{'settled', marker, reply}`), keeping the marker for the next
    /// votes; any other reply is returned as it is.
    pub(super) fn settle(&self, mut items: Vec<Value>) -> Result<Value, NodeError> {
        if !matches!(items.first(), Some(Value::BulkString(tag)) if tag == b"settled") {
            return Ok(Value::Array(items));
        }
        if let [_, Value::BulkString(marker), inner] = &mut items[..]
            && (1..=MAX_MARKER_LEN).contains(&marker.len())
        {
            *self.settled.lock().unwrap_or_else(PoisonError::into_inner) = std::mem::take(marker);
            return Ok(std::mem::replace(inner, Value::Nil));
        }
        Err(self.unexpected(Value::Array(items)))
    }

    /// The quarantine error of this node, counted (in the stats and in a
    /// debug event carrying the running count).
    pub(super) fn quarantined(&self, left: Duration) -> NodeError {
        let count = self.counters.quarantined.fetch_add(1, Ordering::Relaxed) + 1;
        self.health.set(NodeState::Quarantined { left });
        tracing::debug!(node = %self.name, left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX), quarantined_votes = count, "vote not counted: the node is quarantined");
        NodeError::quarantined(&self.name, left)
    }
}
