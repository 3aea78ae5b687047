//! Wake-ups: waiters retry on a release notice instead of polling, share one
//! subscriber connection per node, fall back to their backoff when no notice
//! comes, and leave no subscription behind.

mod common;

use common::{spawn_waiter, wait_subscribed, woken_by_notice};

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quorumlock::{MultiLock, RetryPolicy, Wait};
use quorumlock_testbed::{RedisNode, Restart, Testbed};

/// Pub/sub client connections on one node.
fn pubsub_clients_on(node: &RedisNode) -> usize {
    let mut conn = node.connection().expect("inspect node");
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut conn)
        .expect("CLIENT LIST");
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

/// A lock whose waiters only a release notice wakes within the bounds here.
fn slow_polling_lock(testbed: &Testbed) -> MultiLock {
    common::lock_with(testbed, common::slow_polling)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_another_process_wakes_the_waiter_at_once() {
    let testbed = Testbed::start(3).expect("testbed");
    // The holder is another "process": its own lock service.
    let holder_lock = common::lock(&testbed);
    let waiter_lock = slow_polling_lock(&testbed);
    let holder = holder_lock.try_acquire("job").await.expect("holder");

    let waiter = spawn_waiter(&waiter_lock, "job");
    // The waiter failed once and subscribed on every node.
    wait_subscribed(&testbed, "job", 1, "the waiter to subscribe on every node").await;
    holder.release().await;
    // Its backoff is 60 s and the holder's TTL 30 s: only a notice ends
    // the wait within this bound.
    let guard = woken_by_notice(waiter).await;
    let stats = waiter_lock.stats();
    assert!(stats.woken >= 1, "{stats:?}");
    assert!(stats.wake_notices >= 1, "{stats:?}");
    // One refused attempt, then attempts on notices (the first notice may
    // come from a node that freed the key before the others did).
    assert!(stats.attempts >= 2, "{stats:?}");
    guard.release().await;
    // The last waiter left: its subscriptions are gone on every node.
    wait_subscribed(&testbed, "job", 0, "the subscriptions to be dropped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_one_subscriber_connection_per_node() {
    let testbed = Testbed::start(3).expect("testbed");
    let holder_lock = common::lock(&testbed);
    let lock = slow_polling_lock(&testbed);
    let names = ["a", "b", "c"];
    let mut holders = Vec::new();
    for name in names {
        holders.push(holder_lock.try_acquire(name).await.expect("holder"));
    }
    // Twelve waiters on three names, all in one lock service.
    let mut waiters = Vec::new();
    for i in 0..12 {
        let lock = lock.clone();
        let name = names[i % names.len()];
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .acquire(name, Wait::up_to(Duration::from_secs(120)))
                .await?;
            // The release is announced to the next waiter of this service.
            guard.release().await;
            Ok::<_, quorumlock::Error>(())
        }));
    }
    common::wait_for(
        "every name subscribed on every node",
        Duration::from_secs(5),
        || {
            testbed
                .nodes()
                .iter()
                .all(|n| names.iter().all(|k| common::subscribers_on(n, k) == 1))
        },
    )
    .await;
    for node in testbed.nodes() {
        assert_eq!(
            pubsub_clients_on(node),
            1,
            "one subscriber connection on {}",
            node.url()
        );
    }
    // Each release lets its waiters through one after another: each
    // waiter's release is announced to the next one in this lock service.
    for holder in holders {
        holder.release().await;
    }
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("every waiter gets its turn without polling")
            .expect("waiter task")
            .expect("acquired");
    }
    let stats = lock.stats();
    assert_eq!(stats.acquired, 12, "{stats:?}");
    common::wait_for(
        "the subscriptions to be dropped",
        Duration::from_secs(5),
        || {
            testbed
                .nodes()
                .iter()
                .all(|n| names.iter().all(|k| common::subscribers_on(n, k) == 0))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_notice_the_waiter_retries_when_the_holder_expires() {
    let testbed = Testbed::start(3).expect("testbed");
    // The holder never releases: its key expires, and no notice is sent.
    // A node timeout generous enough that a busy machine answers within
    // it (the most a TTL allows is a tenth of it; 200 ms of a 2 s TTL once
    // ran out during a build): a missed quorum (rather than contention)
    // has no holder TTL to go by and would wait out the long backoff.
    let ttl = Duration::from_secs(4);
    let node_timeout = ttl / 10;
    let holder_lock = common::lock_with(&testbed, |b| b.ttl(ttl).node_timeout(node_timeout));
    let holder = holder_lock.try_acquire("expiring").await.expect("holder");
    std::mem::forget(holder);
    // A long backoff: the waiter must use the holder's remaining TTL.
    let lock = common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(node_timeout).retry(
            RetryPolicy::default()
                .with_base_delay(Duration::from_secs(60))
                .with_max_delay(Duration::from_secs(60)),
        )
    });
    let guard = tokio::time::timeout(
        Duration::from_secs(20),
        lock.acquire("expiring", Wait::up_to(Duration::from_secs(120))),
    )
    .await
    .expect("retried at the holder's expiry, not after its 60 s backoff")
    .expect("acquired");
    let stats = lock.stats();
    assert_eq!(stats.woken, 0, "no notice for an expiry: {stats:?}");
    assert!(stats.contended >= 1, "{stats:?}");
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_or_is_dropped_unsubscribes() {
    let testbed = Testbed::start(3).expect("testbed");
    let holder = common::lock(&testbed)
        .try_acquire("busy")
        .await
        .expect("holder");
    let lock = common::lock(&testbed);
    // Gives up when its budget is spent.
    let refused = lock
        .acquire("busy", Wait::up_to(Duration::from_millis(300)))
        .await;
    assert!(refused.is_err());
    wait_subscribed(
        &testbed,
        "busy",
        0,
        "the subscription of a waiter that gave up to go",
    )
    .await;
    // Dropped while waiting (e.g. a select! that took another branch).
    let waiting = spawn_waiter(&lock, "busy");
    wait_subscribed(&testbed, "busy", 1, "the waiter to subscribe").await;
    waiting.abort();
    wait_subscribed(
        &testbed,
        "busy",
        0,
        "the dropped waiter's subscription to go",
    )
    .await;
    holder.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_comes_back_after_its_node_restarts() {
    let mut testbed = Testbed::start(3).expect("testbed");
    // Connected first, so that its acquire is sent to every node.
    let holder_lock = common::connected(common::lock(&testbed)).await;
    let lock = slow_polling_lock(&testbed);
    let holder = holder_lock.try_acquire("restarting").await.expect("holder");
    let waiter = spawn_waiter(&lock, "restarting");
    wait_subscribed(&testbed, "restarting", 1, "the waiter to subscribe").await;
    // The holder must keep a quorum without node 0, which comes back empty
    // (an immediate restart without persistence; DESIGN.md rule 8 would
    // keep it out for a TTL): wait until all three carry its key.
    common::wait_for(
        "the holder's key on every node",
        Duration::from_secs(5),
        || {
            common::values(&testbed, "restarting")
                .iter()
                .all(|v| v.as_deref() == Some(holder.token()))
        },
    )
    .await;
    // Node 0 restarts (keeping its port): its subscriber connection dies
    // and is re-made, subscribed again.
    testbed
        .node_mut(0)
        .restart(Restart::immediate())
        .expect("restart");
    common::wait_for(
        "the subscriber to re-subscribe on the restarted node",
        Duration::from_secs(10),
        || common::subscribers_on(testbed.node(0), "restarting") == 1,
    )
    .await;
    holder.release().await;
    let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken after the restart")
        .expect("waiter task")
        .expect("acquired");
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_next_waiter_of_the_same_lock_service() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(slow_polling_lock(&testbed)).await;
    let holder = lock.try_acquire("baton").await.expect("holder");
    let waiter = spawn_waiter(&lock, "baton");
    wait_subscribed(&testbed, "baton", 1, "the waiter to subscribe").await;
    let report = holder.release().await;
    assert!(report.released >= 2, "{report:?}");
    let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("handed the lock in the release, long before its backoff")
        .expect("waiter task")
        .expect("acquired");
    assert!(guard.is_held());
    let stats = lock.stats();
    assert_eq!((stats.handoffs, stats.handed_over), (1, 1), "{stats:?}");
    // The key went from one owner to the other in one script call per node.
    let carrying = common::assert_nodes_match(&testbed, &guard);
    assert!(carrying >= 2);
    // The guard got by handoff is a guard like any other.
    assert!(guard.fencing_token().await.expect("token") >= 1);
    assert_eq!(guard.release().await.released, carrying);
    common::wait_until_gone(&testbed, "baton", "released").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_during_its_handoff_leaves_nothing_behind() {
    let mut testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.node_timeout(Duration::from_millis(500)).retry(
            RetryPolicy::default()
                .with_base_delay(Duration::from_secs(60))
                .with_max_delay(Duration::from_secs(60)),
        )
    }))
    .await;
    for _ in 0..3 {
        let holder = lock.try_acquire("dropped").await.expect("holder");
        let contended = lock.stats().contended;
        let waiter = spawn_waiter(&lock, "dropped");
        // Refused, it sleeps with its offer of a handoff. (Not "subscribed":
        // the name's channel lingers from the last round.) Refused twice:
        // its first attempt carried no place in the queues, so it attempts
        // again at once with one (`call::Queuing`).
        common::wait_for(
            "the waiter's attempts to be refused",
            Duration::from_secs(5),
            || lock.stats().contended > contended + 1,
        )
        .await;
        // Nodes 1 and 2 are paused: the handoff round cannot be decided
        // before the node timeout, and the waiter is dropped while it is in
        // flight.
        testbed.node_mut(1).pause().expect("pause");
        testbed.node_mut(2).pause().expect("pause");
        let handoffs = lock.stats().handoffs;
        let release = tokio::spawn(holder.release());
        // The release took the waiter's offer and its round is in flight
        // (it cannot end before the node timeout: two nodes are paused).
        common::wait_for(
            "the release to start the handoff",
            Duration::from_secs(5),
            || lock.stats().handoffs > handoffs,
        )
        .await;
        waiter.abort();
        assert!(waiter.await.is_err_and(|e| e.is_cancelled()));
        testbed.node_mut(1).resume().expect("resume");
        testbed.node_mut(2).resume().expect("resume");
        release.await.expect("release task");
        // Whatever was taken for the dropped waiter was given back.
        common::wait_until_gone(&testbed, "dropped", "handoff rolled back").await;
    }
    let stats = lock.stats();
    assert_eq!(stats.handoffs, 3, "{stats:?}");
    assert_eq!(stats.acquired, 3, "only the holders: {stats:?}");
    lock.try_acquire("dropped")
        .await
        .expect("free at once")
        .release()
        .await;
}

/// After an attempt lost to contention, each retry asks the gate (the
/// first healthy node) alone, and the others only if it did not refuse:
/// a held name costs a waiting process one script call per retry, not one
/// per node, so waiters of several processes woken by one release notice
/// do not split the nodes between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_contention_ask_the_gate_alone() {
    let testbed = common::start_recording(5);
    // On every node, so the gate surely refuses.
    let holder = common::every_node_lock(&testbed).await;
    // A generous node timeout: a gate call that timed out on a loaded
    // machine would make the gate suspect and move it to the next node.
    let waiter = common::connected(common::lock_with(&testbed, |b| {
        b.node_timeout(Duration::from_millis(500))
            .wake_ups(false)
            .retry(
                RetryPolicy::default()
                    .with_max_attempts(4)
                    .with_base_delay(Duration::from_millis(1))
                    .with_max_delay(Duration::from_millis(5)),
            )
    }))
    .await;
    let guard = holder.try_acquire("gated").await.expect("free");
    match waiter
        .acquire("gated", Wait::up_to(Duration::from_secs(10)))
        .await
    {
        Err(quorumlock::Error::WaitBudgetExhausted { attempts: 4, .. }) => {}
        other => panic!("expected 4 refused attempts, got {other:?}"),
    }
    let acquires = |node: &RedisNode| {
        common::script_calls(node, "gated")
            .iter()
            .filter(|(_, call)| *call == common::ScriptCall::Acquire)
            .count()
    };
    let nodes = testbed.nodes();
    // The holder's acquire, then the waiter's: its 3 retries at the gate
    // alone, and its first attempt on every node, at most once each (one
    // decided before a request was written skips that node, the gate too).
    let at_gate = acquires(&nodes[0]);
    assert!((1 + 3..=1 + 4).contains(&at_gate), "{at_gate} at the gate");
    for node in &nodes[1..] {
        assert!(acquires(node) <= 1 + 1, "{}", node.url());
    }
    guard.release().await;
}

/// Whether lock `key` on `node` carries the mark of a waiting acquire.
fn marked_on(node: &RedisNode, key: &str) -> bool {
    let mut conn = node.connection().expect("inspect node");
    match common::lock_key_on(&mut conn, key) {
        common::LockKey::Absent => false,
        common::LockKey::Single { marked, .. } => marked,
        common::LockKey::Hash => redis::cmd("HEXISTS")
            .arg(key)
            .arg("waiters")
            .query(&mut conn)
            .expect("HEXISTS"),
    }
}

/// A release nobody waits for publishes nothing, nor does one that only a
/// `try_acquire` found held. Once a waiter of another lock service (as in
/// another process) found the name held, the nodes it found it on are
/// marked, and the holder's release announces itself there and wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_release_somebody_waits_for_is_announced() {
    let testbed = Testbed::start(3).expect("testbed");
    // Every node carries the holder's key: each is one the waiter can mark.
    let holder_lock = common::every_node_lock(&testbed).await;
    let published = || -> u64 {
        testbed
            .nodes()
            .iter()
            .map(|n| common::calls_on(n, "publish"))
            .sum()
    };

    let quiet = holder_lock.try_acquire("quiet").await.expect("free");
    let report = quiet.release().await;
    assert_eq!(report.released, 3, "{report:?}");
    let holder = holder_lock.try_acquire("job").await.expect("free");
    let waiter_lock = slow_polling_lock(&testbed);
    assert!(waiter_lock.try_acquire("job").await.is_err(), "held");
    assert!(
        testbed.nodes().iter().all(|n| !marked_on(n, "job")),
        "a try_acquire waits for nothing: no mark"
    );
    assert_eq!(published(), 0, "nobody waited for a release");

    let waiter = spawn_waiter(&waiter_lock, "job");
    wait_subscribed(&testbed, "job", 1, "the waiter to subscribe on every node").await;
    // Refused by 2 of 3 nodes, the attempt may end before the third
    // answers: a quorum of marks is what it waits for.
    let marked = || {
        testbed
            .nodes()
            .iter()
            .filter(|n| marked_on(n, "job"))
            .count()
    };
    common::wait_for(
        "the waiter's mark on 2 nodes",
        Duration::from_secs(5),
        || marked() >= 2,
    )
    .await;
    for node in testbed.nodes() {
        assert_eq!(common::holds_on(node, "job"), 1, "a mark is no hold");
    }
    holder.release().await;
    let guard = woken_by_notice(waiter).await;
    assert!(published() >= 2, "the marked nodes announced the release");
    assert!(
        testbed.nodes().iter().all(|n| !marked_on(n, "job")),
        "the waiter's own hold is unmarked"
    );
    guard.release().await;
}

/// A lock service that releases a name a waiter of another process marked
/// steps aside: its next acquire call of the name sleeps a moment before
/// its first attempt, so the woken waiter takes the name instead of losing
/// it to the releaser's loop again and again. A release nobody waited for
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_to_a_waiter_of_another_process_lets_that_waiter_in() {
    let testbed = Testbed::start(3).expect("testbed");
    let releaser = common::lock(&testbed);
    let wait = Wait::up_to(Duration::from_secs(20));
    releaser
        .try_acquire("job")
        .await
        .expect("free")
        .release()
        .await;
    let guard = releaser.acquire("job", wait).await.expect("free again");
    assert_eq!(releaser.stats().stepped_aside, 0, "nobody waited");

    // Another process waits (and marks the name) while the releaser holds.
    let waiter = spawn_waiter(&common::lock(&testbed), "job");
    wait_subscribed(&testbed, "job", 1, "the waiter to subscribe on every node").await;
    guard.release().await;
    // The releaser takes the name straight back, as a busy worker loop
    // does, until the waiter has had it. Polled first, in this task: its
    // first call starts right after the release, however busy the machine.
    let done = AtomicBool::new(false);
    let lane = async {
        let mut rounds = 0;
        while !done.load(Ordering::Relaxed) && rounds < 200 {
            let guard = releaser.acquire("job", wait).await.expect("its turn");
            guard.release().await;
            rounds += 1;
        }
        rounds
    };
    let waited = async {
        let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter got its turn")
            .expect("waiter task")
            .expect("acquired");
        done.store(true, Ordering::Relaxed);
        guard.release().await;
    };
    let (rounds, ()) = tokio::join!(lane, waited);
    let stats = releaser.stats();
    assert!(stats.stepped_aside >= 1, "{stats:?}");
    eprintln!("the waiter got the name after {rounds} rounds of the releaser");
}
