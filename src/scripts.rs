//! The Lua scripts that touch lock keys. Every write is conditional on the
//! owner token inside one script, so no client can delete or extend a lock it
//! does not own.
//!
//! Every script that casts a vote starts with `scripts/epoch.lua`: the
//! node's epoch check, in the same call as the vote (see
//! [`crate::node`] for what a young node's answer means).
//!
//! One module per script, beside its `.lua`: the script's text, the call
//! (a type that writes its own keys and arguments, see [`Call`]) and its
//! reply (a type that parses and checks itself). The node runs a call
//! without knowing its layout; [`text`] is what the tests include to know
//! the scripts as they are sent.

use redis::{Cmd, ToRedisArgs};

use crate::keys::{EPOCH_KEY, Entry, KeySet};

pub(crate) mod acquire;
pub(crate) mod adopt;
pub(crate) mod batch;
pub(crate) mod extend;
pub(crate) mod fence;
pub(crate) mod force_release;
pub(crate) mod handoff;
pub(crate) mod read_fences;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod reply;
mod text;

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

/// A call of one script: what it sends, written in one place (the
/// script's module). The node puts `numkeys` first, counted from what
/// [`keys`](Call::keys) writes, and a vote's settled epoch marker and
/// quarantine last (`epoch.lua`).
pub(crate) trait Call {
    /// The script it runs.
    fn script(&self) -> &'static Script;
    /// Whether it casts a vote: its script starts with `epoch.lua` and
    /// takes the node's marker and quarantine as its last two arguments.
    fn votes(&self) -> bool;
    /// Its `KEYS`, in the order its `.lua` header lists them.
    fn keys(&self, out: &mut Args<'_>);
    /// Its `ARGV`, in its header's order (a vote's last two excepted).
    fn args(&self, out: &mut Args<'_>);
}

/// Where a call writes its keys or arguments: a command, or only a count,
/// so that a count is always of what is written.
pub(crate) struct Args<'a> {
    cmd: Option<&'a mut Cmd>,
    count: usize,
}

impl Args<'_> {
    /// One argument (or as many as it expands to).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.count += arg.num_of_args();
        if let Some(cmd) = &mut self.cmd {
            cmd.arg(arg);
        }
        self
    }

    /// Each item of `items`, one argument each.
    pub(crate) fn each<T: ToRedisArgs>(&mut self, items: &[T]) -> &mut Self {
        for item in items {
            self.arg(item);
        }
        self
    }

    /// The lock keys of `keys`.
    pub(crate) fn names(&mut self, keys: &KeySet) -> &mut Self {
        for name in keys.names() {
            self.arg(&**name);
        }
        self
    }
}

/// Appends `call`'s `numkeys`, keys and arguments to `cmd` (everything
/// after the script reference but a vote's last two arguments). A vote's
/// last key is the node's epoch marker (`epoch.lua`), declared like every
/// key a script touches.
pub(crate) fn write(call: &(impl Call + ?Sized), cmd: &mut Cmd) {
    // Only the keys are counted first (`numkeys` precedes them): counting
    // the arguments too would walk them twice on every call.
    let mut keys = Args {
        cmd: None,
        count: 0,
    };
    call.keys(&mut keys);
    cmd.arg(keys.count + usize::from(call.votes()));
    let mut out = Args {
        cmd: Some(cmd),
        count: 0,
    };
    call.keys(&mut out);
    if call.votes() {
        out.arg(EPOCH_KEY);
    }
    call.args(&mut out);
}

/// The queue id whose places a script gives up: the entry's ticket's when
/// `leave`, else none ('').
fn queue_id(entry: &Entry, leave: bool) -> &str {
    match &entry.ticket {
        Some(ticket) if leave => &ticket.id,
        _ => "",
    }
}

/// The epoch check run once per connection, before any vote (its one
/// caller, `crate::epoch`, writes its arguments).
pub(crate) static EPOCH_CHECK: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(text::EPOCH_CHECK));

/// Every script, loaded on each new connection.
pub(crate) fn all() -> [&'static Script; 11] {
    [
        &acquire::SCRIPT,
        &release::SCRIPT,
        &batch::SCRIPT,
        &force_release::SCRIPT,
        &extend::SCRIPT,
        &renew::SCRIPT,
        &fence::SCRIPT,
        &handoff::SCRIPT,
        &read_fences::SCRIPT,
        &EPOCH_CHECK,
        &adopt::SCRIPT,
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
        assert_ne!(acquire::SCRIPT.sha(false), release::SCRIPT.sha(false));
        assert_ne!(acquire::SCRIPT.sha(false), acquire::SCRIPT.sha(true));
        assert!(acquire::SCRIPT.body(true).starts_with("#!lua\n"));
    }

    /// Every key a script touches is declared in its KEYS or named after
    /// a declared lock key by `layout.lua`'s three functions (the keys
    /// beside a lock key, as `keys.rs` names them): no script names any
    /// other `quorumlock:` key itself. Only the release channels are named
    /// in the scripts besides, and they are no keys.
    #[test]
    fn no_script_names_a_key_of_its_own() {
        for script in all() {
            let mut in_layout = false;
            for line in script.body(false).lines() {
                if line.starts_with("local function quorumlock_") {
                    in_layout = line.contains("_of(key)") || line.contains("_epoch_key()");
                }
                let code = line.split("--").next().unwrap_or("");
                if code.contains("'quorumlock:") {
                    assert!(
                        code.contains("PUBLISH") || in_layout,
                        "a key not in KEYS: {line}"
                    );
                }
            }
        }
    }

    /// `layout.lua` names a lock key's counter, queue and leases as
    /// `keys.rs` does.
    #[test]
    fn the_scripts_name_the_keys_beside_a_lock_key_as_the_client_does() {
        use crate::keys::{fence_key, queue_key, queue_leases_key};
        let layout = include_str!("scripts/layout.lua");
        for (function, key) in [
            ("quorumlock_fence_of", fence_key("")),
            ("quorumlock_queue_of", queue_key("")),
            ("quorumlock_leases_of", queue_leases_key("")),
        ] {
            let expected = format!("local function {function}(key)\n  return '{key}' .. key\nend");
            assert!(layout.contains(&expected), "layout.lua lacks {expected}");
        }
        let marker = format!(
            "local function quorumlock_epoch_key()\n  return '{}'\nend",
            crate::keys::EPOCH_KEY
        );
        assert!(layout.contains(&marker), "layout.lua lacks {marker}");
    }

    /// `queue.lua` knows a place that refuses nobody by the end `keys.rs`
    /// gives its id.
    #[test]
    fn the_scripts_know_a_place_that_refuses_nobody_as_the_client_writes_it() {
        use crate::keys::REFUSES_NOBODY;
        let queue = include_str!("scripts/queue.lua");
        let expected = format!(
            "string.sub(id, -{}) ~= '{REFUSES_NOBODY}'",
            REFUSES_NOBODY.len()
        );
        assert!(queue.contains(&expected), "queue.lua lacks {expected}");
    }
}
