//! The blocking API (feature `blocking`) from plain `#[test]` functions and
//! plain threads, against real redis-servers: contending threads never
//! overlap and see rising fencing tokens, the watchdog renews while a
//! thread works, a dropped guard is released before its drop returns, and
//! synchronous scoped work learns of a loss.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::blocking::MultiLock;
use quorumlock::{Error, LockConfig, LostReason, Wait};
use quorumlock_testbed::Testbed;

fn blocking_lock(testbed: &Testbed, ttl: Duration, watchdog: bool) -> MultiLock {
    let config = LockConfig::builder()
        .nodes(testbed.urls())
        .ttl(ttl)
        .node_timeout((ttl / 10).min(Duration::from_secs(1)))
        .watchdog(watchdog)
        .build()
        .expect("valid configuration");
    MultiLock::new(config).expect("runtime thread")
}

#[test]
fn contending_threads_never_overlap_and_see_rising_tokens() {
    let testbed = Testbed::start(3).expect("nodes");
    let lock = blocking_lock(&testbed, Duration::from_secs(10), false);
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (lock, inside, tokens) = (lock.clone(), Arc::clone(&inside), Arc::clone(&tokens));
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let guard = lock
                        .acquire("counter", Wait::up_to(Duration::from_secs(20)))
                        .expect("acquire within the budget");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    let token = guard.fencing_token().expect("fencing token");
                    tokens.lock().unwrap().push(token);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().was_held);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("worker thread");
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 60);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in holding order must rise: {tokens:?}"
    );
}

#[test]
fn the_watchdog_renews_while_a_thread_works() {
    let testbed = Testbed::start(3).expect("nodes");
    let lock = blocking_lock(&testbed, Duration::from_secs(1), true);
    let guard = lock.try_acquire("long-job").expect("acquire");
    let began = Instant::now();
    // Three renewals: the lock outlives three TTLs' worth of renew
    // intervals while this thread does nothing async at all.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "no third renewal in 20 s"
        );
        if let Some(renewal) = guard.last_renewal()
            && seen.last() != Some(&renewal.started)
        {
            seen.push(renewal.started);
        }
        assert!(guard.is_held(), "lost while the watchdog should renew");
        // Wakes at the loss or after a short pause: bounded, and a loss
        // ends the wait at once.
        assert!(guard.wait_lost(Duration::from_millis(50)).is_none());
    }
    assert!(guard.validity() > Duration::ZERO);
    assert!(guard.release().was_held);
}

#[test]
fn a_dropped_guard_is_released_before_the_drop_returns() {
    let testbed = Testbed::start(3).expect("nodes");
    let lock = blocking_lock(&testbed, Duration::from_secs(30), false);
    {
        let guard = lock.try_acquire("scoped").expect("acquire");
        assert!(guard.is_held());
    }
    assert_eq!(
        common::values(&testbed, "scoped"),
        vec![None, None, None],
        "the key must be gone from every node when the scope ends"
    );
    // Also when the lock service went first: the guard keeps its runtime.
    let guard = lock.try_acquire("scoped").expect("acquire again");
    drop(lock);
    assert!(guard.release().was_held);
    assert_eq!(common::values(&testbed, "scoped"), vec![None, None, None]);
}

#[test]
fn scoped_work_returns_its_value_and_learns_of_a_loss() {
    let testbed = Testbed::start(3).expect("nodes");
    let lock = blocking_lock(&testbed, Duration::from_secs(30), false);
    let value = lock
        .run_exclusive("job", Wait::up_to(Duration::from_secs(1)), |held| {
            assert!(held.is_held() && held.is_watched());
            7
        })
        .expect("scoped work");
    assert_eq!(value, 7);

    let operator = lock.clone();
    let outcome = lock.run_exclusive("job", Wait::up_to(Duration::from_secs(1)), |held| {
        operator.force_release("job").expect("a lock name");
        held.wait_lost(Duration::from_secs(10)).map(|n| n.reason)
    });
    match outcome {
        Err(Error::Lost { key, reason }) => {
            assert_eq!(key, "job");
            assert_eq!(reason, LostReason::ForceReleased);
        }
        other => panic!("expected the loss, got {other:?}"),
    }
}

#[test]
fn scoped_work_that_panics_releases_the_lock() {
    let testbed = Testbed::start(3).expect("nodes");
    let lock = blocking_lock(&testbed, Duration::from_secs(30), false);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        lock.run_exclusive("fragile", Wait::NONE, |_| panic!("the work failed"))
    }));
    assert!(panicked.is_err());
    assert_eq!(common::values(&testbed, "fragile"), vec![None, None, None]);
    lock.try_acquire("fragile")
        .expect("free after the panic")
        .release();
}

#[test]
fn re_entry_extend_and_several_names() {
    let testbed = Testbed::start(3).expect("nodes");
    let lock = blocking_lock(&testbed, Duration::from_secs(5), false);
    let mut outer = lock.try_acquire("ledger").expect("acquire");
    let inner = outer.reenter().expect("re-enter");
    assert!(inner.release().kept > 0, "the outer hold keeps the key");
    let validity = outer.extend(Duration::from_secs(20)).expect("extend");
    assert!(validity > Duration::from_secs(10));
    // On the quorum that decided the extend (not necessarily node 0).
    let extended = testbed
        .nodes()
        .iter()
        .filter(|n| common::pttl_on(n, "ledger") > 10_000)
        .count();
    assert!(extended >= 2, "extended on {extended} of 3 nodes");
    outer.release();

    let both = lock
        .acquire_all(&["a", "b"], Wait::up_to(Duration::from_secs(1)))
        .expect("both names");
    assert!(matches!(
        lock.try_acquire_all(&["b", "c"]),
        Err(Error::Contended { .. })
    ));
    both.release();
}
