//! `MultiSemaphore` against real nodes: never more than K holders, a
//! waiter gets the first permit that frees, a crashed holder's permit
//! frees after its TTL, the watchdog keeps a permit, K changed for a live
//! name, a node that lost its data votes no slot away, fencing per slot,
//! and rejected inputs. The leftover check runs after every test.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, GuardOptions, LockConfig, MultiSemaphore, Permit, Wait};
use quorumlock_testbed::{Restart, Testbed};

fn semaphore(testbed: &Testbed) -> MultiSemaphore {
    MultiSemaphore::over(&common::lock(testbed))
}

/// A semaphore whose permits may live 1 s: a node timeout of a tenth.
fn brief_semaphore(testbed: &Testbed) -> MultiSemaphore {
    let lock = common::lock_with(testbed, |b| b.node_timeout(Duration::from_millis(100)));
    MultiSemaphore::over(&lock)
}

async fn take(sem: &MultiSemaphore, name: &str, permits: u32) -> Permit {
    sem.acquire(name, permits, Wait::up_to(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("a permit of {name} is free: {e}"))
}

fn assert_contended(result: Result<Permit, Error>) {
    match result {
        Err(Error::Contended { key, .. }) => assert_eq!(key, "jobs", "named by the semaphore"),
        other => panic!("expected Contended, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_k_holders_at_once() {
    let testbed = Testbed::start(3).expect("testbed");
    let sem = semaphore(&testbed);
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (sem, holding, most) = (sem.clone(), Arc::clone(&holding), Arc::clone(&most));
        workers.push(tokio::spawn(async move {
            for _ in 0..10 {
                let permit = take(&sem, "exports", 3).await;
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 3, "{now} holders of 3 permits");
                assert!(permit.slot() < 3);
                tokio::time::sleep(Duration::from_millis(2)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                assert!(permit.release().await.was_held);
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "at most 3 at once, saw {most}");
    assert_eq!(sem.lock().stats().acquired, 80);
}

#[tokio::test]
async fn a_waiter_gets_the_first_permit_that_frees() {
    let testbed = Testbed::start(3).expect("testbed");
    let sem = semaphore(&testbed);
    let a = take(&sem, "jobs", 2).await;
    let b = take(&sem, "jobs", 2).await;
    assert_ne!(a.slot(), b.slot());
    assert_contended(sem.try_acquire("jobs", 2).await);
    let waiting = sem.clone();
    let waiter = tokio::spawn(async move { take(&waiting, "jobs", 2).await });
    common::wait_for("the waiter to wait", Duration::from_secs(10), || {
        sem.lock().stats().attempts >= 4
    })
    .await;
    let freed = b.slot();
    b.release().await;
    let next = waiter.await.expect("waiter");
    assert_eq!(next.slot(), freed, "the slot that freed");
    assert!(a.is_held());
    next.release().await;
    a.release().await;
}

#[tokio::test]
async fn a_crashed_holders_permit_frees_after_its_ttl() {
    let testbed = Testbed::start(3).expect("testbed");
    let sem = brief_semaphore(&testbed);
    let brief = GuardOptions::default()
        .ttl(Duration::from_secs(1))
        .watchdog(false);
    let crashed = sem
        .acquire_with("jobs", 1, Wait::NONE, &brief)
        .await
        .expect("free");
    // A holder that dies keeps no connection and sends no release: its
    // permit stays on the nodes until the TTL.
    std::mem::forget(crashed);
    assert_contended(sem.try_acquire("jobs", 1).await);
    let next = take(&sem, "jobs", 1).await;
    assert_eq!(next.slot(), 0);
    next.release().await;
}

#[tokio::test]
async fn the_watchdog_keeps_a_permit_past_its_ttl() {
    let testbed = Testbed::start(3).expect("testbed");
    let sem = brief_semaphore(&testbed);
    let watched = GuardOptions::default()
        .ttl(Duration::from_secs(1))
        .watchdog(true);
    let permit = sem
        .acquire_with("jobs", 1, Wait::NONE, &watched)
        .await
        .expect("free");
    assert!(permit.is_watched());
    let renewed = || sem.lock().stats().renewals >= 4;
    common::wait_for("four renewals", Duration::from_secs(20), renewed).await;
    assert!(permit.is_held());
    assert_contended(sem.try_acquire("jobs", 1).await);
    assert!(permit.release().await.was_held);
}

#[tokio::test]
async fn lowering_k_stops_new_permits_above_it_and_revokes_none() {
    let testbed = Testbed::start(3).expect("testbed");
    let sem = semaphore(&testbed);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(take(&sem, "jobs", 3).await);
    }
    held.sort_by_key(Permit::slot);
    // K lowered to 2: slots 0 and 1 are taken, so nothing is granted.
    assert_contended(sem.try_acquire("jobs", 2).await);
    // Slot 2 freeing does not help a caller with K = 2 ...
    let third = held.pop().expect("slot 2");
    assert_eq!(third.slot(), 2);
    third.release().await;
    assert_contended(sem.try_acquire("jobs", 2).await);
    // ... slot 0 freeing does.
    let first = held.remove(0);
    first.release().await;
    let lowered = sem.try_acquire("jobs", 2).await.expect("slot 0 is free");
    assert_eq!(lowered.slot(), 0);
    // Raised to 5: slots 2 to 4 are there at once.
    let raised = sem.try_acquire("jobs", 5).await.expect("a slot above 1");
    assert!((2..5).contains(&raised.slot()));
    for permit in [lowered, raised].into_iter().chain(held) {
        assert!(permit.release().await.was_held, "no permit was revoked");
    }
}

#[tokio::test]
async fn nodes_that_lost_their_data_vote_no_permit_away() {
    let mut testbed = Testbed::start(3).expect("testbed");
    // The permit on every node, so that two restarts take the hold away
    // from a majority.
    let sem = MultiSemaphore::over(&common::every_node_lock(&testbed).await);
    let held = take(&sem, "jobs", 1).await;
    for node in 0..2 {
        testbed
            .node_mut(node)
            .restart(Restart::immediate().wiping())
            .expect("restart empty");
    }
    // n0 and n1 would grant the slot, but they are young: no vote.
    let other = MultiSemaphore::over(&common::lock(&testbed));
    match other.try_acquire("jobs", 1).await {
        Err(Error::Contended { .. } | Error::QuorumNotReached { .. }) => {}
        other => panic!("a second holder of 1 permit: {other:?}"),
    }
    held.release().await;
}

#[tokio::test]
async fn fencing_tokens_rise_across_the_holders_of_a_slot() {
    let testbed = Testbed::start(3).expect("testbed");
    let sem = semaphore(&testbed);
    let first = take(&sem, "jobs", 1).await;
    let t1 = first.fencing_token().await.expect("token");
    first.release().await;
    let second = take(&sem, "jobs", 1).await;
    let t2 = second.fencing_token().await.expect("token");
    assert!(t2 > t1, "{t2} after {t1}");
    assert_eq!(second.key(), "quorumlock:permit:jobs:0");
    second.release().await;
}

#[tokio::test]
async fn bad_permits_and_names_are_refused_by_value() {
    let testbed = Testbed::start(1).expect("testbed");
    let sem = semaphore(&testbed);
    for permits in [0, MultiSemaphore::MAX_PERMITS + 1, u32::MAX] {
        match sem.try_acquire("jobs", permits).await {
            Err(Error::InvalidPermits {
                permits: p, name, ..
            }) => {
                assert_eq!((p, name.as_str()), (permits, "jobs"));
            }
            other => panic!("{permits} permits: {other:?}"),
        }
    }
    for name in ["quorumlock:epoch", "", "quorumlock:permit:jobs:1"] {
        assert!(
            matches!(
                sem.try_acquire(name, 2).await,
                Err(Error::InvalidKey { .. })
            ),
            "{name:?}"
        );
    }
    // The config is checked as for any lock.
    assert!(LockConfig::builder().build().is_err());
}
