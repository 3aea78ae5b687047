//! Fair lock services (`LockConfigBuilder::fair`): a free name goes to the
//! acquire call that has waited longest, across lock services (processes),
//! not to whoever asks first after the release; a call that stops waiting
//! gives its place up, the place of one that vanished lapses, and every
//! client honours the queues. The waiters of other lock services queue
//! too, for the release notice only: their places refuse nobody.

mod common;

use std::time::Duration;

use quorumlock::{Error, LockGuard, MultiLock, NodeOutcome, Wait};
use quorumlock_testbed::{RedisNode, Testbed};

const QUEUE: &str = "quorumlock:queue:job";
const LEASES: &str = "quorumlock:leases:job";

/// Waiters queued for "job" on `node`.
fn queued_on(node: &RedisNode) -> u64 {
    let mut conn = node.connection().expect("inspect node");
    redis::cmd("ZCARD")
        .arg(QUEUE)
        .query(&mut conn)
        .expect("ZCARD")
}

async fn wait_queued(testbed: &Testbed, count: u64, what: &str) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let queued: Vec<u64> = testbed.nodes().iter().map(queued_on).collect();
        if queued.iter().all(|q| *q == count) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "gave up waiting for {what}: {queued:?} queued, not {count} each"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// "job" held on every node (each has a release to announce, and a waiter
/// is refused, and can queue, on each).
async fn held_everywhere(testbed: &Testbed) -> LockGuard {
    common::every_node_lock(testbed)
        .await
        .try_acquire("job")
        .await
        .expect("free")
}

/// A wait for "job" that runs out of budget.
async fn gives_up(lock: &MultiLock) {
    let refused = lock
        .acquire("job", Wait::up_to(Duration::from_millis(200)))
        .await;
    assert!(
        matches!(refused, Err(Error::WaitBudgetExhausted { .. })),
        "{refused:?}"
    );
}

/// The node's clock in ms.
fn server_ms(node: &RedisNode) -> u64 {
    let mut conn = node.connection().expect("inspect node");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).expect("TIME");
    secs * 1000 + micros / 1000
}

fn fair_lock(testbed: &Testbed) -> MultiLock {
    common::lock_with(testbed, |b| b.fair(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_other_lock_services_get_a_free_name_in_arrival_order() {
    arrival_order(true).await;
}

/// Waiters that are not fair queue too, for the notices: a release wakes
/// the longest waiting one alone, not every waiter of the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_are_not_fair_are_told_in_arrival_order() {
    arrival_order(false).await;
}

/// Two waiters of other lock services (`fair` or not) queue for a held
/// name; each release wakes the first in line alone.
async fn arrival_order(fair: bool) {
    let testbed = Testbed::start(3).expect("testbed");
    // The holder holds every node: each has a release to announce.
    let holder_lock = common::every_node_lock(&testbed).await;
    let slow_polling = || common::lock_with(&testbed, |b| common::slow_polling(b).fair(fair));
    let first_lock = common::connected(slow_polling()).await;
    let second_lock = common::connected(slow_polling()).await;
    let holder = holder_lock.try_acquire("job").await.expect("free");

    let first = common::spawn_waiter(&first_lock, "job");
    wait_queued(&testbed, 1, "the first waiter to queue on every node").await;
    common::wait_subscribed(&testbed, "job", 1, "the first waiter to listen for notices").await;
    let second = common::spawn_waiter(&second_lock, "job");
    wait_queued(&testbed, 2, "the second waiter to queue behind it").await;
    common::wait_subscribed(
        &testbed,
        "job",
        2,
        "the second waiter to listen for notices",
    )
    .await;

    // The release names the first waiter: only it retries.
    holder.release().await;
    let guard = common::woken_by_notice(first).await;
    assert!(!second.is_finished(), "the second waiter waits on");
    assert_eq!(
        second_lock.stats().wake_notices,
        0,
        "the release announced the first waiter's turn to its lock service alone"
    );
    // It leaves the queue where it took the name. A node where its attempt
    // came before the holder's release (which returned at its quorum) keeps
    // its place until its guard's release gives it up.
    common::wait_for(
        "the first waiter to leave the queue on a majority",
        Duration::from_secs(5),
        || testbed.nodes().iter().filter(|n| queued_on(n) == 1).count() >= 2,
    )
    .await;
    // A waiter that is not fair took its place with a second attempt, at
    // once after its first (which carried no ticket: an uncontended acquire
    // sends none).
    let queued_after = if fair { 1 } else { 2 };
    assert_eq!(
        second_lock.stats().attempts,
        queued_after,
        "a notice naming another waiter starts no attempt"
    );

    // Now the second waiter is first in line, and the release names it.
    guard.release().await;
    let guard = common::woken_by_notice(second).await;
    assert_eq!(second_lock.stats().attempts, queued_after + 1);
    guard.release().await;
    wait_queued(&testbed, 0, "every place to be given up").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_name_waits_for_the_first_live_waiter_and_no_longer() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock(&testbed);
    // Another process's waiter, first in line on every node for a minute.
    plant_place(&testbed, "elsewhere", 1);
    refused_for_waiters_ahead(
        lock.try_acquire("job").await,
        "a free name goes to the waiter first",
    );
    assert!(
        testbed
            .nodes()
            .iter()
            .all(|n| common::value_on(n, "job").is_none()),
        "nothing taken"
    );

    // Its place lapses (its process died): the name is anyone's. Asked of
    // every node, so that every node drops the lapsed place (a majority
    // round drops the call it had not sent when two nodes granted it).
    common::on_every_node(&testbed, &["HSET", LEASES, "elsewhere", "1"]);
    let guard = common::every_node_lock(&testbed)
        .await
        .try_acquire("job")
        .await
        .expect("the lapsed place holds nothing back");
    wait_queued(&testbed, 0, "the lapsed places to be dropped").await;
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_or_is_dropped_leaves_the_queue() {
    let testbed = Testbed::start(3).expect("testbed");
    let holder = held_everywhere(&testbed).await;
    let lock = fair_lock(&testbed);
    gives_up(&lock).await;
    assert!(
        testbed.nodes().iter().all(|n| queued_on(n) == 0),
        "gave its place up before it returned"
    );

    let waiting = common::spawn_waiter(&lock, "job");
    wait_queued(&testbed, 1, "the waiter to queue").await;
    waiting.abort();
    wait_queued(&testbed, 0, "the dropped waiter's place to go").await;

    // Nobody waits: the release frees the name for anyone at once.
    holder.release().await;
    common::lock(&testbed)
        .try_acquire("job")
        .await
        .expect("free")
        .release()
        .await;
}

/// The places of all of "job"'s waiters on `node`, first in line first.
fn places_on(node: &RedisNode) -> Vec<String> {
    let mut conn = node.connection().expect("inspect node");
    redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .expect("ZRANGE")
}

/// A place `id` in "job"'s queue on every node, at `score`, as a waiter of
/// another process would take it, for a minute.
fn plant_place(testbed: &Testbed, id: &str, score: u64) {
    for node in testbed.nodes() {
        let lapses = server_ms(node) + 60_000;
        let mut conn = node.connection().expect("plant a place");
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(QUEUE)
            .arg(score)
            .arg(id)
            .ignore()
            .cmd("HSET")
            .arg(LEASES)
            .arg(id)
            .arg(lapses)
            .ignore()
            .query(&mut conn)
            .expect("planted");
    }
}

/// Asserts that `outcome` is a refusal by a majority of nodes where others
/// wait ahead (`what`: why it should be).
fn refused_for_waiters_ahead(outcome: Result<LockGuard, Error>, what: &str) {
    match outcome {
        Err(Error::Contended { nodes, .. }) => {
            let ahead = nodes
                .iter()
                .filter(|r| r.outcome == NodeOutcome::WaitersAhead)
                .count();
            assert!(ahead >= 2, "refused by a majority: {nodes:?}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_places_of_waiters_that_are_not_fair_refuse_nobody_and_queue_behind_fair_ones() {
    let testbed = Testbed::start(3).expect("testbed");
    let fair_place = "feedfeedfeedfeed.0000000000000001";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64;
    plant_place(&testbed, fair_place, now);
    let waiting_lock = common::connected(common::lock_with(&testbed, common::slow_polling)).await;
    let waiter = common::spawn_waiter(&waiting_lock, "job");
    wait_queued(&testbed, 2, "the waiter to queue behind the fair place").await;
    for node in testbed.nodes() {
        let places = places_on(node);
        assert_eq!(places[0], fair_place, "the fair place goes first");
        assert!(places[1].ends_with(".n"), "{places:?}");
    }

    // The fair place refuses the free name to everyone behind it.
    let other = common::lock(&testbed);
    refused_for_waiters_ahead(other.try_acquire("job").await, "refused for the fair place");

    // Without it, the first place refuses nobody: another lock service
    // takes the name past the waiter, and its release wakes the waiter.
    for node in testbed.nodes() {
        let mut conn = node.connection().expect("drop the place");
        let _: () = redis::pipe()
            .cmd("ZREM")
            .arg(QUEUE)
            .arg(fair_place)
            .ignore()
            .cmd("HDEL")
            .arg(LEASES)
            .arg(fair_place)
            .ignore()
            .query(&mut conn)
            .expect("dropped");
    }
    let barged = other.try_acquire("job").await.expect("refused by nobody");
    assert!(!waiter.is_finished(), "the waiter waits on");
    barged.release().await;
    let guard = common::woken_by_notice(waiter).await;
    guard.release().await;
    wait_queued(&testbed, 0, "every place to be given up").await;
}

/// A waiting acquire that finds the name free (the common case) sends no
/// place, and its guard's release looks for none: no queue command runs,
/// for a lock service that is fair or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_that_finds_the_name_free_costs_the_queues_nothing() {
    let testbed = Testbed::start(3).expect("testbed");
    let queue_commands = |testbed: &Testbed| -> u64 {
        let commands = ["zadd", "zrem", "zrange", "hset", "hdel", "hget"];
        testbed
            .nodes()
            .iter()
            .map(|n| commands.iter().map(|c| common::calls_on(n, c)).sum::<u64>())
            .sum()
    };
    for fair in [false, true] {
        let lock = common::connected(common::lock_with(&testbed, |b| b.fair(fair))).await;
        let before = queue_commands(&testbed);
        for _ in 0..3 {
            let guard = lock
                .acquire("job", Wait::up_to(Duration::from_secs(5)))
                .await
                .expect("free");
            guard.release().await;
        }
        // A fair one's first attempt carries its place, for its order, but
        // takes none on a free name: the release has nothing to give up.
        assert_eq!(queue_commands(&testbed), before, "fair: {fair}");
    }
}

/// A waiter that is not fair and gives up after one attempt took no place
/// (its first attempt carries none), so it sends no round to give one up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_before_taking_a_place_leaves_nothing() {
    let testbed = Testbed::start(3).expect("testbed");
    let holder = held_everywhere(&testbed).await;
    let lock = common::connected(common::lock(&testbed)).await;
    let leaves = |testbed: &Testbed| -> u64 {
        testbed
            .nodes()
            .iter()
            .map(|n| common::calls_on(n, "zrem"))
            .sum()
    };
    let before = leaves(&testbed);
    let refused = lock.acquire("job", Wait::NONE).await;
    assert!(
        matches!(refused, Err(Error::WaitBudgetExhausted { attempts: 1, .. })),
        "{refused:?}"
    );
    assert_eq!(leaves(&testbed), before, "no place given up: none taken");
    assert!(
        testbed.nodes().iter().all(|n| queued_on(n) == 0),
        "no place taken"
    );
    holder.release().await;
}

#[test]
fn fairness_needs_wake_ups() {
    let refused = quorumlock::LockConfig::builder()
        .node("redis://127.0.0.1:6379")
        .fair(true)
        .wake_ups(false)
        .build();
    assert_eq!(
        refused.unwrap_err(),
        quorumlock::ConfigError::FairNeedsWakeUps
    );
}

/// Turn channels (of any lock service) subscribed on `node`.
fn turn_channels_on(node: &RedisNode) -> usize {
    let mut conn = node.connection().expect("inspect node");
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("quorumlock:released:quorumlock:turn:*")
        .query(&mut conn)
        .expect("PUBSUB CHANNELS");
    channels.len()
}

/// Spawns a waiter of `lock` on "job" and waits until it is queued on
/// every node with its lock service listening for its turn (a grant made
/// before that would be lost to it).
async fn queue_a_waiter(
    testbed: &Testbed,
    lock: &MultiLock,
) -> tokio::task::JoinHandle<Result<LockGuard, Error>> {
    let waiter = common::spawn_waiter(lock, "job");
    wait_queued(testbed, 1, "the waiter to queue on every node").await;
    common::wait_for(
        "the waiter's lock service to listen for its turn",
        Duration::from_secs(5),
        || testbed.nodes().iter().all(|n| turn_channels_on(n) == 1),
    )
    .await;
    waiter
}

/// The guard of `waiter` (of `lock`), woken by a release notice and won
/// in one attempt after the `attempts` made before it: decided on the
/// grants when `granted` is 1, by a round of its own when it is 0.
async fn woken_in_one_attempt(
    waiter: tokio::task::JoinHandle<Result<LockGuard, Error>>,
    lock: &MultiLock,
    attempts: u64,
    granted: u64,
    what: &str,
) -> LockGuard {
    let guard = common::woken_by_notice(waiter).await;
    let stats = lock.stats();
    assert_eq!(stats.granted, granted, "{what}: decided on grants or not");
    assert_eq!(
        stats.attempts,
        attempts + 1,
        "{what}: one attempt after the release"
    );
    assert!(guard.is_held(), "{what}");
    guard
}

/// Whether every node's clock (`TIME`, in whole ms as the scripts read
/// it) has passed the time until which the one place on it may be granted
/// the name (the second field of its lease, `scripts/queue.lua`).
fn past_every_grant_request(testbed: &Testbed) -> bool {
    testbed.nodes().iter().all(|node| {
        let mut conn = node.connection().expect("inspect node");
        let leases: Vec<String> = redis::cmd("HVALS")
            .arg("quorumlock:leases:job")
            .query(&mut conn)
            .expect("HVALS");
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).expect("TIME");
        let now_ms = secs * 1000 + micros / 1000;
        let [lease] = leases.as_slice() else {
            panic!("one place on each node, not {leases:?}");
        };
        let grantable: u64 = lease
            .split(' ')
            .nth(1)
            .and_then(|g| g.parse().ok())
            .unwrap_or_else(|| panic!("a place that asks for a grant, not {lease:?}"));
        now_ms > grantable
    })
}

/// A grant request is granted only within half the waiter's TTL of the
/// attempt that made it (by the node's clock): past it, the release only
/// announces itself, and the waiter takes the name with an attempt of its
/// own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_request_past_half_the_ttl_is_not_granted() {
    let testbed = Testbed::start(3).expect("testbed");
    let holder_lock = common::every_node_lock(&testbed).await;
    // A 4 s TTL (and the longest node timeout it allows): its requests
    // may be granted for 2 s. Its backoff is a minute, so that no attempt
    // of its own renews them meanwhile.
    let waiter_lock = common::connected(common::lock_with(&testbed, |b| {
        common::slow_polling(b)
            .ttl(Duration::from_secs(4))
            .node_timeout(Duration::from_millis(400))
    }))
    .await;
    let holder = holder_lock.try_acquire("job").await.expect("free");
    let waiter = queue_a_waiter(&testbed, &waiter_lock).await;
    common::wait_for(
        "every node's clock to pass the waiter's grant request",
        Duration::from_secs(10),
        || past_every_grant_request(&testbed),
    )
    .await;
    let attempts = waiter_lock.stats().attempts;

    holder.release().await;
    let guard =
        woken_in_one_attempt(waiter, &waiter_lock, attempts, 0, "past the request's time").await;
    guard.release().await;
    for node in testbed.nodes() {
        assert_eq!(common::value_on(node, "job"), None, "released");
    }
}

/// A release takes the name for the queue's first waiter of another
/// process in the same script call (a grant): the waiter wins on the
/// nodes' notices with no acquire round of its own, its guard releases
/// the name as any other, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_takes_the_name_for_the_first_waiter_of_another_process() {
    for fair in [false, true] {
        let testbed = Testbed::start(3).expect("testbed");
        let holder_lock = common::every_node_lock(&testbed).await;
        // It reads the fencing counters with every acquire: the grant
        // notices carry them.
        let waiter_lock = common::connected(common::lock_with(&testbed, |b| {
            common::slow_polling(b).fair(fair).prefetch_fencing(true)
        }))
        .await;
        let holder = holder_lock.try_acquire("job").await.expect("free");
        let holder_token = holder.fencing_token().await.expect("holder's token");
        let waiter = queue_a_waiter(&testbed, &waiter_lock).await;
        let attempts = waiter_lock.stats().attempts;

        holder.release().await;
        let guard =
            woken_in_one_attempt(waiter, &waiter_lock, attempts, 1, &format!("fair {fair}")).await;
        let token = guard.fencing_token().await.expect("the waiter's token");
        assert!(
            token > holder_token,
            "fair {fair}: {token} after {holder_token}"
        );
        // Every node granted it: each holds the waiter's token, and its
        // place is given up.
        wait_queued(&testbed, 0, "the granted waiter's places to go").await;
        guard.release().await;
        for node in testbed.nodes() {
            assert_eq!(common::value_on(node, "job"), None, "fair {fair}: released");
        }
    }
}
