//! The core promise: two owners never hold one lock at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use quorumlock::{Error, RetryPolicy, Wait};
use quorumlock_testbed::Testbed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_never_hold_one_key_at_once() {
    let testbed = Testbed::start(5).expect("testbed");
    let a = common::connected(common::lock(&testbed)).await;
    let b = common::connected(common::lock(&testbed)).await;

    let guard = a
        .try_acquire("order:1")
        .await
        .expect("a acquires a free lock");
    assert!(guard.is_held());
    assert_eq!(common::reached(&guard), 5, "every node got the request");
    match b.try_acquire("order:1").await {
        Err(Error::Contended { free_in, nodes, .. }) => {
            let free_in = free_in.expect("a's keys have a TTL");
            assert!(
                free_in > Duration::from_secs(25) && free_in <= Duration::from_secs(30),
                "{free_in:?}"
            );
            assert_eq!(nodes.len(), 5);
        }
        other => panic!("b must be refused while a holds the lock, got {other:?}"),
    }
    let carrying = common::assert_nodes_match(&testbed, &guard);
    assert!(carrying >= 3);
    let report = guard.release().await;
    assert_eq!((report.released, report.was_held), (carrying, true));
    assert!(report.failed.is_empty());
    let guard = b
        .try_acquire("order:1")
        .await
        .expect("b acquires once a released");
    guard.release().await;
}

/// Eight tasks on two independent clients increment a counter with a
/// read-yield-write under the lock. Any overlap of two holders would show up
/// as a lost update or as the "inside" flag already set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_counter_equals_acquisitions() {
    let testbed = Testbed::start(5).expect("testbed");
    let retry = RetryPolicy::default()
        .with_base_delay(Duration::from_millis(1))
        .with_max_delay(Duration::from_millis(8));
    let clients = [
        common::lock_with(&testbed, |b| b.retry(retry.clone())),
        common::lock_with(&testbed, |b| b.retry(retry.clone())),
    ];
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let acquisitions = Arc::new(AtomicU64::new(0));
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let lock = clients[t % 2].clone();
        let (counter, inside, acquisitions) =
            (counter.clone(), inside.clone(), acquisitions.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock
                    .acquire("counter", Wait::up_to(Duration::from_secs(20)))
                    .await
                    .expect("acquire within budget");
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two holders inside the critical section"
                );
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                acquisitions.fetch_add(1, Ordering::SeqCst);
                assert!(guard.is_held(), "work finished within validity");
                inside.store(false, Ordering::SeqCst);
                let report = guard.release().await;
                assert!(report.was_held);
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    let acquisitions = acquisitions.load(Ordering::SeqCst);
    assert_eq!(acquisitions, (TASKS * ROUNDS) as u64);
    assert_eq!(counter.load(Ordering::SeqCst), acquisitions);
    assert!(
        common::values(&testbed, "counter")
            .iter()
            .all(Option::is_none),
        "no key left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_budget_is_reported_when_the_holder_keeps_the_lock() {
    let testbed = Testbed::start(3).expect("testbed");
    let holder = common::lock(&testbed);
    let waiter = common::lock_with(&testbed, |b| {
        b.retry(RetryPolicy::default().with_max_attempts(3))
    });
    let guard = holder.try_acquire("k").await.expect("holder");
    match waiter
        .acquire("k", Wait::up_to(Duration::from_secs(5)))
        .await
    {
        Err(Error::WaitBudgetExhausted { attempts, last, .. }) => {
            assert_eq!(attempts, 3);
            assert!(matches!(*last, Error::Contended { .. }), "{last:?}");
        }
        other => panic!("expected WaitBudgetExhausted, got {other:?}"),
    }
    guard.release().await;
}
