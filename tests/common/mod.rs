//! Helpers shared by the integration tests: lock construction over a
//! testbed, direct inspection of every node, and bounded waits on events.
#![allow(dead_code)] // each test binary uses a different subset

pub mod captured;
pub mod hostile;

use std::time::{Duration, Instant};

use quorumlock::{
    Error, Hold, LockConfig, LockConfigBuilder, LockGuard, MultiLock, RetryPolicy, Wait,
};
use quorumlock_testbed::{NodeOptions, RedisNode, Testbed};

/// A lock over every node of `testbed`, configured by `configure`.
pub fn lock_with(
    testbed: &Testbed,
    configure: impl FnOnce(LockConfigBuilder) -> LockConfigBuilder,
) -> MultiLock {
    // A generous node timeout: a busy CI machine must not turn a live node
    // into a "timed out" one. Tests of timing set their own.
    let builder = LockConfig::builder()
        .nodes(testbed.urls())
        .ttl(Duration::from_secs(30))
        .node_timeout(Duration::from_secs(1));
    MultiLock::new(
        configure(builder)
            .build()
            .expect("test configuration is valid"),
    )
}

/// A lock over every node with the defaults (majority, 30 s TTL).
pub fn lock(testbed: &Testbed) -> MultiLock {
    lock_with(testbed, |b| b)
}

/// A connected lock that needs every node: its acquire succeeds only with
/// the key on all of them. A majority round drops the calls it has not sent
/// once it is decided, so only this makes "node i carries the key" certain.
pub async fn every_node_lock(testbed: &Testbed) -> MultiLock {
    connected(lock_with(testbed, |b| b.quorum(quorumlock::Quorum::All))).await
}

/// The owner token stored under lock `key` on one node (`None`: absent).
/// See [`lock_key_on`] for the two forms of a lock key.
pub fn value_on(node: &RedisNode, key: &str) -> Option<String> {
    owner_of(&mut node.connection().expect("inspect node"), key)
}

/// How many holds lock `key` has on one node (the re-entry count; 0 when
/// the key is absent).
pub fn holds_on(node: &RedisNode, key: &str) -> usize {
    holds_of(&mut node.connection().expect("inspect node"), key)
}

/// The owner token of lock `key` on `conn`'s node (`None`: absent).
pub fn owner_of(conn: &mut redis::Connection, key: &str) -> Option<String> {
    match lock_key_on(conn, key) {
        LockKey::Absent => None,
        LockKey::Single { owner, .. } => Some(owner),
        LockKey::Hash => redis::cmd("HGET")
            .arg(key)
            .arg("owner")
            .query(conn)
            .expect("HGET owner"),
    }
}

/// The holds of lock `key` on `conn`'s node (0: absent).
pub fn holds_of(conn: &mut redis::Connection, key: &str) -> usize {
    match lock_key_on(conn, key) {
        LockKey::Absent => 0,
        LockKey::Single { .. } => 1,
        LockKey::Hash => {
            let fields: usize = redis::cmd("HLEN").arg(key).query(conn).expect("HLEN");
            // Not holds: the owner, and the mark a waiting acquire leaves.
            let marked: bool = redis::cmd("HEXISTS")
                .arg(key)
                .arg("waiters")
                .query(conn)
                .expect("HEXISTS");
            fields.saturating_sub(1 + usize::from(marked))
        }
    }
}

/// A lock key's form on one node.
pub enum LockKey {
    Absent,
    /// One hold, as a string: its owner token, and whether a waiter
    /// marked it.
    Single {
        owner: String,
        marked: bool,
    },
    /// Held more than once (or planted by a test with `HSET`): a hash,
    /// read with the `H*` commands.
    Hash,
}

/// Reads which form lock `key` has on `conn`'s node: a string `"<owner>
/// <entry>"` (`" w"` after it once a waiter marked it) while it has one
/// hold, a hash (field `owner`, one field per hold, `waiters` once marked)
/// once re-entered. One call, so a key that expires meanwhile reads as
/// absent, not as an error. Panics on a string in neither form (someone
/// else's data), as reading a key of another type does.
pub fn lock_key_on(conn: &mut redis::Connection, key: &str) -> LockKey {
    match redis::cmd("GET").arg(key).query::<Option<String>>(conn) {
        Ok(None) => LockKey::Absent,
        Ok(Some(value)) => match quorumlock_testbed::lock_key::parse(&value) {
            Some((owner, marked)) => LockKey::Single {
                owner: owner.to_owned(),
                marked,
            },
            None => panic!("{key} is a string but not a lock key: {value:?}"),
        },
        Err(e) if e.code() == Some("WRONGTYPE") => LockKey::Hash,
        Err(e) => panic!("GET {key}: {e}"),
    }
}

/// The fencing counter of lock `key` on one node (`None`: absent). Stored
/// as `<value> <epoch id>`; this is the value.
pub fn fence_on(node: &RedisNode, key: &str) -> Option<u64> {
    let mut conn = node.connection().expect("inspect node");
    let raw: Option<String> = redis::cmd("GET")
        .arg(format!("quorumlock:fence:{key}"))
        .query(&mut conn)
        .expect("GET fence");
    raw.map(|raw| {
        let value = raw.split(' ').next().unwrap_or_default();
        value.parse().expect("a counter value")
    })
}

/// The node's current epoch id (from its `quorumlock:epoch` marker), for
/// writing a counter the node takes as current.
pub fn epoch_on(node: &RedisNode) -> String {
    let mut conn = node.connection().expect("inspect node");
    let marker: String = redis::cmd("GET")
        .arg("quorumlock:epoch")
        .query(&mut conn)
        .expect("the node has an epoch marker");
    marker.split(' ').nth(1).expect("an epoch id").to_string()
}

/// Sets the fencing counter of lock `key` on one node to `value`, current
/// in the node's epoch.
pub fn set_fence_on(node: &RedisNode, key: &str, value: u64) {
    let mut conn = node.connection().expect("inspect node");
    let () = redis::cmd("SET")
        .arg(format!("quorumlock:fence:{key}"))
        .arg(format!("{value} {}", epoch_on(node)))
        .query(&mut conn)
        .expect("SET fence");
}

/// `SET key value` on one node.
pub fn set_on(node: &RedisNode, key: &str, value: impl redis::ToRedisArgs) {
    let mut conn = node.connection().expect("inspect node");
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut conn)
        .expect("SET");
}

/// The value of `key` on every node, in order.
pub fn values(testbed: &Testbed, key: &str) -> Vec<Option<String>> {
    testbed.nodes().iter().map(|n| value_on(n, key)).collect()
}

/// The remaining TTL of `key` on one node, in milliseconds (-2 absent).
pub fn pttl_on(node: &RedisNode, key: &str) -> i64 {
    let mut conn = node.connection().expect("inspect node");
    redis::cmd("PTTL").arg(key).query(&mut conn).expect("PTTL")
}

/// How many commands named `command` (lower case, e.g. "evalsha") the node
/// has run, from `INFO commandstats`.
pub fn calls_on(node: &RedisNode, command: &str) -> u64 {
    let mut conn = node.connection().expect("inspect node");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Starts `n` nodes that record every command in their slowlog, so a test
/// can see which lock scripts ran on a node, and in which order.
pub fn start_recording(n: usize) -> Testbed {
    let options = NodeOptions {
        extra_config: vec![
            ("slowlog-log-slower-than".into(), "0".into()),
            ("slowlog-max-len".into(), "100000".into()),
        ],
        ..NodeOptions::default()
    };
    Testbed::start_with(n, options).expect("testbed")
}

/// A lock script call seen in a node's slowlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptCall {
    /// `key token ttl`: the acquire (or extend) script.
    Acquire,
    /// `key token`: the release (rollback) script.
    Release,
}

/// The newest `count` entries of a recording node's slowlog as (id, args).
fn slowlog(node: &RedisNode, count: usize) -> Vec<(u64, Vec<String>)> {
    let mut conn = node.connection().expect("inspect node");
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(count)
        .query(&mut conn)
        .expect("SLOWLOG GET");
    entries
        .into_iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) if fields.len() >= 4 => {
                let id = redis::from_redis_value(fields[0].clone()).ok()?;
                let args: Vec<redis::Value> = redis::from_redis_value(fields[3].clone()).ok()?;
                let args = args
                    .into_iter()
                    .filter_map(|a| redis::from_redis_value(a).ok())
                    .collect();
                Some((id, args))
            }
            _ => None,
        })
        .collect()
}

/// The library's scripts as it sends them: its own file of composed
/// texts, included as it is (a copy here drifted once, which made every
/// acquire and renewal invisible to the helpers below).
#[allow(dead_code)]
#[path = "../../src/scripts/text.rs"]
mod text;
use text::{ACQUIRE as ACQUIRE_SCRIPT, RELEASE as RELEASE_SCRIPT, RENEW as RENEW_SCRIPT};

/// Whether slowlog args are a call of `body` (by SHA, or by the body's
/// first 128 bytes, which is what the slowlog keeps of an `EVAL`).
fn is_script(args: &[String], body: &str) -> bool {
    let verb = args.first().map(|v| v.to_ascii_uppercase());
    let script = args.get(1).map(String::as_str).unwrap_or("");
    match verb.as_deref() {
        Some("EVALSHA") => script == sha1_smol::Sha1::from(body).digest().to_string(),
        Some("EVAL") => body.starts_with(script.trim_end_matches("... (more bytes)")),
        _ => false,
    }
}

fn is_renew(args: &[String]) -> bool {
    is_script(args, RENEW_SCRIPT)
}

/// Slowlog ids of the watchdog's renew calls on a recording node that
/// included `key`, oldest first.
pub fn renew_calls(node: &RedisNode, key: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = slowlog(node, 100_000)
        .into_iter()
        .filter(|(_, args)| {
            let keys = args
                .get(2)
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            is_renew(args) && args.iter().skip(3).take(keys).any(|k| k == key)
        })
        .map(|(id, _)| id)
        .collect();
    ids.sort_unstable();
    ids
}

/// The lock scripts a recording node ran on `key`, oldest first, with their
/// slowlog ids (which grow in execution order). Renewals are not included
/// (see [`renew_calls`]).
pub fn script_calls(node: &RedisNode, key: &str) -> Vec<(u64, ScriptCall)> {
    let mut calls: Vec<(u64, ScriptCall)> = slowlog(node, 100_000)
        .into_iter()
        .filter_map(|(id, args)| {
            if args.get(3).map(String::as_str) != Some(key) {
                return None;
            }
            if is_script(&args, RELEASE_SCRIPT) {
                Some((id, ScriptCall::Release))
            } else if is_script(&args, ACQUIRE_SCRIPT) {
                Some((id, ScriptCall::Acquire))
            } else {
                None
            }
        })
        .collect();
    calls.sort_unstable_by_key(|(id, _)| *id);
    calls
}

/// The newest slowlog id of a recording node: "before" for [`assert_rolled_back`].
pub fn log_mark(node: &RedisNode) -> u64 {
    slowlog(node, 1).first().map_or(0, |(id, _)| *id)
}

/// Waits until a recording node has run a release of `key` after `mark`
/// (the rollback, which is always sent), then checks that every acquire of
/// `key` after `mark` ran before it (a rollback never overtakes its acquire)
/// and that the node no longer carries the key. (The acquire itself may not
/// have run at all: a request still queued when the attempt was decided is
/// never sent.)
pub async fn assert_rolled_back(node: &RedisNode, key: &str, mark: u64) {
    let what = format!("the rollback of {key:?} on {}", node.url());
    let after = || {
        script_calls(node, key)
            .into_iter()
            .filter(|(id, _)| *id > mark)
            .collect::<Vec<_>>()
    };
    wait_for(&what, Duration::from_secs(5), || {
        after().iter().any(|(_, c)| *c == ScriptCall::Release)
    })
    .await;
    let calls = after();
    let first_release = calls
        .iter()
        .position(|(_, c)| *c == ScriptCall::Release)
        .expect("seen above");
    assert!(
        calls[first_release..]
            .iter()
            .all(|(_, c)| *c == ScriptCall::Release),
        "an acquire ran after its rollback on {}: {calls:?}",
        node.url()
    );
    assert_eq!(value_on(node, key), None, "{key:?} left on {}", node.url());
}

/// Subscribers of `key`'s release channel on one node (`PUBSUB NUMSUB`).
pub fn subscribers_on(node: &RedisNode, key: &str) -> i64 {
    let mut conn = node.connection().expect("inspect node");
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("quorumlock:released:{key}"))
        .query(&mut conn)
        .expect("PUBSUB NUMSUB");
    reply.1
}

/// Waits until no node carries `key` (expired or deleted), naming `why`.
pub async fn wait_until_gone(testbed: &Testbed, key: &str, why: &str) {
    wait_until_gone_from(testbed.nodes(), &[key], why).await;
}

/// Waits (up to 5 s) until none of `nodes` carries any of lock `keys`,
/// naming `why`.
pub async fn wait_until_gone_from(nodes: &[RedisNode], keys: &[impl AsRef<str>], why: &str) {
    let names: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    let what = format!("{names:?} to be gone from {} node(s) ({why})", nodes.len());
    wait_for(&what, Duration::from_secs(5), || {
        nodes
            .iter()
            .all(|n| keys.iter().all(|k| value_on(n, k.as_ref()).is_none()))
    })
    .await;
}

/// Runs a command on every running node.
pub fn on_every_node(testbed: &Testbed, args: &[&str]) {
    for node in testbed
        .nodes()
        .iter()
        .filter(|n| n.is_running() && !n.is_paused())
    {
        let mut conn = node.connection().expect("connect");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let _: redis::Value = cmd.query(&mut conn).expect("command");
    }
}

/// Polls `condition` until it holds; fails the test, naming `what`, if it
/// does not within `bound`. For waiting on an event another process causes
/// (a key expiring, a resumed server draining its queue).
pub async fn wait_for(what: &str, bound: Duration, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + bound;
    while !condition() {
        assert!(
            Instant::now() < give_up,
            "gave up after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A lock that is connected to every running node before it is returned.
/// Takes a name nobody holds. An acquire with a wait, not a single
/// attempt: a test of timing sets a short node timeout, and a loaded
/// machine (or hundreds of locks asking at once) can stretch one attempt
/// past it (refused and rolled back, the next one takes the name). The
/// wait is only a bound: a free name is taken at the first attempt that
/// hears every node in time.
#[allow(dead_code)]
pub async fn take_free(lock: &MultiLock, name: &str) -> quorumlock::LockGuard {
    lock.acquire(name, quorumlock::Wait::up_to(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("{name} is free: {e}"))
}

/// `lock`, connected to every node. A loaded machine can take longer than
/// the connect timeout (1 s) to connect and load the scripts (three nodes
/// at once did, during a build): warm up again, once the node's connect
/// backoff lets it, within a bound.
pub async fn connected(lock: MultiLock) -> MultiLock {
    let bound = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let results = lock.warm_up().await;
        if results.iter().all(Result::is_ok) {
            return lock;
        }
        assert!(tokio::time::Instant::now() < bound, "warm-up: {results:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nodes the guard's acquire reached: confirmed, or still unanswered when
/// the quorum was decided.
pub fn reached(guard: &LockGuard) -> usize {
    guard
        .nodes()
        .filter(|(_, h)| matches!(h, Hold::Held | Hold::Unknown))
        .count()
}

/// The nodes agree with what the guard says it holds: a `Held` node carries
/// its token; an `Unknown` one carries it or nothing (the request may still
/// be queued there); a `NotHeld` one never carries it. Returns how many
/// nodes carry the token. Only running, unpaused nodes are inspected.
pub fn assert_nodes_match(testbed: &Testbed, guard: &LockGuard) -> usize {
    let mut carrying = 0;
    for (node, (url, hold)) in testbed.nodes().iter().zip(guard.nodes()) {
        if !node.is_running() || node.is_paused() {
            continue;
        }
        let value = value_on(node, guard.key());
        let ours = value.as_deref() == Some(guard.token());
        carrying += usize::from(ours);
        match hold {
            Hold::Held => assert!(ours, "{url} is held but carries {value:?}"),
            Hold::NotHeld => assert!(!ours, "{url} is not held but carries our token"),
            _ => assert!(
                ours || value.is_none(),
                "{url} carries a foreign value {value:?}"
            ),
        }
    }
    carrying
}

/// Retry settings under which a waiter, without a release notice, sleeps
/// far longer than any bound in these tests: a wait that ends early was
/// ended by a notice.
pub fn slow_polling(builder: LockConfigBuilder) -> LockConfigBuilder {
    builder.retry(
        RetryPolicy::default()
            .with_base_delay(Duration::from_secs(60))
            .with_max_delay(Duration::from_secs(60)),
    )
}

/// Spawns `lock.acquire(name)` with a long budget, as another task.
pub fn spawn_waiter(
    lock: &MultiLock,
    name: &'static str,
) -> tokio::task::JoinHandle<Result<LockGuard, Error>> {
    let lock = lock.clone();
    tokio::spawn(async move {
        lock.acquire(name, Wait::up_to(Duration::from_secs(120)))
            .await
    })
}

/// The guard of a waiter of a [`slow_polling`] lock, which only a release
/// notice can wake within the bound.
pub async fn woken_by_notice(
    waiter: tokio::task::JoinHandle<Result<LockGuard, Error>>,
) -> LockGuard {
    tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release notice, long before its backoff")
        .expect("waiter task")
        .expect("acquired")
}

/// Waits until `name`'s release channel has `count` subscribers on every
/// node, naming `what`: a notice published before a waiter listens is
/// lost to it.
pub async fn wait_subscribed(testbed: &Testbed, name: &str, count: i64, what: &str) {
    wait_for(what, Duration::from_secs(5), || {
        testbed
            .nodes()
            .iter()
            .all(|n| subscribers_on(n, name) == count)
    })
    .await;
}
