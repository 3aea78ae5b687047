//! What a node's scripts answer, as types: each reply parsed and checked
//! (a value a server controls is validated and named when refused).

use std::time::Duration;

use redis::Value;

use super::Node;
use crate::error::{NodeError, NodeErrorKind, NodeOutcome};
use crate::quorum::Vote;

/// The largest fencing counter accepted from a node: below 2^53 (exact in
/// the scripts' Lua numbers) with room for the next token.
pub(super) const MAX_COUNTER: u64 = (1 << 53) - 2;

/// A node's answer to the renew script, for one guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewReply {
    /// Our token was on every key; the TTLs are reset.
    Renewed,
    /// Some key was absent and is ours again (same token, same TTL).
    Healed,
    /// Another owner (or a non-lock value) holds some key.
    NotOurs,
}

/// One name's fencing counter as a node holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The counter's value (`None`: the node has none).
    pub(crate) value: Option<u64>,
    /// Written in the node's current epoch (or absent on a node whose
    /// epoch is its whole history): not gone back or away since. See
    /// [`crate::fence`].
    pub(crate) current: bool,
}

/// What the fencing read (`scripts/read_fences.lua`) found on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FenceRead {
    /// The node's clock (`TIME`) in µs, for the time floor.
    pub(crate) time_us: u64,
    pub(crate) readings: Box<[Reading]>,
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
    /// of this one (`scripts/queue.lua`).
    Queued,
}

/// A node's answer to an owner-checked script (extend, fencing raise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnerCheck {
    /// Every key carried our token; the script did its write.
    Ours,
    /// Some key did not; nothing was written.
    NotOurs,
}

impl OwnerCheck {
    /// How the answer counts for a quorum.
    pub(crate) fn vote(&self) -> Vote {
        match self {
            OwnerCheck::Ours => Vote::Won,
            OwnerCheck::NotOurs => Vote::Contended,
        }
    }
}

impl From<OwnerCheck> for NodeOutcome {
    fn from(check: OwnerCheck) -> NodeOutcome {
        match check {
            OwnerCheck::Ours => NodeOutcome::Won,
            OwnerCheck::NotOurs => NodeOutcome::NotHeld,
        }
    }
}

impl AcquireReply {
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

/// A node's answer to the release script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// No key carried our token.
    NotOurs,
    /// Our entry is gone and the keys with it.
    Freed,
    /// Our entry is gone; the owner's other holds keep the keys.
    Kept,
}

impl Node {
    pub(super) fn owner_check(&self, reply: Value) -> Result<OwnerCheck, NodeError> {
        match reply {
            Value::Int(1) => Ok(OwnerCheck::Ours),
            Value::Int(0) => Ok(OwnerCheck::NotOurs),
            other => Err(self.unexpected(other)),
        }
    }

    /// A fencing counter as a script or `MGET` returns it: `None` when the
    /// node has none; a value outside `0..=MAX_COUNTER` (or not a number)
    /// is [`NodeErrorKind::InvalidCounter`] naming the node and the value.
    pub(super) fn counter(&self, value: &Value) -> Result<Option<u64>, NodeError> {
        let parsed = match value {
            Value::Nil => return Ok(None),
            Value::BulkString(bytes) => std::str::from_utf8(bytes)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok()),
            Value::Int(c) => u64::try_from(*c).ok(),
            _ => None,
        };
        parsed
            .filter(|c| *c <= MAX_COUNTER)
            .map(Some)
            .ok_or_else(|| {
                let shown = match value {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    Value::Int(c) => c.to_string(),
                    other => format!("{other:?}"),
                };
                NodeError::new(
                    &self.name,
                    NodeErrorKind::InvalidCounter,
                    format!("fencing counter {shown} is not a whole number in 0..={MAX_COUNTER}"),
                )
            })
    }

    /// Counter readings from `value, current` pairs (see
    /// `scripts/epoch.lua`), each value validated.
    pub(super) fn readings(&self, pairs: &[Value]) -> Result<Box<[Reading]>, NodeError> {
        pairs
            .chunks(2)
            .map(|pair| match pair {
                [value, Value::Int(current)] => Ok(Reading {
                    value: self.counter(value)?,
                    current: *current == 1,
                }),
                _ => Err(self.unexpected(Value::Array(pair.to_vec()))),
            })
            .collect()
    }

    pub(super) fn unexpected(&self, reply: Value) -> NodeError {
        NodeError::new(
            &self.name,
            NodeErrorKind::UnexpectedReply,
            format!("{reply:?}"),
        )
    }
}

/// A holder's remaining TTL as the scripts report it (`PTTL`): `None` for
/// -1, a key without expiry. Callers match `-1..` first: any other negative
/// value is not a TTL and is refused as an unexpected reply.
pub(super) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redis::Client;

    use super::*;
    use crate::config::Target;
    use crate::server_ids::ServerIds;

    #[test]
    fn counters_outside_the_exact_range_are_refused() {
        let node = Node::new(
            Target::Direct(Client::open("redis://127.0.0.1:1").expect("url")),
            (Duration::from_secs(1), Duration::from_millis(50)),
            Duration::from_secs(1),
            false,
            Arc::default(),
            (ServerIds::new(1), 0),
        );
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(node.counter(&Value::Nil).ok(), Some(None));
        assert_eq!(node.counter(&bulk("0")).ok(), Some(Some(0)));
        assert_eq!(
            node.counter(&bulk("9007199254740990")).ok(),
            Some(Some(MAX_COUNTER))
        );
        for bad in [
            "9007199254740991",
            "18446744073709551616",
            "-1",
            "1.5",
            "",
            "abc",
            "+1",
        ] {
            let e = node.counter(&bulk(bad)).expect_err(bad);
            assert_eq!(e.kind(), NodeErrorKind::InvalidCounter, "{bad}");
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert!(node.counter(&Value::Int(-1)).is_err());
    }
}
