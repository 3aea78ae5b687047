//! What the hostile-server tests share: every misbehaviour of the kit, a
//! lock over real and hostile nodes, and a bounded acquire+release.
#![allow(dead_code)]

use std::time::Duration;

use quorumlock::{LockConfig, MultiLock, Wait};
use quorumlock_testbed::Testbed;
use quorumlock_testbed::hostile::{HostileServer, Misbehaviour};

/// Every misbehaviour the kit has, with the error replies a Redis-like
/// server (or a proxy, or a cluster node) can send.
pub fn every_misbehaviour() -> Vec<Misbehaviour> {
    let mut all = vec![
        Misbehaviour::CloseOnAccept,
        Misbehaviour::Silent,
        Misbehaviour::Garbage,
        Misbehaviour::Trickle,
        Misbehaviour::WrongType,
        Misbehaviour::CloseMidReply,
        Misbehaviour::HandshakeThenSilent,
        Misbehaviour::Late(Duration::from_millis(100)),
        // A vote reply reporting a settled epoch marker too long to keep
        // around a winning acquire reply ({1, no counter, not current}): only
        // the length check keeps it from counting as a vote. And one without
        // the reply it should wrap.
        Misbehaviour::Lie(
            format!(
                "*3\r\n$7\r\nsettled\r\n$300\r\n{}\r\n*3\r\n:1\r\n$-1\r\n:0\r\n",
                "x".repeat(300)
            )
            .into_bytes(),
        ),
        Misbehaviour::Lie(b"*2\r\n$7\r\nsettled\r\n$3\r\nabc\r\n".to_vec()),
    ];
    for error in [
        "ERR unknown command",
        "NOSCRIPT No matching script. Please use EVAL.",
        "READONLY You can't write against a read only replica.",
        "LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script.",
        "MOVED 3999 127.0.0.1:6381",
        "NOAUTH Authentication required.",
        "WRONGPASS invalid username-password pair or user is disabled.",
    ] {
        all.push(Misbehaviour::ErrorReply(error.into()));
    }
    all
}

pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// No operation may take longer (a hang is a failure, not a slow test).
pub const BOUND: Duration = Duration::from_secs(5);

/// A lock over `urls`, its connections made (or given up) first: a timed
/// round must not include a connect, which a busy machine can stretch past
/// the short node timeout these tests use.
pub async fn lock_over(urls: Vec<String>, wake_ups: bool) -> MultiLock {
    let lock = MultiLock::new(
        LockConfig::builder()
            .nodes(urls)
            .ttl(Duration::from_secs(2))
            .node_timeout(NODE_TIMEOUT)
            .wake_ups(wake_ups)
            .build()
            .expect("valid"),
    );
    let _ = lock.warm_up().await;
    lock
}

/// Resident memory of this process, in bytes (`VmRSS`).
pub fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// One acquire and release of `name`, each bounded by [`BOUND`], on a lock
/// whose real nodes are a majority. The acquire may retry within the bound:
/// on a busy machine a real node can miss the short node timeout these
/// tests use, and the round then fails for want of it, not of the hostile
/// node (each such round shows in `LockStats::quorum_not_reached`).
pub async fn acquire_and_release(lock: &MultiLock, name: &str) {
    let guard = tokio::time::timeout(BOUND, lock.acquire(name, Wait::up_to(BOUND / 2)))
        .await
        .expect("acquire hung")
        .expect("the real nodes are a majority");
    tokio::time::timeout(BOUND, guard.release())
        .await
        .expect("release hung");
}

/// A hostile server with `misbehaviour` as the last node of a lock over
/// `testbed`'s real nodes ([`lock_over`]).
pub async fn one_beside(
    testbed: &Testbed,
    misbehaviour: Misbehaviour,
    wake_ups: bool,
) -> (HostileServer, MultiLock) {
    let hostile = HostileServer::start(misbehaviour).expect("hostile");
    let mut urls = testbed.urls();
    urls.push(hostile.url());
    let lock = lock_over(urls, wake_ups).await;
    (hostile, lock)
}
