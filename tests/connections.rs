//! A lock service owns its connections: once every `MultiLock` clone and
//! every guard is gone, its node and subscriber connections close at once,
//! not a TTL later (nothing below the service may keep it alive).

mod common;

use std::time::Duration;

use quorumlock::{Error, MultiLock, Wait};
use quorumlock_testbed::{RedisNode, Testbed};

/// Clients connected to `node`, not counting the connection that asks.
fn clients_on(node: &RedisNode) -> usize {
    let mut conn = node.connection().expect("inspect node");
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut conn)
        .expect("CLIENT LIST");
    list.lines().count().saturating_sub(1)
}

fn clients(testbed: &Testbed) -> Vec<usize> {
    testbed.nodes().iter().map(clients_on).collect()
}

/// Far longer than the wait below: a leaked watchdog entry would keep the
/// connections for about this long.
const TTL: Duration = Duration::from_secs(30);

/// What a dropped lock service may take to close: a few scheduler turns
/// and the server noticing the closed sockets, nowhere near a TTL.
const AT_ONCE: Duration = Duration::from_secs(2);

async fn watched_lock(testbed: &Testbed) -> MultiLock {
    common::connected(common::lock_with(testbed, |b| b.ttl(TTL).watchdog(true))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_locks_with_the_watchdog_close_their_connections_at_once() {
    let testbed = Testbed::start(3).expect("testbed");
    let before = clients(&testbed);
    let mut locks = Vec::new();
    for i in 0..10 {
        let lock = watched_lock(&testbed).await;
        let guard = lock.try_acquire(&format!("job:{i}")).await.expect("free");
        assert!(guard.is_watched());
        if i % 2 == 0 {
            guard.release().await;
        } else {
            // Dropped without release: the release runs in the background.
            drop(guard);
        }
        locks.push(lock);
    }
    let during = clients(&testbed);
    assert!(
        during.iter().zip(&before).all(|(d, b)| *d >= b + 10),
        "ten lock services hold ten connections per node: {before:?} -> {during:?}"
    );
    drop(locks);
    common::wait_for(
        "every connection of the dropped locks to close",
        AT_ONCE,
        || clients(&testbed) == before,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lock_closes_its_wake_up_subscribers_too() {
    let testbed = Testbed::start(3).expect("testbed");
    let before = clients(&testbed);
    let holder = watched_lock(&testbed).await;
    let waiter = watched_lock(&testbed).await;
    let guard = holder.try_acquire("x").await.expect("free");
    // The waiter subscribes to release notices while it waits.
    match waiter
        .acquire("x", Wait::up_to(Duration::from_millis(300)))
        .await
    {
        Err(Error::WaitBudgetExhausted { .. }) => {}
        other => panic!("expected the wait to run out, got {other:?}"),
    }
    assert!(waiter.stats().attempts >= 1);
    guard.release().await;
    drop(holder);
    drop(waiter);
    common::wait_for(
        "every node and subscriber connection to close",
        AT_ONCE,
        || clients(&testbed) == before,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_guard_keeps_its_connections_after_the_lock_is_dropped() {
    let testbed = Testbed::start(3).expect("testbed");
    let before = clients(&testbed);
    let lock = watched_lock(&testbed).await;
    let mut guard = lock.try_acquire("job").await.expect("free");
    drop(lock);
    // The guard still renews, extends and releases over the same
    // connections.
    let validity = guard.extend(TTL).await.expect("extend");
    assert!(validity > TTL / 2);
    assert!(clients(&testbed).iter().zip(&before).all(|(d, b)| d > b));
    // A majority is what the guard is sure of: a node whose acquire had not
    // left the client when the quorum was won was skipped (see
    // `fanout`), and extending heals no key.
    let confirmed = guard.held_nodes().count();
    let report = guard.release().await;
    assert!(
        report.released >= confirmed.max(2) && report.failed.is_empty(),
        "released where held ({confirmed} confirmed): {report:?}"
    );
    common::wait_for(
        "the guard's connections to close after its release",
        AT_ONCE,
        || clients(&testbed) == before,
    )
    .await;
}
