//! Owner-checked release and extend.

mod common;

use std::time::Duration;

use quorumlock::{Error, Hold, LockGuard, LostReason};
use quorumlock_testbed::Testbed;

const SHORT_TTL: Duration = Duration::from_millis(300);

/// Waits until the guard's validity deadline has passed (the event is the
/// deadline itself; the loop is bounded).
async fn outlive(guard: &LockGuard) {
    for _ in 0..100 {
        if !guard.is_held() {
            return;
        }
        tokio::time::sleep(guard.validity() + Duration::from_millis(1)).await;
    }
    panic!("guard still held after 100 waits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_owner_release_deletes_nothing_and_release_after_expiry_is_not_held() {
    let testbed = Testbed::start(5).expect("testbed");
    let a = common::lock_with(&testbed, |b| b.ttl(SHORT_TTL).node_timeout(SHORT_TTL / 10));
    let b = common::connected(common::lock(&testbed)).await;

    let stale = a.try_acquire("stock").await.expect("a acquires");
    outlive(&stale).await;
    common::wait_until_gone(&testbed, "stock", "a's keys to expire on every node").await;
    let current = b
        .try_acquire("stock")
        .await
        .expect("b acquires after a expired");

    // a is no longer the owner: its release must not touch b's keys.
    let report = stale.release().await;
    assert!(!report.was_held, "released after its deadline");
    assert_eq!((report.released, report.not_held), (0, 5));
    assert!(
        common::assert_nodes_match(&testbed, &current) >= 3,
        "b's keys are untouched"
    );
    assert!(current.is_held());
    current.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_extend_keeps_the_lock_past_its_original_ttl() {
    let testbed = Testbed::start(5).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(SHORT_TTL).node_timeout(SHORT_TTL / 10)
    }))
    .await;
    let mut guard = lock.try_acquire("batch").await.expect("acquire");
    assert!(guard.validity() < SHORT_TTL);

    let validity = guard
        .extend(Duration::from_secs(20))
        .await
        .expect("owner extends");
    assert!(validity > Duration::from_secs(19), "{validity:?}");
    assert!(guard.validity() > Duration::from_secs(19));
    // Every node that confirmed the extend carries the new TTL: far beyond
    // the original 300 ms.
    let confirmed: Vec<bool> = guard.nodes().map(|(_, h)| h == Hold::Held).collect();
    assert!(confirmed.iter().filter(|c| **c).count() >= 3);
    for (node, _) in testbed.nodes().iter().zip(&confirmed).filter(|(_, c)| **c) {
        let pttl = common::pttl_on(node, "batch");
        assert!(pttl > 19_000, "pttl {pttl} on {}", node.url());
    }
    // And the key outlives the original TTL: the guard's first deadline
    // passes while the lock stays ours.
    let original_deadline = quorumlock::Stamp::now().after(SHORT_TTL);
    tokio::time::sleep(original_deadline.remaining()).await;
    assert!(guard.is_held());
    assert!(matches!(
        lock.try_acquire("batch").await,
        Err(Error::Contended { .. })
    ));
    let carrying = common::assert_nodes_match(&testbed, &guard);
    assert_eq!(guard.release().await.released, carrying);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_after_expiry_fails_as_lost() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock_with(&testbed, |b| b.ttl(SHORT_TTL).node_timeout(SHORT_TTL / 10));
    let mut guard = lock.try_acquire("late").await.expect("acquire");
    outlive(&guard).await;
    match guard.extend(Duration::from_secs(10)).await {
        Err(Error::Lost {
            reason: LostReason::ValidityExpired,
            ..
        }) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(!guard.is_held());
    assert_eq!(guard.validity(), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_when_keys_are_gone_reports_lost_at_once() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock(&testbed);
    let mut guard = lock.try_acquire("vanished").await.expect("acquire");
    // The acquire decided at the quorum; the third node's write may still
    // be on its way (a busy machine), and a DEL before it would leave it.
    common::wait_for("the acquire on every node", Duration::from_secs(10), || {
        common::values(&testbed, "vanished")
            .iter()
            .all(Option::is_some)
    })
    .await;
    // An operator deletes the keys behind the holder's back.
    common::on_every_node(&testbed, &["DEL", "vanished"]);
    match guard.extend(Duration::from_secs(30)).await {
        Err(Error::Lost {
            reason: LostReason::KeysGone(nodes),
            ..
        }) => assert_eq!(nodes.len(), 3),
        other => panic!("expected Lost(KeysGone), got {other:?}"),
    }
    assert!(
        !guard.is_held(),
        "a guard that cannot prove its hold reports it at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_rejects_a_ttl_that_cannot_work() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock(&testbed);
    let mut guard = lock.try_acquire("ttl").await.expect("acquire");
    match guard.extend(Duration::ZERO).await {
        Err(Error::Config(quorumlock::ConfigError::TtlOutOfRange { ttl, .. })) => {
            assert_eq!(ttl, Duration::ZERO)
        }
        other => panic!("expected TtlOutOfRange, got {other:?}"),
    }
    assert!(
        guard.is_held(),
        "a rejected argument does not touch the lock"
    );
    guard.release().await;
}

/// A release future dropped at any of its await points still releases, in
/// the background: no node keeps the key until its TTL (30 s here; the
/// wait below gives up after 5 s). Polled k times, then dropped, for k from
/// 0 (never polled) until a release finishes within its polls. The bound is
/// generous: on a loaded machine a yield may pass before any reply lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_still_releases_everywhere() {
    let testbed = Testbed::start(3).expect("testbed");
    // Wake-ups on: a release also announces itself, one more await point.
    let lock = common::connected(common::lock(&testbed)).await;
    let mut finished = false;
    for polls in 0..1024 {
        let guard = lock.try_acquire("ledger").await.expect("free");
        let mut release = Box::pin(guard.release());
        for _ in 0..polls {
            if futures::poll!(release.as_mut()).is_ready() {
                finished = true;
                break;
            }
            // Let the calls make progress between polls.
            tokio::task::yield_now().await;
        }
        drop(release);
        common::wait_until_gone(&testbed, "ledger", &format!("dropped after {polls} polls")).await;
        if finished {
            break;
        }
    }
    assert!(finished, "a release finished within 1024 polls");
}
