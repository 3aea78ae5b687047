//! The Lua scripts that touch lock keys. Every write is conditional on the
//! owner token inside one script, so no client can delete or extend a lock it
//! does not own.

use std::sync::LazyLock;

/// A Lua script with its SHA1, sent by `EVALSHA` with an `EVAL` fallback.
pub(crate) struct Script {
    pub(crate) body: &'static str,
    pub(crate) sha: String,
}

impl Script {
    fn new(body: &'static str) -> Script {
        Script {
            body,
            sha: sha1_smol::Sha1::from(body).digest().to_string(),
        }
    }
}

/// `SET NX PX` for every key of a guard at once, all or nothing, plus:
/// re-entry by the same owner adds a hold, a foreign holder's PTTL is
/// returned, and each key's fencing counter is read.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
/// Compare-and-delete of one hold; the key goes with its last hold, and the
/// node announces that it is free.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
/// Compare-and-expire.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend.lua")));
/// The watchdog's renewal of a group of locks: compare-and-expire, or
/// re-take when absent.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));

/// Raises the fencing counters to a token while the keys are ours.
pub(crate) static FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fence.lua")));

/// Release one hold and take the freed lock for the next waiter.
pub(crate) static HANDOFF: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/handoff.lua")));

/// Every script, loaded on each new connection.
pub(crate) fn all() -> [&'static Script; 6] {
    [&ACQUIRE, &RELEASE, &EXTEND, &RENEW, &FENCE, &HANDOFF]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_matches_redis_script_load() {
        // `SCRIPT LOAD "return 1"` answers this SHA1.
        assert_eq!(
            Script::new("return 1").sha,
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_ne!(ACQUIRE.sha, RELEASE.sha);
    }
}
