//! Fencing tokens against real nodes: the counterexample that breaks the
//! naive "maximum of per-node INCRs" scheme, thousands of contended
//! acquisitions while nodes crash and come back empty, and the token of a
//! released or re-entered hold. See `src/fence.rs` for the scheme.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quorumlock::fenced::{FencedResource, Write};
use quorumlock::{Error, Hold, LockConfig, LockGuard, LostReason, MultiLock, Wait};
use quorumlock_testbed::{NodeOptions, Persistence, RedisNode, Testbed};

/// `INCR key` on one node: the naive scheme's step on a won node.
fn incr_on(node: &RedisNode, key: &str) -> u64 {
    let mut conn = node.connection().expect("inspect node");
    redis::cmd("INCR").arg(key).query(&mut conn).expect("INCR")
}

/// The reference the library must beat: on a win, `INCR` a per-node counter
/// on every node won and take the largest value.
fn naive_token(won: &[&RedisNode], key: &str) -> u64 {
    won.iter()
        .map(|node| incr_on(node, key))
        .max()
        .expect("a win has at least one node")
}

/// The nodes a guard holds (confirmed), by index in the testbed.
fn held_indices(testbed: &Testbed, guard: &LockGuard) -> Vec<usize> {
    let urls = testbed.urls();
    guard
        .held_nodes()
        .map(|held| {
            urls.iter()
                .position(|u| u == held)
                .expect("a guard's node is a testbed node")
        })
        .collect()
}

/// The schedule of `src/fence.rs` ("Why not the maximum of per-node
/// counters"), on three real nodes, for both schemes side by side.
///
/// Counters start at {n1: 10, n2: 1, n3: 1}: a minority ran ahead. Both
/// schemes can get there: the naive one by partial attempts that won n1
/// only; quorumlock by holders whose raise reached n1 but timed out on n2
/// and n3 (they got `FencingUnavailable`, and n1 kept the raise). The test
/// sets the counters directly. A wins exactly {n1, n2}, B later wins
/// exactly {n2, n3}.
///
/// How each node is kept out:
///
/// * n3 during A is **killed**, not paused. A paused node keeps A's
///   requests in its socket and runs them when resumed: A's acquire, A's
///   raise of the counter to 11 and A's release would all land on n3 before
///   B's acquire, so n3 would already carry 11 and the schedule would be
///   gone. A killed node never sees them. The nodes run with
///   `appendfsync always`, so n3 comes back with its counter at 1: a node
///   that was unreachable during A, not one that lost its data (a node that
///   comes back empty is the other test's subject).
/// * n1 during B is **paused**: B decides on n2 and n3 without waiting for
///   it. n1 is resumed before B releases; its queued requests (B's acquire,
///   raise and release) then run there in order, which is harmless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_max_of_incr_regresses_on_the_counterexample_but_ours_does_not() {
    const NAME: &str = "account:42";
    let naive_key = format!("naive:fence:{NAME}");
    let persistent = NodeOptions {
        persistence: Persistence::AofAlways,
        ..NodeOptions::default()
    };
    let mut testbed = Testbed::start_with(3, persistent).expect("testbed");
    let resource_server = Testbed::start(1).expect("resource server");
    let resource_url = &resource_server.urls()[0];
    let naive_resource = FencedResource::open(resource_url, "naive")
        .await
        .expect("resource");
    let our_resource = FencedResource::open(resource_url, "ours")
        .await
        .expect("resource");
    // A long TTL (nothing expires during the test) and a node timeout that
    // a busy machine does not hit on a live node.
    // The nodes lose nothing on a restart (AOF, `appendfsync always`):
    // declared durable, they keep their epoch and vote at once.
    let config = LockConfig::builder()
        .nodes(testbed.urls())
        .durable_nodes(testbed.urls())
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(500))
        .build()
        .expect("valid configuration");
    // The marker of a durable node lives in its AOF: connect once so that
    // every node has it before the counters are set.
    let _ = common::connected(MultiLock::new(config.clone())).await;

    for (i, start) in [10, 1, 1].into_iter().enumerate() {
        common::set_on(testbed.node(i), &naive_key, start);
        common::set_fence_on(testbed.node(i), NAME, start);
    }

    // A, with n3 down: wins exactly {n1, n2}.
    let client_a = common::connected(MultiLock::new(config.clone())).await;
    testbed.node_mut(2).kill().expect("kill n3");
    let a = client_a
        .try_acquire(NAME)
        .await
        .expect("n1 and n2 are a majority");
    assert_eq!(
        held_indices(&testbed, &a),
        [0, 1],
        "A won exactly {{n1, n2}}"
    );
    let naive_a = naive_token(&[testbed.node(0), testbed.node(1)], &naive_key);
    let ours_a = a.fencing_token().await.expect("A's token");
    assert_eq!(naive_a, 11, "naive: max(INCR n1, INCR n2) = max(11, 2)");
    assert_eq!(ours_a, 11, "ours: one more than max(10, 1)");
    a.release().await;
    // A's raise reached n1 and n2, never n3.
    assert_eq!(common::fence_on(testbed.node(0), NAME), Some(11));
    assert_eq!(common::fence_on(testbed.node(1), NAME), Some(11));

    // n3 back, with its data (a node that was only unreachable).
    testbed.node_mut(2).start().expect("restart n3");
    assert_eq!(common::fence_on(testbed.node(2), NAME), Some(1));
    let client_b = common::connected(MultiLock::new(config)).await;

    // B, with n1 paused: wins exactly {n2, n3}.
    testbed.node_mut(0).pause().expect("pause n1");
    let b = client_b
        .try_acquire(NAME)
        .await
        .expect("n2 and n3 are a majority");
    assert_eq!(
        held_indices(&testbed, &b),
        [1, 2],
        "B won exactly {{n2, n3}}"
    );
    assert_eq!(
        b.nodes().next().map(|(_, hold)| hold),
        Some(Hold::Unknown),
        "n1 never answered"
    );
    let naive_b = naive_token(&[testbed.node(1), testbed.node(2)], &naive_key);
    let ours_b = b.fencing_token().await.expect("B's token");
    assert!(testbed.node(0).is_paused(), "B decided without n1");

    // The naive scheme regresses: B, the later holder, has the smaller token.
    assert_eq!(naive_b, 3, "naive: max(INCR n2, INCR n3) = max(3, 2)");
    assert!(
        naive_b < naive_a,
        "naive regresses: {naive_b} after {naive_a}"
    );
    // Ours does not: B read n2's counter, which A had raised to 11.
    assert!(ours_b > ours_a, "ours: {ours_b} after {ours_a}");
    assert_eq!(ours_b, 12);

    // What the regression does to a protected resource: A got its token,
    // stalled, and its write arrives after B's. Naive: the stale write
    // overwrites B's. Ours: it is refused.
    assert_eq!(
        naive_resource.write(naive_b, "B").await.expect("write"),
        Write::Accepted
    );
    assert_eq!(
        naive_resource
            .write(naive_a, "stale A")
            .await
            .expect("write"),
        Write::Accepted,
        "the naive scheme lets the stale holder through"
    );
    assert_eq!(
        our_resource.write(ours_b, "B").await.expect("write"),
        Write::Accepted
    );
    assert_eq!(
        our_resource.write(ours_a, "stale A").await.expect("write"),
        Write::Rejected { last: ours_b }
    );
    assert_eq!(
        our_resource.read().await.expect("read"),
        Some((ours_b, "B".to_string()))
    );

    // n1 runs B's queued acquire, raise and release once resumed.
    testbed.node_mut(0).resume().expect("resume n1");
    let report = b.release().await;
    assert!(report.was_held);
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    common::wait_until_gone(&testbed, NAME, "B released").await;
}

/// Progress of the contended run, shared by the workers and the chaos
/// thread.
#[derive(Default)]
struct Counts {
    /// Guards obtained.
    acquired: AtomicUsize,
    /// `acquire` calls that gave up (wait budget spent).
    acquire_failed: AtomicUsize,
    /// `fencing_token()` answered `FencingUnavailable`.
    fencing_unavailable: AtomicUsize,
    /// `fencing_token()` answered `Lost` (the guard's validity ran out).
    fencing_lost: AtomicUsize,
    /// Writes refused by the resource after the writer's validity ended
    /// (fencing doing its job; never expected in this test).
    stale_rejected: AtomicUsize,
    /// Nodes killed, kept down past the TTL and started again.
    restarts: AtomicUsize,
    /// Of those, nodes without a fencing counter right after they came back.
    came_back_empty: AtomicUsize,
}

/// Six workers contend for one name, each acquisition takes a fencing token
/// and writes with it to a resource on a server of its own. Meanwhile one
/// node at a time is killed, kept down longer than the TTL (the
/// delayed-restart rule) and started again without its data: its fencing
/// counters are gone. Every write must be accepted and the tokens, in the
/// order the resource accepted them, must strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_over_thousands_of_contended_acquisitions_with_nodes_killed_and_restarted()
 {
    const NAME: &str = "inventory";
    const NODES: usize = 5;
    const WORKERS: usize = 6;
    const TARGET: usize = 2_000;
    // Every node is killed and comes back empty at least once.
    const MIN_RESTARTS: usize = NODES;
    let ttl = Duration::from_millis(400);
    // Down for longer than the TTL, as Redlock requires of a node that
    // loses its data: every lock it took part in has expired by the time
    // it is back.
    let down_for = ttl + Duration::from_millis(200);
    // A bound, not a speed target: an idle machine reaches the target in
    // about 10 s; two CPU hogs and a parallel build made it 1,917 writes
    // in 35 s once.
    let bound = Duration::from_secs(120);

    let testbed = Testbed::start(NODES).expect("testbed");
    let resource_server = Testbed::start(1).expect("resource server");
    let resource = FencedResource::open(&resource_server.urls()[0], NAME)
        .await
        .expect("resource");
    // The largest node timeout allowed (a tenth of the TTL), so that a busy
    // machine rarely times out a live node.
    let config = LockConfig::builder()
        .nodes(testbed.urls())
        .ttl(ttl)
        .node_timeout(ttl / 10)
        .build()
        .expect("valid configuration");
    let shared = common::connected(MultiLock::new(config.clone())).await;

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    // Tokens in the order the resource accepted them. The mutex is held
    // across the write, so this order is the resource's.
    let accepted: Arc<tokio::sync::Mutex<Vec<u64>>> = Arc::default();

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        // Worker 0 has a client of its own; the others share one (whose
        // waiters take turns). So two independent clients race for the
        // nodes. (Each worker on its own client works too, but every client
        // adds a few contended attempts per release, and on two busy cores
        // the run then takes too long.)
        let lock = if w == 0 {
            common::connected(MultiLock::new(config.clone())).await
        } else {
            shared.clone()
        };
        let (stop, counts, accepted, resource) = (
            Arc::clone(&stop),
            Arc::clone(&counts),
            Arc::clone(&accepted),
            resource.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut last_error = None;
            while !stop.load(Ordering::SeqCst) {
                let guard = match lock
                    .acquire(NAME, Wait::up_to(Duration::from_secs(2)))
                    .await
                {
                    Ok(guard) => guard,
                    Err(e) => {
                        counts.acquire_failed.fetch_add(1, Ordering::SeqCst);
                        last_error = Some(e.to_string());
                        continue;
                    }
                };
                counts.acquired.fetch_add(1, Ordering::SeqCst);
                let token = match guard.fencing_token().await {
                    Ok(token) => token,
                    Err(e @ Error::FencingUnavailable { .. }) => {
                        // Transient (a node down, or slow on a busy
                        // machine): give the lock back and start over.
                        counts.fencing_unavailable.fetch_add(1, Ordering::SeqCst);
                        last_error = Some(e.to_string());
                        guard.release().await;
                        continue;
                    }
                    Err(e @ Error::Lost { .. }) => {
                        counts.fencing_lost.fetch_add(1, Ordering::SeqCst);
                        last_error = Some(e.to_string());
                        guard.release().await;
                        continue;
                    }
                    Err(other) => panic!("unexpected error from fencing_token: {other}"),
                };
                let mut log = accepted.lock().await;
                let write = resource
                    .write(token, &format!("worker {w}"))
                    .await
                    .expect("the resource server is never faulted");
                let held_throughout = guard.is_held();
                match write {
                    Write::Accepted => log.push(token),
                    Write::Rejected { last } => {
                        assert!(
                            !held_throughout,
                            "worker {w}: token {token} refused (last accepted {last}) \
                             although the guard was held during the whole write"
                        );
                        counts.stale_rejected.fetch_add(1, Ordering::SeqCst);
                    }
                    other => panic!("unexpected write outcome {other:?}"),
                }
                drop(log);
                guard.release().await;
            }
            last_error
        }));
    }

    // One node at a time: kill it, keep it down past the TTL, start it
    // again empty, and wait until holders have raised its counter again
    // (so at most one node is without its counters at any time: a
    // minority), then the next node. Blocking calls: on its own thread.
    let chaos = {
        let (stop, counts) = (Arc::clone(&stop), Arc::clone(&counts));
        tokio::task::spawn_blocking(move || {
            let mut testbed = testbed;
            // Wait for a first token on every node: a name's first token
            // needs every node to answer (no node has a counter yet), so a
            // node killed before would only make every attempt fail.
            let has_counter =
                |testbed: &Testbed, i: usize| common::fence_on(testbed.node(i), NAME).is_some();
            let give_up = Instant::now() + Duration::from_secs(10);
            while !(0..NODES).all(|i| has_counter(&testbed, i)) && !stop.load(Ordering::SeqCst) {
                assert!(Instant::now() < give_up, "no first token within 10 s");
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut cycle = 0;
            while !stop.load(Ordering::SeqCst) {
                let i = cycle % NODES;
                cycle += 1;
                testbed.node_mut(i).kill().expect("kill");
                // The fault schedule itself: the node stays down.
                std::thread::sleep(down_for);
                testbed.node_mut(i).start().expect("restart");
                let empty = !has_counter(&testbed, i);
                counts
                    .came_back_empty
                    .fetch_add(usize::from(empty), Ordering::SeqCst);
                counts.restarts.fetch_add(1, Ordering::SeqCst);
                let give_up = Instant::now() + Duration::from_secs(10);
                while !has_counter(&testbed, i) && !stop.load(Ordering::SeqCst) {
                    assert!(
                        Instant::now() < give_up,
                        "node {i} got no fencing counter within 10 s of its restart"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            testbed
        })
    };

    // Until enough acquisitions and restarts, a worker or the chaos thread
    // failing, or the bound.
    let began = Instant::now();
    let reached = loop {
        let done = accepted.lock().await.len() >= TARGET
            && counts.restarts.load(Ordering::SeqCst) >= MIN_RESTARTS;
        if done
            || began.elapsed() > bound
            || chaos.is_finished()
            || workers.iter().any(|w| w.is_finished())
        {
            break done;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let elapsed = began.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut last_errors = Vec::new();
    for worker in workers {
        last_errors.extend(worker.await.expect("worker"));
    }
    let testbed = chaos.await.expect("chaos");
    assert!(
        testbed.nodes().iter().all(|n| n.is_running()),
        "the chaos thread leaves every node running"
    );

    let tokens = accepted.lock().await.clone();
    let get = |c: &AtomicUsize| c.load(Ordering::SeqCst);
    let acquired = get(&counts.acquired);
    let unavailable = get(&counts.fencing_unavailable);
    let summary = format!(
        "{} accepted writes, {acquired} guards, {} acquire failures, {unavailable} \
         FencingUnavailable, {} Lost, {} stale rejections, {} restarts ({} came back \
         empty), in {elapsed:?}; each worker's last error: {last_errors:?}",
        tokens.len(),
        get(&counts.acquire_failed),
        get(&counts.fencing_lost),
        get(&counts.stale_rejected),
        get(&counts.restarts),
        get(&counts.came_back_empty),
    );
    println!("{summary}");
    assert!(reached, "bound of {bound:?} hit first: {summary}");
    if let Some(i) = tokens.windows(2).position(|w| w[1] <= w[0]) {
        panic!(
            "token regressed or repeated at write {}: {} then {} ({summary})",
            i + 1,
            tokens[i],
            tokens[i + 1]
        );
    }
    assert_eq!(
        get(&counts.stale_rejected),
        0,
        "no holder outlived its validity: {summary}"
    );
    assert!(get(&counts.restarts) >= 2, "{summary}");
    assert!(
        get(&counts.came_back_empty) >= 1,
        "some node came back without its counters: {summary}"
    );
    assert!(
        unavailable * 2 < acquired,
        "FencingUnavailable must stay the exception: {summary}"
    );
    assert!(
        get(&counts.acquire_failed) * 2 < acquired,
        "acquire failures must stay the exception: {summary}"
    );
    assert_eq!(
        resource.read().await.expect("read").map(|(t, _)| t),
        tokens.last().copied(),
        "the resource holds the last accepted token"
    );
}

/// A released hold has no token to give; re-entries share the outer
/// hold's token whichever of them asks first; the next holder's is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_holds_have_no_token_and_reentries_share_one() {
    const NAME: &str = "batch";
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;

    let outer = common::take_free(&lock, NAME).await;
    let inner = outer.reenter().await.expect("first re-entry");
    let nested = inner.reenter().await.expect("re-entry of the re-entry");
    // The innermost asks first; the others get the same token.
    let token = nested.fencing_token().await.expect("token");
    assert_eq!(inner.fencing_token().await.expect("token"), token);
    assert_eq!(outer.fencing_token().await.expect("token"), token);
    let again = outer.reenter().await.expect("second re-entry of the outer");
    assert_eq!(again.fencing_token().await.expect("token"), token);
    let raised = testbed
        .nodes()
        .iter()
        .filter(|n| common::fence_on(n, NAME) == Some(token))
        .count();
    assert!(raised >= 2, "a majority carries the token: {raised}");
    for guard in [again, nested, inner] {
        assert!(
            guard.release().await.kept > 0,
            "the outer hold keeps the key"
        );
    }
    assert!(outer.is_held());
    assert_eq!(outer.fencing_token().await.expect("token"), token);
    outer.release().await;

    // Released before it asked: no token.
    let guard = lock.try_acquire(NAME).await.expect("free again");
    let handle = guard.handle();
    guard.release().await;
    match handle.fencing_token().await {
        Err(Error::Lost {
            reason: LostReason::Released,
            key,
        }) => assert_eq!(key, NAME),
        other => panic!("expected Lost(Released), got {other:?}"),
    }

    // Past its validity (no watchdog, no extend): no token either.
    let short = common::lock_with(&testbed, |b| {
        b.ttl(Duration::from_millis(500))
            .node_timeout(Duration::from_millis(50))
    });
    let expiring = short
        .acquire(NAME, Wait::up_to(Duration::from_secs(5)))
        .await
        .expect("free again");
    let notice = expiring.lost().await;
    assert_eq!(notice.reason, LostReason::ValidityExpired);
    match expiring.fencing_token().await {
        Err(Error::Lost {
            reason: LostReason::ValidityExpired,
            ..
        }) => {}
        other => panic!("expected Lost(ValidityExpired), got {other:?}"),
    }
    expiring.release().await;

    // The next holder's token is larger.
    let next = lock.try_acquire(NAME).await.expect("free again");
    let next_token = next.fencing_token().await.expect("token");
    assert!(next_token > token, "{next_token} after {token}");
    next.release().await;
}

/// `DEL key` on one node: the key lost as a restart or an acquire that
/// decided without the node would leave it.
fn delete_on(node: &RedisNode, key: &str) {
    let mut conn = node.connection().expect("inspect node");
    let _: u64 = redis::cmd("DEL").arg(key).query(&mut conn).expect("DEL");
}

/// A raise re-takes a lock key that is absent on a node (the acquire
/// decided before that node answered, or the node lost the key), as a
/// renewal heals it, so that the node can confirm the token; a key that
/// another owner holds is left alone. Before, such nodes refused the
/// raise, and with a node down as well the holder got no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_re_takes_absent_keys_and_leaves_other_owners_alone() {
    let testbed = Testbed::start(3).expect("testbed");
    let nodes = testbed.nodes();
    let lock = common::connected(common::lock(&testbed)).await;
    // A majority round drops the raise it had not yet sent to the third
    // node once two confirmed: the first part asks every node.
    let every_node = common::every_node_lock(&testbed).await;

    // Two of the three keys gone: only one node would confirm otherwise.
    let guard = common::take_free(&every_node, "ledger").await;
    let token = {
        for node in &nodes[..2] {
            delete_on(node, "ledger");
        }
        guard
            .fencing_token()
            .await
            .expect("a token from re-taken keys")
    };
    let owner = common::value_on(&nodes[2], "ledger").expect("held on n2");
    // The token needs a majority: the raise to the third node may still be
    // on its way when it is handed out (it is sent, and lands).
    common::wait_for(
        "the raise to re-take the key on every node",
        Duration::from_secs(5),
        || {
            nodes
                .iter()
                .all(|n| common::fence_on(n, "ledger") == Some(token))
        },
    )
    .await;
    for node in nodes {
        assert_eq!(common::value_on(node, "ledger").as_deref(), Some(&*owner));
        assert_eq!(common::fence_on(node, "ledger"), Some(token));
        let ttl = common::pttl_on(node, "ledger");
        assert!(0 < ttl && ttl <= 30_000, "a TTL within the validity: {ttl}");
    }
    guard.release().await;

    // n0 held by another owner, n1 absent: n1 is re-taken, n0 is not.
    testbed.expect_left("ledger");
    let guard = lock.try_acquire("ledger").await.expect("free again");
    let mut conn = nodes[0].connection().expect("inspect node");
    let _: () = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("ledger")
        .cmd("HSET")
        .arg("ledger")
        .arg("owner")
        .arg("someone else")
        .query(&mut conn)
        .expect("another owner's key");
    delete_on(&nodes[1], "ledger");
    let next = guard.fencing_token().await.expect("n1 and n2 confirm");
    assert!(next > token);
    assert_eq!(
        common::value_on(&nodes[0], "ledger").as_deref(),
        Some("someone else")
    );
    assert_eq!(common::fence_on(&nodes[0], "ledger"), Some(token));
    assert_eq!(common::fence_on(&nodes[1], "ledger"), Some(next));
    guard.release().await;
}

/// The `GET`s one acquire and release of `name` by `lock` cost node 0
/// (every node takes part: `lock` needs them all).
async fn gets_per_hold(testbed: &Testbed, lock: &MultiLock, name: &str) -> u64 {
    // The scripts' own `GET`s included (`INFO commandstats`).
    let before = common::calls_on(testbed.node(0), "get");
    let guard = lock.try_acquire(name).await.expect("free");
    guard.release().await;
    common::calls_on(testbed.node(0), "get") - before
}

/// An acquire reads the fencing counter (one `GET` per name and node) only
/// once a holder of its lock service has asked for a token, or from the
/// start with `prefetch_fencing`; the first token reads it itself, and the
/// tokens rise either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_read_the_counters_once_a_holder_asked_for_a_token() {
    let testbed = Testbed::start(3).expect("testbed");
    let lazy = common::every_node_lock(&testbed).await;
    let eager = common::connected(common::lock_with(&testbed, |b| {
        b.quorum(quorumlock::Quorum::All).prefetch_fencing(true)
    }))
    .await;
    let without = gets_per_hold(&testbed, &lazy, "job").await;
    assert_eq!(
        gets_per_hold(&testbed, &eager, "job").await,
        without + 1,
        "a prefetching service reads the counter"
    );
    let first = token_of_a_hold(&lazy).await;
    assert_eq!(
        gets_per_hold(&testbed, &lazy, "job").await,
        without + 1,
        "read once a holder asked for a token"
    );
    let second = token_of_a_hold(&lazy).await;
    assert!(second > first, "{second} after {first}");
}

/// The fencing token of one hold of "job" by `lock`.
async fn token_of_a_hold(lock: &MultiLock) -> u64 {
    let guard = lock.try_acquire("job").await.expect("free");
    let token = guard.fencing_token().await.expect("a token");
    guard.release().await;
    token
}
