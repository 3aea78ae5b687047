//! Sentinel-managed nodes: real `redis-server --sentinel` processes watch a
//! master and its replica per node. The lock finds each master through the
//! sentinels, follows a `SENTINEL FAILOVER` during a hold (the watchdog
//! keeps the lock), and with the replication link cut before the failover
//! (the promoted replica never saw the key) the lock still holds: the
//! promoted replica casts no vote for the quarantine.

use std::time::{Duration, Instant};

use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind, NodeOutcome, SentinelNode};
use quorumlock_testbed::{NodeOptions, SentinelGroup};

fn groups(n: usize, sentinels: usize) -> Vec<SentinelGroup> {
    (0..n)
        .map(|i| {
            SentinelGroup::start(&format!("locks-{i}"), sentinels, NodeOptions::default())
                .expect("group")
        })
        .collect()
}

async fn lock_over(groups: &[SentinelGroup], ttl: Duration) -> MultiLock {
    let mut b = LockConfig::builder()
        .ttl(ttl)
        .node_timeout(Duration::from_millis(200))
        .watchdog(true);
    for g in groups {
        b = b.sentinel_node(SentinelNode::new(g.service(), g.sentinel_urls()));
    }
    let lock = MultiLock::new(b.build().expect("valid"));
    // Brand-new servers: adopted, so the test does not wait a quarantine.
    for adopted in lock.adopt_empty_nodes().await {
        adopted.expect("adopt");
    }
    lock
}

/// The lock's key on the current master of `group`.
fn owner_on(group: &SentinelGroup, key: &str) -> Option<String> {
    let master = group.master_addr().expect("master");
    let client = redis::Client::open(format!("redis://{master}")).expect("client");
    let mut conn = client.get_connection().expect("connect");
    redis::cmd("HGET")
        .arg(key)
        .arg("owner")
        .query(&mut conn)
        .expect("HGET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_follows_a_failover_and_keeps_its_hold() {
    let groups = groups(3, 3);
    let ttl = Duration::from_secs(2);
    let lock = lock_over(&groups, ttl).await;
    let shown: Vec<&str> = lock.config().node_urls().collect();
    assert_eq!(shown[0], "redis+sentinel://locks-0");

    let guard = lock.try_acquire("nightly").await.expect("acquire");
    let old = groups[0].master_addr().expect("master");
    let new = groups[0].fail_over().expect("failover");
    assert_ne!(old, new);
    // Two renewal intervals after the failover: renewed all along.
    let renewals = lock.stats().renewed;
    let until = Instant::now() + ttl;
    while Instant::now() < until {
        assert!(guard.is_held(), "held through the failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        lock.stats().renewed >= renewals + 2,
        "renewed after the failover"
    );
    // The node reconnected to the new master: a young server there, whose
    // answers did not count (or counted once its quarantine passed).
    let node = &lock.stats().nodes[0];
    println!("node 0 after the failover: {node:?}");
    assert!(node.quarantined > 0, "the promoted replica was quarantined");
    assert!(
        owner_on(&groups[0], "nightly").is_some(),
        "healed on the new master"
    );
    guard.release().await;
    for g in &groups {
        assert_eq!(owner_on(g, "nightly"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_link_cut_before_the_failover_the_lock_still_holds() {
    let mut groups = groups(5, 1);
    let ttl = Duration::from_secs(10);
    let a = lock_over(&groups, ttl).await;
    let b = lock_over(&groups, ttl).await;
    // A third party holds the name on the last two nodes: A gets a bare
    // majority, {0, 1, 2}.
    for g in &groups[3..] {
        let master = g.master_addr().expect("master");
        let client = redis::Client::open(format!("redis://{master}")).expect("client");
        let mut conn = client.get_connection().expect("connect");
        let () = redis::cmd("HSET")
            .arg("payroll")
            .arg("owner")
            .arg("third party")
            .query(&mut conn)
            .expect("HSET");
    }
    groups[0]
        .pair_mut()
        .cut_link()
        .expect("cut the replication link");
    let held = a.try_acquire("payroll").await.expect("a bare majority");
    assert_eq!(held.held_nodes().count(), 3);
    groups[0]
        .fail_over()
        .expect("failover to the replica that missed the key");
    assert_eq!(owner_on(&groups[0], "payroll"), None, "the key is lost");
    for g in &groups[3..] {
        let master = g.master_addr().expect("master");
        let client = redis::Client::open(format!("redis://{master}")).expect("client");
        let mut conn = client.get_connection().expect("connect");
        let _: u64 = redis::cmd("DEL")
            .arg("payroll")
            .query(&mut conn)
            .expect("DEL");
    }
    // B now finds nodes 0, 3 and 4 free: without the quarantine it would
    // win while A holds.
    let refused = b.try_acquire("payroll").await.expect_err("A still holds");
    let quarantined = refused.node_reports().expect("reports").iter().any(
        |r| matches!(&r.outcome, NodeOutcome::Failed(e) if e.kind() == NodeErrorKind::Quarantined),
    );
    assert!(quarantined, "the promoted replica casts no vote: {refused}");
    assert!(
        matches!(
            refused,
            Error::QuorumNotReached { .. } | Error::Contended { .. }
        ),
        "{refused}"
    );
    assert!(held.is_held());
    held.release().await;
}
