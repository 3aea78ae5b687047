//! A guard's own TTL and watchdog setting (`GuardOptions`), one lock
//! service for every lease length: the keys carry the guard's TTL, its
//! validity and renewals follow it, a waiter with its own TTL gets the
//! name after a release with its own TTL (never handed over with the
//! lock's), and a TTL that cannot work is a typed error.

mod common;

use std::time::Duration;

use quorumlock::{ConfigError, Error, GuardOptions, LostReason, Wait};
use quorumlock_testbed::Testbed;

/// A lock with a 30 s TTL, no watchdog, node timeout 100 ms.
fn lock(testbed: &Testbed) -> quorumlock::MultiLock {
    common::lock_with(testbed, |b| b.node_timeout(Duration::from_millis(100)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_with_its_own_short_ttl_expires_by_it() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(lock(&testbed)).await;
    let short = GuardOptions::default().ttl(Duration::from_millis(1500));
    let guard = lock.try_acquire_with("cache", &short).await.expect("free");
    assert!(guard.validity() <= Duration::from_millis(1500));
    // On the nodes of its quorum (a third may answer after the decision).
    let pttls: Vec<i64> = testbed
        .nodes()
        .iter()
        .map(|node| common::pttl_on(node, "cache"))
        .filter(|pttl| *pttl != -2)
        .collect();
    assert!(pttls.len() >= 2, "{pttls:?}");
    assert!(
        pttls.iter().all(|pttl| 0 < *pttl && *pttl <= 1500),
        "the key's TTL is the guard's: {pttls:?}"
    );
    let notice = guard.lost().await;
    assert_eq!(notice.reason, LostReason::ValidityExpired);
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_for_one_guard_of_a_lock_without_it() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(lock(&testbed)).await;
    let watched = GuardOptions::default()
        .ttl(Duration::from_secs(1))
        .watchdog(true);
    let guard = lock
        .try_acquire_with("reindex", &watched)
        .await
        .expect("free");
    // Past the guard's own TTL: held only because the watchdog renewed it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guard.is_held());
    assert!(guard.last_renewal().is_some(), "renewed");
    assert!(lock.stats().renewed >= 2);
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_its_own_ttl_gets_the_name_with_it() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(lock(&testbed)).await;
    let holder = lock.try_acquire("ledger").await.expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let own = GuardOptions::default().ttl(Duration::from_secs(5));
            lock.acquire_with("ledger", Wait::up_to(Duration::from_secs(10)), &own)
                .await
        })
    };
    // Let the waiter queue, then release: a handoff would set 30 s.
    common::wait_for("the waiter to wait", Duration::from_secs(5), || {
        lock.stats().attempts >= 2
    })
    .await;
    holder.release().await;
    let guard = waiter.await.expect("join").expect("the waiter gets it");
    for node in testbed.nodes() {
        let pttl = common::pttl_on(node, "ledger");
        assert!(
            pttl <= 5_000,
            "the waiter's own TTL, not the lock's: {pttl}"
        );
    }
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_that_cannot_work_is_a_typed_error() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = lock(&testbed); // node timeout 100 ms
    let too_short = GuardOptions::default().ttl(Duration::from_millis(500));
    match lock.try_acquire_with("x", &too_short).await {
        Err(Error::Config(ConfigError::NodeTimeoutOutOfRange { ttl, .. })) => {
            assert_eq!(ttl, Duration::from_millis(500));
        }
        other => panic!("expected a typed configuration error, got {other:?}"),
    }
}
