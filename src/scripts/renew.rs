//! `renew.lua`: the watchdog's renewal of a group of locks.

use std::sync::{Arc, LazyLock};

use redis::Value;

use super::reply::BadReply;
use super::{Args, Call, Script, text};
use crate::keys::Entry;

/// The watchdog's renewal of a group of locks: compare-and-expire, or
/// re-take when absent.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::RENEW));

/// Lock keys per renew script call (the watchdog's group size): large
/// enough that 10,000 locks take a few dozen calls per node, small enough
/// that one call holds the server for well under a millisecond.
pub(crate) const RENEW_CHUNK: usize = 256;

/// One guard of a watchdog group.
#[derive(Clone)]
pub(crate) struct RenewItem {
    pub(crate) entry: Entry,
    pub(crate) ttl_ms: u64,
}

/// Renews every item of a watchdog group in one call.
pub(crate) struct Renew {
    pub(crate) items: Arc<[RenewItem]>,
}

impl Call for Renew {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// Every item's lock keys, item after item, then their force-release
    /// markers in the same order.
    fn keys(&self, out: &mut Args<'_>) {
        for item in self.items.iter() {
            out.names(&item.entry.keys);
        }
        for item in self.items.iter() {
            out.each(item.entry.keys.forced());
        }
    }

    /// For each item: token, entry id, TTL, and how many keys it has.
    fn args(&self, out: &mut Args<'_>) {
        for item in self.items.iter() {
            out.arg(&*item.entry.token)
                .arg(&*item.entry.id)
                .arg(item.ttl_ms)
                .arg(item.entry.keys.len());
        }
    }
}

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

impl RenewReply {
    /// One code per item, in order: `1` renewed, `2` healed, `0` or `-1`
    /// not ours.
    pub(crate) fn parse(reply: Value, items: usize) -> Result<Vec<RenewReply>, BadReply> {
        match reply {
            Value::Array(codes) if codes.len() == items => codes
                .into_iter()
                .map(|code| match code {
                    Value::Int(1) => Ok(RenewReply::Renewed),
                    Value::Int(2) => Ok(RenewReply::Healed),
                    Value::Int(0 | -1) => Ok(RenewReply::NotOurs),
                    other => Err(BadReply::Unexpected(other)),
                })
                .collect(),
            other => Err(BadReply::Unexpected(other)),
        }
    }
}
