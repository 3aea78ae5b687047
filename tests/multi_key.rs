//! Locks on several names at once against real nodes: all or nothing (no
//! partial hold left behind), one guard with one validity, extend, watchdog
//! and release covering every name, overlapping sets from many clients
//! without overlap or deadlock, and rejected inputs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;

use quorumlock::{Error, Hold, LockGuard, MultiLock, Quorum, Stamp, Wait};
use quorumlock_testbed::{Restart, Testbed};

/// Why a guard is no longer held, for failure messages.
fn why(guard: &LockGuard) -> String {
    match guard.lost().now_or_never() {
        Some(notice) => format!(
            "{} (declared {:?} before its deadline)",
            notice.reason,
            notice.deadline.saturating_since(notice.at)
        ),
        None => "not lost".to_string(),
    }
}

fn assert_contended(result: Result<LockGuard, Error>) {
    match result {
        Err(Error::Contended { .. }) => {}
        other => panic!("expected Contended, got {other:?}"),
    }
}

/// A lock over every node of `testbed` that wins only once every node took
/// the hold: for setting up a holder whose keys are on every node when the
/// acquire returns.
fn everywhere(testbed: &Testbed) -> MultiLock {
    common::lock_with(testbed, |b| b.quorum(Quorum::All))
}

/// Waits until everything `lock` has sent to the nodes has run there. An
/// acquire or extend returns at its quorum and drops the calls still
/// pending (a call already written runs on its node, one not yet written
/// never does); a probe released through the same connections queues
/// behind both kinds, so once every node answered its release, what the
/// nodes carry is final.
async fn settle(lock: &MultiLock) {
    for _ in 0..20 {
        let probe = lock
            .try_acquire("settle-probe")
            .await
            .expect("probe is free");
        if probe.release().await.failed.is_empty() {
            return;
        }
    }
    panic!("no probe release was answered by every node in 20 tries");
}

/// Every name of `guard` carries its token on every node.
fn all_keys_on_all_nodes(testbed: &Testbed, guard: &LockGuard) -> bool {
    guard.keys().all(|k| {
        common::values(testbed, k)
            .iter()
            .all(|v| v.as_deref() == Some(guard.token()))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_taken_name_is_refused_whole_and_leaves_nothing_behind() {
    let testbed = Testbed::start(3).expect("testbed");
    let a = common::connected(everywhere(&testbed)).await;
    let b = common::connected(common::lock(&testbed)).await;

    // On every node once it returns (quorum: all).
    let held = a.try_acquire("b").await.expect("free");
    assert_eq!(
        common::values(&testbed, "b"),
        vec![Some(held.token().to_string()); 3]
    );

    for _ in 0..3 {
        assert_contended(b.try_acquire_all(&["a", "b", "c"]).await);
        // Every node answered "held by another", so nothing was written:
        // no need to wait for a rollback.
        for key in ["a", "c"] {
            assert_eq!(
                common::values(&testbed, key),
                vec![None; 3],
                "{key:?} left behind"
            );
        }
        assert_eq!(
            common::values(&testbed, "b"),
            vec![Some(held.token().to_string()); 3],
            "a's hold is untouched"
        );
        assert!(held.is_held());
    }
    held.release().await;
    let all = b
        .try_acquire_all(&["a", "b", "c"])
        .await
        .expect("free once a released");
    assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    all.release().await;
    for key in ["a", "b", "c"] {
        assert_eq!(common::values(&testbed, key), vec![None; 3]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_won_on_a_minority_is_rolled_back_there() {
    let testbed = Testbed::start(5).expect("testbed");
    let a = common::connected(everywhere(&testbed)).await;
    let b = common::connected(common::lock(&testbed)).await;

    let held = a.try_acquire("b").await.expect("free");
    let token = held.token().to_string();
    assert_eq!(common::values(&testbed, "b"), vec![Some(token.clone()); 5]);
    // An operator removes a's key from two nodes: there the whole set is
    // free, and b's attempt wins it, but only on a minority.
    for i in 0..2 {
        let mut conn = testbed.node(i).connection().expect("connect");
        let _: i64 = redis::cmd("DEL").arg("b").query(&mut conn).expect("DEL");
    }

    assert_contended(b.try_acquire_all(&["a", "b", "c"]).await);
    // The rollback of a node that had not answered when the attempt was
    // decided runs in the background: wait for it, bounded.
    for key in ["a", "b", "c"] {
        common::wait_for(
            &format!("{key:?} rolled back on the minority"),
            Duration::from_secs(5),
            || (0..2).all(|i| common::value_on(testbed.node(i), key).is_none()),
        )
        .await;
    }
    for i in 2..5 {
        let node = testbed.node(i);
        assert_eq!(common::value_on(node, "a"), None, "{}", node.url());
        assert_eq!(common::value_on(node, "c"), None, "{}", node.url());
        assert_eq!(
            common::value_on(node, "b").as_deref(),
            Some(token.as_str()),
            "a's hold on {} touched",
            node.url()
        );
    }
    held.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_guard_covers_every_name_for_extend_and_release() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(Duration::from_secs(2))
            .node_timeout(Duration::from_millis(200))
    }))
    .await;
    let other = common::connected(common::lock(&testbed)).await;

    let mut guard = lock
        .try_acquire_all(&["c", "a", "b", "a", "c"])
        .await
        .expect("free");
    assert_eq!(guard.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(guard.key(), "a", "the first name in sorted order");
    assert!(guard.is_held());
    assert!(guard.validity() <= Duration::from_secs(2));
    let names = ["a", "b", "c"];
    // The acquire returned at its quorum; let the rest land (or not).
    settle(&lock).await;
    // One script call per node: a node carries every name or none, and one
    // hold on each (not one per duplicate). A node that confirmed carries
    // all of them.
    let carrying: Vec<bool> = testbed
        .nodes()
        .iter()
        .zip(guard.nodes())
        .map(|(node, (url, hold))| {
            let ours: Vec<bool> = names
                .iter()
                .map(|k| common::value_on(node, k).as_deref() == Some(guard.token()))
                .collect();
            assert!(ours.iter().all(|o| *o == ours[0]), "{url}: {ours:?}");
            if hold == Hold::Held {
                assert!(ours[0], "{url} confirmed but carries nothing");
            }
            for k in names {
                let expected = if ours[0] { 1 } else { 0 };
                assert_eq!(common::holds_on(node, k), expected, "{url} {k:?}");
                if !ours[0] {
                    assert_eq!(common::value_on(node, k), None, "{url} {k:?}");
                }
            }
            ours[0]
        })
        .collect();
    let n_carrying = carrying.iter().filter(|c| **c).count();
    assert!(n_carrying >= 2, "{carrying:?}");
    if n_carrying < 3 {
        eprintln!("note: the acquire missed a node: {carrying:?}");
    }
    // Each name alone is taken.
    for key in names {
        assert_contended(other.try_acquire(key).await);
    }

    let validity = guard.extend(Duration::from_secs(20)).await.expect("extend");
    assert!(validity > Duration::from_secs(19), "{validity:?}");
    settle(&lock).await;
    // Every node that confirmed the extend has every name extended; any
    // other node carrying the names has all or none of them extended.
    for ((node, (url, hold)), carries) in testbed.nodes().iter().zip(guard.nodes()).zip(&carrying) {
        let extended: Vec<bool> = names
            .iter()
            .map(|k| common::pttl_on(node, k) > 19_000)
            .collect();
        assert!(
            extended.iter().all(|e| *e == extended[0]),
            "{url}: {extended:?}"
        );
        if hold == Hold::Held {
            assert!(*carries && extended[0], "{url}: confirmed but not extended");
        }
    }
    assert!(guard.nodes().all(|(_, h)| h != Hold::NotHeld));

    let report = guard.release().await;
    assert!(report.was_held);
    assert_eq!(report.kept, 0, "{report:?}");
    if report.failed.is_empty() {
        assert_eq!(
            (report.released, report.not_held),
            (n_carrying, 3 - n_carrying),
            "{report:?}"
        );
    }
    // A node slower than the node timeout gets the release in the
    // background.
    for key in names {
        common::wait_until_gone(&testbed, key, "released").await;
    }
    other
        .try_acquire_all(&["b", "c"])
        .await
        .expect("free at once")
        .release()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_every_name_alive_and_heals_each_on_a_wiped_node() {
    // The node timeout is the largest allowed (a tenth of the TTL), so that
    // a busy machine does not time out live nodes.
    let ttl = Duration::from_secs(2);
    let mut testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10).watchdog(true)
    }))
    .await;
    let keys = ["x", "y", "z"];

    let guard = lock.try_acquire_all(&keys).await.expect("free");
    assert!(guard.is_watched());
    common::wait_for("every name on every node", ttl * 4, || {
        all_keys_on_all_nodes(&testbed, &guard)
    })
    .await;

    // Time is what is under test: hold for several TTLs.
    let acquired = Stamp::now();
    tokio::time::sleep(ttl * 3).await;
    assert!(guard.is_held(), "lost after 3 TTLs: {}", why(&guard));
    assert!(
        guard.last_renewal().is_some_and(|r| r.started > acquired),
        "not renewed"
    );
    assert!(all_keys_on_all_nodes(&testbed, &guard));
    for key in keys {
        for node in testbed.nodes() {
            let pttl = common::pttl_on(node, key);
            assert!(
                pttl > 0 && pttl <= ttl.as_millis() as i64,
                "{key:?} pttl {pttl} on {}",
                node.url()
            );
        }
    }

    testbed
        .node_mut(1)
        .restart(Restart::immediate().wiping())
        .expect("restart empty");
    for key in keys {
        assert_eq!(common::value_on(testbed.node(1), key), None, "wiped");
    }
    let restarted = Stamp::now();
    common::wait_for("every name healed on the wiped node", ttl * 4, || {
        keys.iter()
            .all(|k| common::value_on(testbed.node(1), k).as_deref() == Some(guard.token()))
    })
    .await;
    common::wait_for("a renewal after the restart on all 3", ttl * 4, || {
        guard.last_renewal().is_some_and(|r| r.started > restarted)
            && guard.nodes().all(|(_, h)| h == Hold::Held)
    })
    .await;
    // Re-taken while the wiped node was quarantined (its answers did not
    // count until a TTL after its restart), counted from then on.
    assert!(lock.stats().nodes[1].quarantined >= 1);
    for key in keys {
        assert_eq!(common::holds_on(testbed.node(1), key), 1, "{key:?}");
        let pttl = common::pttl_on(testbed.node(1), key);
        assert!(
            pttl > 0 && pttl <= ttl.as_millis() as i64,
            "{key:?} healed with the TTL: {pttl}"
        );
    }
    assert!(guard.is_held());
    assert_eq!(lock.stats().lost, 0);

    let report = guard.release().await;
    assert!(report.was_held);
    assert_eq!(report.released + report.failed.len(), 3, "{report:?}");
    assert_eq!(report.kept, 0, "{report:?}");
    for key in keys {
        common::wait_until_gone(&testbed, key, "released").await;
    }
}

/// What the tasks of the overlap test share: per name an "in use" flag and
/// a counter updated with a non-atomic read-modify-write.
struct Resources {
    in_use: [AtomicBool; 3],
    counter: [AtomicU64; 3],
    overlaps: AtomicUsize,
    lost_updates: AtomicUsize,
}

fn index(name: &str) -> usize {
    match name {
        "a" => 0,
        "b" => 1,
        "c" => 2,
        _ => unreachable!("{name}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_from_many_clients_never_overlap_or_deadlock() {
    const TASKS: usize = 6;
    const ROUNDS: usize = 50; // 300 acquisitions in all
    let sets: [&[&str]; 4] = [&["a", "b"], &["b", "c"], &["c", "a"], &["a", "b", "c"]];
    let testbed = Testbed::start(3).expect("testbed");
    let resources = Arc::new(Resources {
        in_use: Default::default(),
        counter: Default::default(),
        overlaps: AtomicUsize::new(0),
        lost_updates: AtomicUsize::new(0),
    });
    let mut expected = [0u64; 3];
    for t in 0..TASKS {
        for r in 0..ROUNDS {
            for name in sets[(t + r) % sets.len()] {
                expected[index(name)] += 1;
            }
        }
    }

    let mut locks = Vec::new();
    for _ in 0..TASKS {
        locks.push(common::connected(common::lock(&testbed)).await);
    }
    let started = Stamp::now();
    let tasks: Vec<_> = locks
        .iter()
        .cloned()
        .enumerate()
        .map(|(t, lock)| {
            let resources = Arc::clone(&resources);
            tokio::spawn(async move {
                for r in 0..ROUNDS {
                    let set = sets[(t + r) % sets.len()];
                    let guard = match lock
                        .acquire_all(set, Wait::up_to(Duration::from_secs(20)))
                        .await
                    {
                        Ok(guard) => guard,
                        Err(e) => panic!("task {t} round {r} {set:?}: {e}"),
                    };
                    assert!(guard.is_held());
                    for name in set {
                        if resources.in_use[index(name)].swap(true, Ordering::SeqCst) {
                            resources.overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    for name in set {
                        let counter = &resources.counter[index(name)];
                        let seen = counter.load(Ordering::SeqCst);
                        // Let any other holder run between the read and the write.
                        tokio::task::yield_now().await;
                        if counter
                            .compare_exchange(seen, seen + 1, Ordering::SeqCst, Ordering::SeqCst)
                            .is_err()
                        {
                            resources.lost_updates.fetch_add(1, Ordering::SeqCst);
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    assert!(guard.is_held(), "task {t} round {r}: lost while working");
                    for name in set {
                        resources.in_use[index(name)].store(false, Ordering::SeqCst);
                    }
                    let report = guard.release().await;
                    assert!(report.was_held, "task {t} round {r}: {report:?}");
                    if !report.failed.is_empty() {
                        // Finished in the background; checked at the end.
                        eprintln!("note: task {t} round {r}: {report:?}");
                    }
                }
            })
        })
        .collect();

    let joined = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(tasks))
        .await
        .expect("every task finished within 120 s (no deadlock)");
    for (t, result) in joined.into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("task {t}: {e}"));
    }
    let took = started.elapsed();

    assert_eq!(
        resources.overlaps.load(Ordering::SeqCst),
        0,
        "two holders at once"
    );
    assert_eq!(
        resources.lost_updates.load(Ordering::SeqCst),
        0,
        "an update was lost"
    );
    let counters: Vec<u64> = resources
        .counter
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    assert_eq!(counters, expected);
    for key in ["a", "b", "c"] {
        common::wait_until_gone(&testbed, key, "every guard released").await;
    }
    let acquired: u64 = locks.iter().map(|l| l.stats().acquired).sum();
    let attempts: u64 = locks.iter().map(|l| l.stats().attempts).sum();
    assert_eq!(acquired, (TASKS * ROUNDS) as u64);
    eprintln!("{acquired} acquisitions in {attempts} attempts, {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_reserved_names_are_rejected() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock(&testbed);

    match lock.try_acquire_all::<&str>(&[]).await {
        Err(Error::InvalidKey { key, .. }) => assert_eq!(key, ""),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    match lock
        .acquire_all::<String>(&[], Wait::up_to(Duration::from_secs(1)))
        .await
    {
        Err(Error::InvalidKey { key, .. }) => assert_eq!(key, ""),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    let reserved = "quorumlock:fence:x";
    match lock.try_acquire_all(&["ok", reserved]).await {
        Err(Error::InvalidKey { key, reason }) => {
            assert_eq!(key, reserved);
            assert!(reason.contains("quorumlock:"), "{reason}");
        }
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    match lock.try_acquire("quorumlock:released:y").await {
        Err(Error::InvalidKey { key, .. }) => assert_eq!(key, "quorumlock:released:y"),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    let owner = quorumlock::Owner::new();
    match lock
        .acquire_all_as(
            &owner,
            &["quorumlock:z"],
            Wait::up_to(Duration::from_secs(1)),
        )
        .await
    {
        Err(Error::InvalidKey { key, .. }) => assert_eq!(key, "quorumlock:z"),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    assert_eq!(
        common::values(&testbed, "ok"),
        vec![None; 3],
        "nothing sent"
    );
    assert_eq!(lock.stats().attempts, 0, "rejected before any attempt");
}

/// The largest set a lock takes (1,024 names) works within the default
/// node timeout on local nodes; one more name is a typed error naming the
/// count, sent nowhere. Prints the server time per name (from `INFO
/// commandstats`) that the limit's documentation quotes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_set_works_and_one_more_name_is_refused() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    let names: Vec<String> = (0..1024).map(|i| format!("sku:{i}")).collect();
    let before = common::calls_on(testbed.node(0), "evalsha");
    let usec_before = script_usec(testbed.node(0));
    let guard = lock.try_acquire_all(&names).await.expect("1,024 names");
    assert_eq!(guard.keys().count(), 1024);
    let usec = script_usec(testbed.node(0)) - usec_before;
    let calls = common::calls_on(testbed.node(0), "evalsha") - before;
    println!(
        "acquire of 1,024 names: {usec} µs of server time on one node in {calls} call(s): {:.1} µs per name",
        usec as f64 / 1024.0
    );
    guard.release().await;

    let mut more = names;
    more.push("sku:one-more".into());
    match lock.try_acquire_all(&more).await {
        Err(Error::InvalidKey { key, .. }) => assert_eq!(key, "1025 names"),
        other => panic!(
            "expected InvalidKey, got {:?}",
            other.map(|g| g.keys().count())
        ),
    }
}

/// Total µs the node spent in `EVALSHA` (`INFO commandstats`).
fn script_usec(node: &quorumlock_testbed::RedisNode) -> u64 {
    let mut conn = node.connection().expect("inspect node");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
