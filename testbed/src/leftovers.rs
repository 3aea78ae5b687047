//! The lock's invariant after every test: nothing of a lock is left on a
//! node that can be reached, unless the test said it would be.
//!
//! A [`Testbed`](crate::Testbed) runs this check when it is dropped (but
//! not while the test is already panicking): on every running, unpaused
//! node it looks for
//!
//! * **lock keys**: a lock key (either form: `testbed/src/lock_key.rs`)
//!   under a name outside the reserved `quorumlock:` namespace, or under a
//!   semaphore's or read-write lock's slot name (`quorumlock:permit:…`,
//!   `quorumlock:rw:…`), and
//! * **waiter entries**: a waiter queue (`quorumlock:queue:<name>`) or its
//!   leases (`quorumlock:leases:<name>`).
//!
//! Fencing counters, epoch markers and forced-release markers are meant to
//! stay and are not looked at. What is found is waited for, briefly
//! (releases finishing in the background on other threads), then reported
//! with its node, its owner and its TTL, and the test fails. A test that
//! leaves something on purpose (a crashed holder, a planted key) declares
//! it with [`Testbed::expect_left`](crate::Testbed::expect_left).
//!
//! A guard dropped on a single-threaded runtime releases in a task of its
//! own, which cannot run while the test's thread is in this check: release
//! guards explicitly (`release().await`) before the testbed goes.

use std::time::{Duration, Instant};

use crate::RedisNode;

/// How long the check waits for what it found to go (a release finishing
/// in the background, on another thread or process).
const GRACE: Duration = Duration::from_secs(3);

/// At most this many `SCAN` rounds per node (1,000 keys each): a test
/// never has more.
const MAX_SCANS: usize = 1_000;

/// What a test declared it leaves on the nodes.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    /// Lock names (and their waiter queues) that may be left.
    pub(crate) names: Vec<String>,
    /// Whether the check runs at all.
    pub(crate) off: bool,
}

impl Declared {
    fn allows(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// One thing of a lock found on a node.
#[derive(Debug)]
struct Leftover {
    node: String,
    key: String,
    what: String,
}

/// Fails the test (panics) if any reachable node keeps a lock key or a
/// waiter entry that was not declared, once the grace period has passed.
pub(crate) fn check(nodes: &[RedisNode], declared: &Declared) {
    if declared.off {
        return;
    }
    let give_up = Instant::now() + GRACE;
    loop {
        let found = scan(nodes, declared);
        if found.is_empty() {
            return;
        }
        if Instant::now() >= give_up {
            let list: Vec<String> = found
                .iter()
                .map(|l| format!("  {} {:?}: {}", l.node, clip(&l.key), clip(&l.what)))
                .collect();
            panic!(
                "left on reachable nodes after the test (an undone write, or a release that \
                 never arrived; declare what the test leaves on purpose with \
                 Testbed::expect_left):\n{}",
                list.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// At most 200 characters of `text`, for a report a human reads (a test
/// may plant a key named by a megabyte).
fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text.to_string(),
    }
}

fn scan(nodes: &[RedisNode], declared: &Declared) -> Vec<Leftover> {
    let mut found = Vec::new();
    for node in nodes.iter().filter(|n| n.is_running() && !n.is_paused()) {
        // A node that cannot be inspected (a replica being set up, a
        // password the test set) is not judged here.
        let Ok(mut conn) = node.connection() else {
            continue;
        };
        let mut cursor = 0u64;
        for _ in 0..MAX_SCANS {
            let Ok((next, keys)) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query::<(u64, Vec<Vec<u8>>)>(&mut conn)
            else {
                break;
            };
            for key in keys {
                let key = String::from_utf8_lossy(&key).into_owned();
                if let Some(what) = judge(&mut conn, &key, declared) {
                    found.push(Leftover {
                        node: node.url(),
                        key,
                        what,
                    });
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    found
}

/// What `key` is, if it is a lock key or a waiter entry not declared.
fn judge(conn: &mut redis::Connection, key: &str, declared: &Declared) -> Option<String> {
    if let Some(rest) = key.strip_prefix("quorumlock:") {
        let (kind, name) = rest.split_once(':')?;
        // A semaphore's or read-write lock's slot is a lock name of its own
        // (`quorumlock:permit:<name>:<i>`): judged as a lock key, and
        // declared by its own name or its primitive's.
        if matches!(kind, "permit" | "rw") {
            if declared.allows(key) || slot_of(key).is_some_and(|p| declared.allows(p)) {
                return None;
            }
            return lock_key(conn, key);
        }
        // A slot's queue is declared by the slot's or its primitive's name.
        if !matches!(kind, "queue" | "leases")
            || declared.allows(name)
            || slot_of(name).is_some_and(|p| declared.allows(p))
        {
            return None;
        }
        let pttl = pttl(conn, key);
        return Some(format!("a waiter entry of {name:?}, PTTL {pttl} ms"));
    }
    if declared.allows(key) {
        return None;
    }
    lock_key(conn, key)
}

/// The semaphore's or read-write lock's name of a slot name
/// (`quorumlock:permit:<name>:<i>`, `quorumlock:rw:<name>:<i>`).
fn slot_of(name: &str) -> Option<&str> {
    ["quorumlock:permit:", "quorumlock:rw:"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .and_then(|slot| slot.rsplit_once(':'))
        .map(|(primitive, _)| primitive)
}

/// What `key` is if it is a lock key (of either form).
fn lock_key(conn: &mut redis::Connection, key: &str) -> Option<String> {
    let owner = crate::lock_key::owner(conn, key).ok()??;
    let pttl = pttl(conn, key);
    Some(format!("a lock key of owner {owner}, PTTL {pttl} ms"))
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(conn).unwrap_or(-2)
}
