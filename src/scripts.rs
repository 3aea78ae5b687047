//! The Lua scripts that touch lock keys. Every write is conditional on the
//! owner token inside one script, so no client can delete or extend a lock it
//! does not own.
//!
//! Every script that casts a vote starts with `scripts/epoch.lua`: the
//! node's epoch check, in the same call as the vote (see
//! [`crate::node`] for what a young node's answer means).

use std::sync::LazyLock;

/// A Lua script with its SHA1, sent by `EVALSHA` with an `EVAL` fallback.
///
/// Each script also exists *flagged*: with a `#!lua` first line (Redis 7),
/// which declares it a write script, so that a master that cannot take
/// writes refuses it before running it, also when this call would only
/// read. Sentinel nodes send the flagged form: a master cut off from its
/// replicas longer than `min-replicas-max-lag` then answers `NOREPLICAS`
/// to everything, votes and reads alike (see [`crate::sentinel`]).
pub(crate) struct Script {
    body: &'static str,
    sha: String,
    flagged_body: String,
    flagged_sha: String,
}

impl Script {
    fn new(body: &'static str) -> Script {
        let flagged_body = format!("#!lua\n{body}");
        Script {
            body,
            sha: sha1_smol::Sha1::from(body).digest().to_string(),
            flagged_sha: sha1_smol::Sha1::from(&flagged_body).digest().to_string(),
            flagged_body,
        }
    }

    /// The source to send, flagged or not.
    pub(crate) fn body(&self, flagged: bool) -> &str {
        if flagged {
            &self.flagged_body
        } else {
            self.body
        }
    }

    /// Its SHA1, for `EVALSHA`.
    pub(crate) fn sha(&self, flagged: bool) -> &str {
        if flagged {
            &self.flagged_sha
        } else {
            &self.sha
        }
    }
}

/// `SET NX PX` for every key of a guard at once, all or nothing, plus:
/// re-entry by the same owner adds a hold, a foreign holder's PTTL is
/// returned, and each key's fencing counter is read.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/queue.lua"),
        include_str!("scripts/acquire.lua")
    ))
});
/// Compare-and-delete of one hold; the key goes with its last hold, and the
/// node announces that it is free.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/queue.lua"),
        include_str!("scripts/release.lua")
    ))
});
/// Group commit: the acquires and releases queued for one node, in one
/// call and in their order (`scripts/batch.lua`). Each runs its own
/// script's body; the epoch check runs once for the batch.
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/queue.lua"),
        "local function quorumlock_acquire(KEYS, ARGV)\n",
        include_str!("scripts/acquire.lua"),
        "end\nlocal function quorumlock_release(KEYS, ARGV)\n",
        include_str!("scripts/release.lua"),
        "end\n",
        include_str!("scripts/batch.lua")
    ))
});
/// An operator's release of a name, whatever its owner.
pub(crate) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/force_release.lua")));
/// Compare-and-expire.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/extend.lua")
    ))
});
/// The watchdog's renewal of a group of locks: compare-and-expire, or
/// re-take when absent.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/renew.lua")
    ))
});

/// Raises the fencing counters to a token while the keys are ours.
pub(crate) static FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/fence.lua")
    ))
});

/// Release one hold and take the freed lock for the next waiter.
pub(crate) static HANDOFF: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/queue.lua"),
        include_str!("scripts/handoff.lua")
    ))
});

/// Reads fencing counters, with the epoch check.
pub(crate) static READ_FENCES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/epoch.lua"),
        include_str!("scripts/read_fences.lua")
    ))
});

/// The epoch check run once per connection, before any vote.
pub(crate) static EPOCH_CHECK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/epoch_check.lua")));

/// Adopts a brand-new, empty node: its epoch starts at once.
pub(crate) static ADOPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/adopt.lua")));

/// Every script, loaded on each new connection.
pub(crate) fn all() -> [&'static Script; 11] {
    [
        &ACQUIRE,
        &RELEASE,
        &BATCH,
        &FORCE_RELEASE,
        &EXTEND,
        &RENEW,
        &FENCE,
        &HANDOFF,
        &READ_FENCES,
        &EPOCH_CHECK,
        &ADOPT,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_matches_redis_script_load() {
        // `SCRIPT LOAD "return 1"` answers this SHA1.
        assert_eq!(
            Script::new("return 1").sha(false),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_ne!(ACQUIRE.sha(false), RELEASE.sha(false));
        assert_ne!(ACQUIRE.sha(false), ACQUIRE.sha(true));
        assert!(ACQUIRE.body(true).starts_with("#!lua\n"));
    }
}
