//! The watchdog against real nodes: renewal past the TTL, healing, loss
//! before the deadline, paused nodes, the scoped helper, and release racing
//! a renewal in flight.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quorumlock::{Error, Hold, LockConfigBuilder, LockGuard, LostReason, MultiLock, Stamp, Wait};
use quorumlock_testbed::{Restart, Testbed};

/// Short TTLs keep the tests quick; the node timeout is the largest allowed
/// (a tenth of the TTL) so that a busy machine does not time out live nodes.
fn watched(ttl: Duration) -> impl FnOnce(LockConfigBuilder) -> LockConfigBuilder {
    move |b| b.ttl(ttl).node_timeout(ttl / 10).watchdog(true)
}

/// `n` fresh nodes, a connected lock with the watchdog on, and a guard on
/// "job".
async fn holding(n: usize, ttl: Duration) -> (Testbed, MultiLock, LockGuard) {
    let testbed = Testbed::start(n).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, watched(ttl))).await;
    let guard = common::take_free(&lock, "job").await;
    (testbed, lock, guard)
}

/// A bound for waiting on renewals: several renewal intervals.
fn renewals_bound(ttl: Duration) -> Duration {
    ttl * 4
}

/// Waits until the guard has a renewal that started after `since`.
async fn renewed_after(guard: &LockGuard, since: Stamp, bound: Duration) {
    common::wait_for("a renewal", bound, || {
        guard.last_renewal().is_some_and(|r| r.started > since)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_keeps_the_lock_for_three_ttls_and_a_contender_never_wins() {
    let ttl = Duration::from_secs(2);
    let testbed = Testbed::start(5).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, watched(ttl))).await;
    let contender = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10)
    }))
    .await;

    let guard = common::take_free(&lock, "job").await;
    assert!(guard.is_watched());
    let acquired = Stamp::now();
    let mut attempts = 0u32;
    // The contender tries the whole time the holder works (3 × TTL).
    while acquired.elapsed() < ttl * 3 {
        attempts += 1;
        match contender.try_acquire("job").await {
            Err(Error::Contended { .. }) => {}
            other => panic!(
                "attempt {attempts} after {:?}: {other:?}",
                acquired.elapsed()
            ),
        }
        assert!(guard.is_held(), "lost after {:?}", acquired.elapsed());
        assert!(attempts < 100_000, "loop bound");
    }
    let renewals = lock.stats().renewed;
    assert!(
        renewals >= 6,
        "3 TTLs need about 9 renewals, saw {renewals}"
    );
    assert_eq!(lock.stats().lost, 0);

    let report = guard.release().await;
    assert!(report.was_held);
    assert_eq!(lock.stats().watched, 0, "release stops the watchdog");
    contender
        .try_acquire("job")
        .await
        .expect("free at once after release")
        .release()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dead_nodes_keep_it_held_three_lose_it_before_the_deadline() {
    let ttl = Duration::from_secs(2);
    let (mut testbed, lock, guard) = holding(5, ttl).await;

    for i in 0..2 {
        testbed.node_mut(i).kill().expect("kill");
    }
    let killed = Stamp::now();
    renewed_after(&guard, killed, renewals_bound(ttl)).await;
    renewed_after(
        &guard,
        guard.last_renewal().expect("renewed").started,
        renewals_bound(ttl),
    )
    .await;
    assert!(guard.is_held());
    assert_eq!(guard.last_renewal().expect("renewed").held, 3);
    assert_eq!(guard.held_nodes().count(), 3);

    testbed.node_mut(2).kill().expect("kill");
    let dead: Vec<String> = (0..3).map(|i| testbed.node(i).url()).collect();
    let notice = tokio::time::timeout(renewals_bound(ttl), guard.lost())
        .await
        .expect("lost() fires within a few renewal intervals");
    let observed = Stamp::now();
    // The guarantee: signalled before the deadline the guard reported last.
    assert!(
        notice.at < notice.deadline,
        "signalled {:?} after the deadline",
        notice.at.saturating_since(notice.deadline)
    );
    assert!(notice.deadline >= guard.last_renewal().expect("renewed").started);
    assert!(!guard.is_held(), "not held once lost");
    assert!(guard.deadline() <= observed);
    match &notice.reason {
        LostReason::RenewalsFailed(nodes) => {
            let failed: Vec<&str> = nodes.errors().map(|e| e.node()).collect();
            for url in &dead {
                assert!(failed.contains(&url.as_str()), "{url} not named: {nodes}");
            }
        }
        other => panic!("expected RenewalsFailed, got {other:?}"),
    }
    assert!(guard.cancellation_token().is_cancelled());
    assert_eq!(lock.stats().lost, 1);
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_gets_our_key_back() {
    let ttl = Duration::from_secs(2);
    let (mut testbed, lock, guard) = holding(5, ttl).await;
    let all_held = |g: &LockGuard| g.nodes().all(|(_, h)| h == Hold::Held);
    // The acquire may have been decided before every node answered; the
    // first renewal hears from all five.
    common::wait_for("5 of 5 held", renewals_bound(ttl), || all_held(&guard)).await;

    testbed
        .node_mut(3)
        .restart(Restart::immediate().wiping())
        .expect("restart empty");
    assert_eq!(
        common::value_on(testbed.node(3), "job"),
        None,
        "restarted empty"
    );
    let restarted = Stamp::now();
    common::wait_for(
        "the key healed on the restarted node",
        renewals_bound(ttl),
        || common::value_on(testbed.node(3), "job").as_deref() == Some(guard.token()),
    )
    .await;
    // It votes again once its quarantine (one TTL) has passed.
    common::wait_for("5 of 5 held again", ttl + renewals_bound(ttl), || {
        all_held(&guard) && guard.last_renewal().is_some_and(|r| r.started > restarted)
    })
    .await;
    // Re-taken while quarantined: its answers did not count until then.
    assert!(lock.stats().nodes[3].quarantined >= 1);
    let pttl = common::pttl_on(testbed.node(3), "job");
    assert!(
        pttl > 0 && pttl <= ttl.as_millis() as i64,
        "healed with the TTL: {pttl}"
    );
    assert_eq!(common::assert_nodes_match(&testbed, &guard), 5);
    guard.release().await;
    common::wait_until_gone(&testbed, "job", "released").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_does_not_slow_renewals() {
    let ttl = Duration::from_secs(3);
    let (mut testbed, _lock, guard) = holding(5, ttl).await;

    testbed.node_mut(0).pause().expect("pause");
    let paused = Stamp::now();
    renewed_after(&guard, paused, renewals_bound(ttl)).await;
    let first = guard.last_renewal().expect("renewed");
    renewed_after(&guard, first.started, renewals_bound(ttl)).await;
    let second = guard.last_renewal().expect("renewed");
    assert!(guard.is_held());
    for renewal in [first, second] {
        // Decided by the four live nodes: well before the paused node's
        // timeout (300 ms), let alone a chain of them.
        assert!(
            renewal.took < ttl / 10,
            "a renewal waited {:?} for the paused node",
            renewal.took
        );
        assert!(renewal.held >= 3);
    }
    let paused_hold = guard.nodes().next().expect("5 nodes").1;
    assert_ne!(paused_hold, Hold::Held, "the paused node never answered");
    testbed.node_mut(0).resume().expect("resume");
    guard.release().await;
    common::wait_until_gone(&testbed, "job", "released").await;
}

/// Sets a flag when dropped: shows that a cancelled work's future is gone.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exclusive_cancels_the_work_when_the_lock_is_lost() {
    let ttl = Duration::from_secs(2);
    let mut testbed = Testbed::start(5).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10)
    }))
    .await;
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let flag = DropFlag(Arc::clone(&dropped));
    let run = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.run_exclusive(
                "job",
                Wait::up_to(Duration::from_secs(1)),
                |held| async move {
                    let _flag = flag;
                    let _ = started_tx.send(held.token().to_string());
                    // Work that would never end on its own.
                    std::future::pending::<()>().await;
                },
            )
            .await
        })
    };
    let token = started_rx.await.expect("work started");
    let carrying = common::values(&testbed, "job")
        .iter()
        .filter(|v| v.as_deref() == Some(token.as_str()))
        .count();
    assert!(carrying >= 3, "a majority carries the token: {carrying}");
    for i in 0..3 {
        testbed.node_mut(i).kill().expect("kill");
    }
    let result = tokio::time::timeout(renewals_bound(ttl), run)
        .await
        .expect("run_exclusive returns once the lock is lost")
        .expect("no panic");
    let err = result.expect_err("the lock was lost");
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert!(err.to_string().contains("lost"), "{err}");
    assert!(dropped.load(Ordering::SeqCst), "the work was cancelled");
    // Released afterwards on the nodes still up.
    for node in &testbed.nodes()[3..] {
        assert_eq!(
            common::value_on(node, "job"),
            None,
            "{} keeps the key",
            node.url()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exclusive_releases_when_the_work_panics_or_fails() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;

    let panicking = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.run_exclusive("job", Wait::up_to(Duration::from_secs(1)), |_| async {
                panic!("work failed");
            })
            .await
        })
    };
    let joined = panicking.await;
    assert!(joined.expect_err("the panic is resumed").is_panic());
    assert!(
        common::values(&testbed, "job").iter().all(Option::is_none),
        "released before the panic went on"
    );
    assert_eq!(lock.stats().watched, 0);

    let failed: Result<Result<(), &str>, Error> = lock
        .run_exclusive("job", Wait::up_to(Duration::from_secs(1)), |_| async {
            Err("work error")
        })
        .await;
    assert_eq!(failed.expect("lock held throughout"), Err("work error"));
    assert!(common::values(&testbed, "job").iter().all(Option::is_none));
    common::take_free(&lock, "job").await.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_renewing_and_run_exclusive_reports_it() {
    let ttl = Duration::from_secs(2);
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl)
            .node_timeout(ttl / 10)
            .max_hold(Duration::from_secs(1))
    }))
    .await;
    let began = Stamp::now();
    let result = tokio::time::timeout(
        renewals_bound(ttl),
        lock.run_exclusive("job", Wait::up_to(Duration::from_secs(1)), |_| {
            std::future::pending::<()>()
        }),
    )
    .await
    .expect("ends once the hold runs out");
    match result {
        Err(Error::Lost {
            reason: LostReason::MaxHoldReached(max),
            ..
        }) => assert_eq!(max, Duration::from_secs(1)),
        other => panic!("expected MaxHoldReached, got {other:?}"),
    }
    // Renewed within the hold, then ran out its validity: more than the TTL.
    assert!(began.elapsed() > ttl);
    assert!(common::values(&testbed, "job").iter().all(Option::is_none));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_during_a_renewal_in_flight_leaves_no_key() {
    let ttl = Duration::from_secs(3);
    let mut testbed = common::start_recording(5);
    let lock = common::connected(common::lock_with(&testbed, watched(ttl))).await;
    let guard = common::take_free(&lock, "job").await;
    // A second guard whose renewals show the first one's would have been due.
    let witness = common::take_free(&lock, "witness").await;
    common::wait_for("5 of 5 held", renewals_bound(ttl), || {
        guard.nodes().all(|(_, h)| h == Hold::Held)
    })
    .await;

    // On node 4 the next renewal would re-create the key (heal) ...
    let mut conn = testbed.node(4).connection().expect("connect");
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut conn).expect("DEL");
    // ... but node 4 is paused, so that renewal stays in flight for a
    // whole node timeout after the four others decided it.
    testbed.node_mut(4).pause().expect("pause");
    // Release while a round still waits for node 4 (its node timeout is
    // a tenth of the TTL). A busy machine may notice a round too late: then
    // take the next one (bounded).
    let mut since = Stamp::now();
    for attempt in 1.. {
        assert!(attempt <= 5, "never caught a round in flight");
        renewed_after(&guard, since, renewals_bound(ttl)).await;
        since = guard.last_renewal().expect("renewed").started;
        if since.elapsed() < ttl / 20 {
            break;
        }
    }
    let report = guard.release().await;
    assert!(report.was_held);
    let marks: Vec<u64> = testbed.nodes()[..4].iter().map(common::log_mark).collect();
    testbed.node_mut(4).resume().expect("resume");

    // The renewal queued on node 4 ran (healing the key), and the release,
    // queued behind it on the same connection, deleted it again.
    common::wait_until_gone(&testbed, "job", "released after the in-flight renewal").await;
    let node4 = testbed.node(4);
    let renews = common::renew_calls(node4, "job");
    let releases: Vec<u64> = common::script_calls(node4, "job")
        .into_iter()
        .filter(|(_, c)| *c == common::ScriptCall::Release)
        .map(|(id, _)| id)
        .collect();
    let last_release = *releases.last().expect("node 4 got the release");
    assert!(!renews.is_empty(), "the renewal queued on node 4 ran");
    assert!(
        renews.iter().all(|id| *id < last_release),
        "a renewal ran after the release on node 4: renews {renews:?}, releases {releases:?}"
    );

    // No renewal traffic for the released lock afterwards: wait until the
    // witness, renewed on the same schedule, has been renewed twice more.
    let released = Stamp::now();
    renewed_after(&witness, released, renewals_bound(ttl)).await;
    let next = witness.last_renewal().expect("renewed").started;
    renewed_after(&witness, next, renewals_bound(ttl)).await;
    for (node, mark) in testbed.nodes()[..4].iter().zip(marks) {
        let late: Vec<u64> = common::renew_calls(node, "job")
            .into_iter()
            .filter(|id| *id > mark)
            .collect();
        assert!(
            late.is_empty(),
            "{} renewed a released lock: {late:?}",
            node.url()
        );
    }
    assert!(common::values(&testbed, "job").iter().all(Option::is_none));
    assert_eq!(lock.stats().watched, 1);
    witness.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_without_the_watchdog_is_signalled_before_its_deadline() {
    let ttl = Duration::from_secs(1);
    let testbed = Testbed::start(3).expect("testbed");
    let lock: MultiLock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10)
    }))
    .await;
    let guard = common::take_free(&lock, "job").await;
    assert!(!guard.is_watched());
    let token = guard.cancellation_token();
    let notice = tokio::time::timeout(ttl * 2, token.cancelled())
        .await
        .map(|()| guard.lost());
    let notice = notice.expect("cancelled before the deadline passed").await;
    assert_eq!(notice.reason, LostReason::ValidityExpired);
    assert!(notice.at < notice.deadline);
    assert!(!guard.is_held());
    let report = guard.release().await;
    assert!(!report.was_held);
}
