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
/// itself; an entry with a ticket (always one that waits: only a waiter
/// queues) also takes (or keeps) a place in the names' waiter queues for
/// `lease_ms` (`queue.lua`).
/// `reads_fences`: the reply carries each name's fencing counter (see
/// `Core::reads_fences`).
pub(crate) struct Acquire {
    pub(crate) entry: Entry,
    pub(crate) ttl_ms: u64,
    pub(crate) waits: bool,
    pub(crate) lease_ms: u64,
    pub(crate) reads_fences: bool,
    /// The call's attempt number, which a grant request names (0: the
    /// place asks for no grant).
    pub(crate) attempt: u32,
}

impl Acquire {
    /// Its kind (`acquire.lua`): `q` queues (and waits), `w` waits, `a`
    /// only takes; in capitals when it also reads the fencing counters.
    pub(crate) fn kind(&self) -> &'static str {
        match (&self.entry.ticket, self.waits, self.reads_fences) {
            (Some(_), _, false) => "q",
            (Some(_), _, true) => "Q",
            (None, true, false) => "w",
            (None, true, true) => "W",
            (None, false, false) => "a",
            (None, false, true) => "A",
        }
    }

    /// Its arguments after the kind: the hold and the TTL; with a ticket,
    /// its queue id, score, the place's lease and its grant request,
    /// `"<attempt> <grant hold>"` or `""` (none without: fewer arguments
    /// to write and for the node to read on every acquire).
    pub(crate) fn kind_args(&self, out: &mut Args<'_>) {
        let entry = &self.entry;
        out.arg(&*entry.hold).arg(self.ttl_ms);
        if let Some(ticket) = &entry.ticket {
            out.arg(&*ticket.id).arg(ticket.score).arg(self.lease_ms);
            match ticket.grant() {
                Some(grant) if self.attempt > 0 => {
                    out.arg(format!("{} {}", self.attempt, grant.hold))
                }
                _ => out.arg(""),
            };
        }
    }
}

impl Call for Acquire {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// The lock keys (the script names their counters and queues).
    fn keys(&self, out: &mut Args<'_>) {
        out.names(&self.entry.keys);
    }

    /// The kind, then its arguments.
    fn args(&self, out: &mut Args<'_>) {
        out.arg(self.kind());
        self.kind_args(out);
    }
}

/// A node's answer to the acquire script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The node holds every key for us now; each key's fencing counter
    /// (a reading's value `None`: the node has none), when the call read
    /// them.
    Won { fences: Option<Box<[Reading]>> },
    /// Another owner holds a key for `pttl` more (`None`: no expiry).
    Held { pttl: Option<Duration> },
    /// A key is free, but a waiter of another acquire call is queued ahead
    /// of this one (`queue.lua`).
    Queued,
}

impl AcquireReply {
    /// The reply for an entry of `keys` keys: `{1, value, current, ...}`
    /// won (`1` when it did not read the counters: `reads_fences`),
    /// `{0, pttl, _}` held (-1: the holder set no expiry), `{0, -2, _}`
    /// queued.
    pub(crate) fn parse(
        reply: Value,
        keys: usize,
        reads_fences: bool,
    ) -> Result<AcquireReply, BadReply> {
        let items = match reply {
            Value::Int(1) if !reads_fences => return Ok(AcquireReply::Won { fences: None }),
            Value::Array(items) => items,
            other => return Err(BadReply::Unexpected(other)),
        };
        match items.as_slice() {
            [Value::Int(1), fences @ ..] if reads_fences && fences.len() == 2 * keys => {
                readings(fences).map(|fences| AcquireReply::Won {
                    fences: Some(fences),
                })
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
