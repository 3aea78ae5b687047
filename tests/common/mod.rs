//! Helpers shared by the integration tests: lock construction over a
//! testbed, direct inspection of every node, and bounded waits on events.
#![allow(dead_code)] // each test binary uses a different subset

use std::time::{Duration, Instant};

use quorumlock::{Hold, LockConfig, LockConfigBuilder, LockGuard, MultiLock};
use quorumlock_testbed::{RedisNode, Testbed};

/// A lock over every node of `testbed`, configured by `configure`.
pub fn lock_with(
    testbed: &Testbed,
    configure: impl FnOnce(LockConfigBuilder) -> LockConfigBuilder,
) -> MultiLock {
    let builder = LockConfig::builder()
        .nodes(testbed.urls())
        .ttl(Duration::from_secs(30));
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

/// The value of `key` on one node (`None`: absent).
pub fn value_on(node: &RedisNode, key: &str) -> Option<String> {
    let mut conn = node.connection().expect("inspect node");
    redis::cmd("GET").arg(key).query(&mut conn).expect("GET")
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

/// How many scripts (`EVALSHA`) each node has run so far: the baseline for
/// [`wait_for_scripts`].
pub fn script_counts(nodes: &[RedisNode]) -> Vec<u64> {
    nodes.iter().map(|n| calls_on(n, "evalsha")).collect()
}

/// Waits until `node` has run at least `at_least` script calls (`EVALSHA`):
/// the event that a queued acquire and its rollback have both run there.
pub async fn wait_for_scripts(node: &RedisNode, at_least: u64) {
    let what = format!("{} to run {at_least} scripts", node.url());
    wait_for(&what, Duration::from_secs(5), || {
        calls_on(node, "evalsha") >= at_least
    })
    .await;
}

/// Waits until no node carries `key` (expired or deleted), naming `why`.
pub async fn wait_until_gone(testbed: &Testbed, key: &str, why: &str) {
    let what = format!("{key:?} to be gone from every node ({why})");
    wait_for(&what, Duration::from_secs(5), || {
        values(testbed, key).iter().all(Option::is_none)
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
pub async fn connected(lock: MultiLock) -> MultiLock {
    let results = lock.warm_up().await;
    assert!(results.iter().all(Result::is_ok), "warm-up: {results:?}");
    lock
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
