//! `acquire.lua`: takes every key of an entry at once, or none.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::reply::{BadReply, Reading, pttl, readings};
use super::{Args, Call, Script, text};
use crate::error::NodeOutcome;
use crate::keys::Entry;
use crate::quorum::Vote;

/// `SET NX PX` for every key of a guard at once, all or nothing, plus:
/// re-entry by the same owner adds a hold, a foreign holder's PTTL is
/// returned, and each key's fencing counter is read.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::ACQUIRE));

/// An acquire of `entry` for `ttl_ms`. `waits`: the caller waits for a
/// release notice, so a key found held is marked and its release announces
/// itself; an entry with a ticket also takes (or keeps) a place in the
/// names' waiter queues for `lease_ms` (`queue.lua`).
pub(crate) struct Acquire {
    pub(crate) entry: Entry,
    pub(crate) ttl_ms: u64,
    pub(crate) waits: bool,
    pub(crate) lease_ms: u64,
}

impl Call for Acquire {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// The lock keys, their fencing counters, their waiter queues and the
    /// queues' leases.
    fn keys(&self, out: &mut Args<'_>) {
        let keys = &self.entry.keys;
        out.names(keys).each(keys.fences()).each(keys.queues());
    }

    /// Token, entry id, TTL, whether it waits; with a ticket, its queue
    /// id, score and the place's lease (none without: fewer arguments to
    /// write and for the node to read on every acquire).
    fn args(&self, out: &mut Args<'_>) {
        let entry = &self.entry;
        out.arg(&*entry.token).arg(&*entry.id).arg(self.ttl_ms);
        out.arg(if self.waits { "1" } else { "0" });
        if let Some(ticket) = &entry.ticket {
            out.arg(&*ticket.id).arg(ticket.score).arg(self.lease_ms);
        }
    }
}

/// A node's answer to the acquire script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The node holds every key for us now; each key's fencing counter
    /// (`None`: the node has none).
    Won { fences: Box<[Reading]> },
    /// Another owner holds a key for `pttl` more (`None`: no expiry).
    Held { pttl: Option<Duration> },
    /// A key is free, but a waiter of another acquire call is queued ahead
    /// of this one (`queue.lua`).
    Queued,
}

impl AcquireReply {
    /// The reply for an entry of `keys` keys: `{1, value, current, ...}`
    /// won, `{0, pttl, _}` held (-1: the holder set no expiry), `{0, -2,
    /// _}` queued.
    pub(crate) fn parse(reply: Value, keys: usize) -> Result<AcquireReply, BadReply> {
        let Value::Array(items) = reply else {
            return Err(BadReply::Unexpected(reply));
        };
        match items.as_slice() {
            [Value::Int(1), fences @ ..] if fences.len() == 2 * keys => {
                readings(fences).map(|fences| AcquireReply::Won { fences })
            }
            [Value::Int(0), Value::Int(ms @ -1..), Value::Int(_)] => {
                Ok(AcquireReply::Held { pttl: pttl(*ms) })
            }
            [Value::Int(0), Value::Int(-2), Value::Int(_)] => Ok(AcquireReply::Queued),
            _ => Err(BadReply::Unexpected(Value::Array(items))),
        }
    }

    /// A refusal: the script wrote no lock key (`None` for a win). The
    /// holder's remaining TTL when another owner holds a key, `Some(None)`
    /// when it set none or when waiters queue ahead.
    pub(crate) fn refused(&self) -> Option<Option<Duration>> {
        match self {
            AcquireReply::Won { .. } => None,
            AcquireReply::Held { pttl } => Some(*pttl),
            AcquireReply::Queued => Some(None),
        }
    }

    /// How the answer counts for a quorum.
    pub(crate) fn vote(&self) -> Vote {
        match self {
            AcquireReply::Won { .. } => Vote::Won,
            AcquireReply::Held { .. } | AcquireReply::Queued => Vote::Contended,
        }
    }
}

impl From<AcquireReply> for NodeOutcome {
    fn from(reply: AcquireReply) -> NodeOutcome {
        match reply {
            AcquireReply::Won { .. } => NodeOutcome::Won,
            AcquireReply::Held { pttl } => NodeOutcome::HeldByOther { pttl },
            AcquireReply::Queued => NodeOutcome::WaitersAhead,
        }
    }
}
