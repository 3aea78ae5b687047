//! What the scripts' replies are made of, checked: a value a server
//! controls is refused with what it was, never coerced.

use std::time::Duration;

use redis::Value;

use crate::error::NodeOutcome;
use crate::quorum::Vote;

/// The largest fencing counter accepted from a node: below 2^53 (exact in
/// the scripts' Lua numbers) with room for the next token.
pub(crate) const MAX_COUNTER: u64 = (1 << 53) - 2;

/// A reply its script cannot have given.
#[derive(Debug)]
pub(crate) enum BadReply {
    /// Not of the script's shape.
    Unexpected(Value),
    /// A fencing counter that is not a whole number in `0..=MAX_COUNTER`,
    /// as the server sent it.
    Counter(String),
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

/// A node's answer to an owner-checked script (extend, fencing raise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnerCheck {
    /// Every key carried our token; the script did its write.
    Ours,
    /// Some key did not; nothing was written.
    NotOurs,
}

impl OwnerCheck {
    /// `1` ours, `0` not (`extend.lua`, `fence.lua`).
    pub(crate) fn parse(reply: Value) -> Result<OwnerCheck, BadReply> {
        match reply {
            Value::Int(1) => Ok(OwnerCheck::Ours),
            Value::Int(0) => Ok(OwnerCheck::NotOurs),
            other => Err(BadReply::Unexpected(other)),
        }
    }

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

/// A fencing counter as a script returns it: `None` when the node has
/// none; a value outside `0..=MAX_COUNTER` (or not a number) is refused.
pub(crate) fn counter(value: &Value) -> Result<Option<u64>, BadReply> {
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
            BadReply::Counter(match value {
                Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                Value::Int(c) => c.to_string(),
                other => format!("{other:?}"),
            })
        })
}

/// Counter readings from `value, current` pairs (`epoch.lua`), each value
/// checked.
pub(crate) fn readings(pairs: &[Value]) -> Result<Box<[Reading]>, BadReply> {
    pairs
        .chunks(2)
        .map(|pair| match pair {
            [value, Value::Int(current)] => Ok(Reading {
                value: counter(value)?,
                current: *current == 1,
            }),
            _ => Err(BadReply::Unexpected(Value::Array(pair.to_vec()))),
        })
        .collect()
}

/// A holder's remaining TTL as the scripts report it (`PTTL`): `None` for
/// -1, a key without expiry. Callers match `-1..` first: any other negative
/// value is not a TTL and is refused as an unexpected reply.
pub(crate) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_outside_the_exact_range_are_refused() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(counter(&Value::Nil).ok(), Some(None));
        assert_eq!(counter(&bulk("0")).ok(), Some(Some(0)));
        assert_eq!(
            counter(&bulk("9007199254740990")).ok(),
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
            match counter(&bulk(bad)) {
                Err(BadReply::Counter(shown)) => assert_eq!(shown, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(counter(&Value::Int(-1)).is_err());
    }
}
