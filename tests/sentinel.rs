//! Sentinel-managed nodes: real `redis-server --sentinel` processes watch a
//! master and its replica per node. The lock finds each master through the
//! sentinels, follows a `SENTINEL FAILOVER` during a hold (the watchdog
//! keeps the lock), and with the replication link cut before the failover
//! (the promoted replica never saw the key) the lock still holds, past the
//! promoted replica's quarantine: the promoted replica casts no vote for
//! it, and the old master, which may still call itself a master (two
//! masters in one group, with a client connected to the old one), refuses
//! every script once its replica is gone for `min-replicas-max-lag`. A
//! master without that setting gets no vote at all.

use std::time::{Duration, Instant};

use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome, SentinelNode};
use quorumlock_testbed::sentinel::REPLICA_LAG;
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
        b = b.sentinel_node(
            SentinelNode::new(g.service(), g.sentinel_urls()).max_replica_lag(REPLICA_LAG),
        );
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
    quorumlock_testbed::lock_key::owner(&mut conn, key).expect("read the owner")
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
    // Held all along, while the node follows the failover: the new master
    // refuses writes until the old one is its replica (min-replicas), then
    // answers as a young server, whose answers do not count, and the
    // renewal heals the key there.
    let renewals = lock.stats().renewed;
    let began = Instant::now();
    loop {
        assert!(guard.is_held(), "held through the failover");
        let healed = owner_on(&groups[0], "nightly").is_some();
        if healed && lock.stats().nodes[0].quarantined > 0 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "not healed on the new master within 30 s: {:?}",
            lock.stats().nodes[0]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        lock.stats().renewed > renewals,
        "renewed after the failover"
    );
    println!("node 0 after the failover: {:?}", lock.stats().nodes[0]);
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
    // The old master may now replicate from the new one, so that the new
    // master (min-replicas-to-write 1) takes writes.
    groups[0].pair_mut().heal_link().expect("heal the link");
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
    // win while A holds. Node 0's new master casts no vote: it refuses
    // writes until it has a replica again (min-replicas-to-write), then
    // answers as a young server. The old master, cut off, may still think
    // it is one (two masters): it refuses every script after the replica
    // lag (NOREPLICAS). For two seconds of attempts, B never wins.
    for _ in 0..20 {
        let refused = b.try_acquire("payroll").await.expect_err("A still holds");
        assert!(
            matches!(
                refused,
                Error::QuorumNotReached { .. } | Error::Contended { .. }
            ),
            "{refused}"
        );
        let node0 = &refused.node_reports().expect("reports").as_slice()[0].outcome;
        assert!(
            !matches!(node0, NodeOutcome::Won),
            "node 0 voted for B: {refused}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(held.is_held());
    // The old master, cut off from its replica, may still call itself a
    // master now: two masters in one group, and A's connection was to the
    // old one. It refuses every script since the replica lag ran out.
    let old_role: Vec<redis::Value> = redis::cmd("ROLE")
        .query(
            &mut redis::Client::open(format!("redis://{}", groups[0].pair().master().addr()))
                .expect("client")
                .get_connection()
                .expect("connect"),
        )
        .expect("ROLE");
    println!(
        "the old master's role after the failover: {:?}",
        old_role.first()
    );
    // Past the promoted replica's quarantine (the TTL plus the replica lag
    // plus 2 s, from its promotion), B still never wins: A's renewals
    // re-took the name on the free nodes (3 and 4), and the lock holds.
    let past_quarantine = Instant::now() + ttl + REPLICA_LAG + Duration::from_secs(3);
    while Instant::now() < past_quarantine {
        assert!(held.is_held(), "A lost the lock: {:?}", a.stats());
        let refused = b.try_acquire("payroll").await.expect_err("A holds");
        assert!(
            !matches!(
                refused.node_reports().expect("reports").as_slice()[0].outcome,
                NodeOutcome::Won
            ),
            "node 0 voted for B: {refused}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(held.is_held());
    held.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_keeps_writing_alone_gets_no_vote() {
    let groups = groups(1, 1);
    let master = groups[0].master_addr().expect("master");
    let client = redis::Client::open(format!("redis://{master}")).expect("client");
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(0)
        .query(&mut client.get_connection().expect("connect"))
        .expect("CONFIG SET");
    let config = LockConfig::builder()
        .sentinel_node(
            SentinelNode::new(groups[0].service(), groups[0].sentinel_urls())
                .max_replica_lag(REPLICA_LAG),
        )
        .node_timeout(Duration::from_millis(200))
        .build()
        .expect("valid");
    let lock = MultiLock::new(config);
    let refused = lock.try_acquire("x").await.expect_err("no vote");
    let reports = refused.node_reports().expect("reports");
    let error = reports.errors().next().expect("node 0 failed");
    assert!(
        error.detail().contains("min-replicas-to-write 1"),
        "the error says what to set: {error}"
    );
    // A bound the master's lag exceeds is refused too.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .arg("min-replicas-max-lag")
        .arg(30)
        .query(&mut client.get_connection().expect("connect"))
        .expect("CONFIG SET");
    let lock = MultiLock::new(
        LockConfig::builder()
            .sentinel_node(
                SentinelNode::new(groups[0].service(), groups[0].sentinel_urls())
                    .max_replica_lag(REPLICA_LAG),
            )
            .build()
            .expect("valid"),
    );
    let refused = lock.try_acquire("x").await.expect_err("no vote");
    let error = refused
        .node_reports()
        .expect("reports")
        .errors()
        .next()
        .cloned()
        .expect("failed");
    assert!(error.detail().contains("it has 1 and 30"), "{error}");
}
