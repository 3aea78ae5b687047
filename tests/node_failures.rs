//! Quorum policies against dead and paused nodes.

mod common;

use std::time::Duration;

use quorumlock::{Error, Hold, NodeErrorKind, NodeOutcome, Quorum};
use quorumlock_testbed::Testbed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_survives_two_dead_nodes_and_refuses_with_three() {
    let mut testbed = common::start_recording(5);
    let lock = common::lock(&testbed);
    let killed: Vec<String> = (0..2).map(|i| testbed.node(i).url()).collect();
    for i in 0..2 {
        testbed.node_mut(i).kill().expect("kill");
    }
    let guard = lock
        .try_acquire("job")
        .await
        .expect("3 of 5 nodes are a majority");
    assert_eq!(guard.held_nodes().count(), 3);
    for (url, hold) in guard.nodes() {
        if killed.iter().any(|k| k == url) {
            // Dead: never held (Unknown if the quorum was won before its
            // connection error came back).
            assert_ne!(hold, Hold::Held, "{url}");
        }
    }
    guard.release().await;

    let marks: Vec<u64> = testbed.nodes()[3..].iter().map(common::log_mark).collect();
    testbed.node_mut(2).kill().expect("kill");
    let killed: Vec<String> = (0..3).map(|i| testbed.node(i).url()).collect();
    match lock.try_acquire("job").await {
        Err(Error::QuorumNotReached {
            required,
            won,
            nodes,
            ..
        }) => {
            assert_eq!(required, 3);
            assert!(won <= 2, "only two nodes live: {won}");
            let unreachable: Vec<&str> = nodes
                .errors()
                .filter(|e| e.kind() == NodeErrorKind::Unreachable)
                .map(|e| e.node())
                .collect();
            assert_eq!(
                unreachable,
                killed.iter().map(String::as_str).collect::<Vec<_>>()
            );
            let text = Error::QuorumNotReached {
                key: "job".into(),
                required,
                won,
                nodes,
            }
            .to_string();
            assert!(
                killed.iter().all(|k| text.contains(k.as_str())),
                "the message names every failed node: {text}"
            );
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    // The counters tell an operator which nodes fail.
    let stats = lock.stats();
    assert_eq!(
        (stats.attempts, stats.acquired, stats.quorum_not_reached),
        (2, 1, 1)
    );
    for node in &stats.nodes {
        let dead = killed.contains(&node.node);
        assert_eq!(node.errors > 0, dead, "{node:?}");
    }

    // Nothing of the failed attempt is left on the two live nodes once
    // each has run its rollback.
    for (node, mark) in testbed.nodes()[3..].iter().zip(&marks) {
        common::assert_rolled_back(node, "job", *mark).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_fails_with_any_node_down() {
    let mut testbed = common::start_recording(5);
    let lock = common::lock_with(&testbed, |b| b.quorum(Quorum::All));
    lock.try_acquire("all")
        .await
        .expect("all nodes up")
        .release()
        .await;
    let marks: Vec<u64> = testbed.nodes()[..4].iter().map(common::log_mark).collect();
    testbed.node_mut(4).kill().expect("kill");
    match lock.try_acquire("all").await {
        Err(Error::QuorumNotReached {
            required: 5, won, ..
        }) => assert!(won <= 4),
        other => panic!("expected QuorumNotReached 4 of 5, got {other:?}"),
    }
    for (node, mark) in testbed.nodes()[..4].iter().zip(&marks) {
        common::assert_rolled_back(node, "all", *mark).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_k_at_its_boundary() {
    let mut testbed = Testbed::start(5).expect("testbed");
    let lock = common::lock_with(&testbed, |b| b.quorum(Quorum::AtLeast(2)));
    for i in 0..3 {
        testbed.node_mut(i).kill().expect("kill");
    }
    let guard = lock
        .try_acquire("k2")
        .await
        .expect("exactly 2 nodes left: enough");
    assert_eq!(guard.held_nodes().count(), 2);
    guard.release().await;
    testbed.node_mut(3).kill().expect("kill");
    assert!(matches!(
        lock.try_acquire("k2").await,
        Err(Error::QuorumNotReached {
            required: 2,
            won: 0 | 1,
            ..
        })
    ));
}

/// A SIGSTOPped node accepts the request into its socket and never answers.
/// The acquire must decide on the other four without waiting for it: with a
/// node timeout of a minute, only an early decision returns at all, and the
/// paused node shows up as "no reply before the decision", not as a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_node_does_not_hold_up_acquire() {
    let mut testbed = Testbed::start(5).expect("testbed");
    let lock = common::lock_with(&testbed, |b| {
        b.ttl(Duration::from_secs(600))
            .node_timeout(Duration::from_secs(60))
    });
    lock.warm_up()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("all connected");
    testbed.node_mut(0).pause().expect("pause");

    let guard = lock.try_acquire("paused").await.expect("4 of 5 answer");
    assert!(
        testbed.node(0).is_paused(),
        "returned while the node is still paused"
    );
    let holds: Vec<Hold> = guard.nodes().map(|(_, h)| h).collect();
    assert_eq!(holds[0], Hold::Unknown);
    assert!(guard.validity() > Duration::from_secs(500));

    // A failing attempt also decides without the paused node: two more
    // nodes down leaves 2 live of 5, and the outcome is certain once they answer.
    testbed.node_mut(1).kill().expect("kill");
    testbed.node_mut(2).kill().expect("kill");
    let other = common::lock_with(&testbed, |b| {
        b.ttl(Duration::from_secs(600))
            .node_timeout(Duration::from_secs(60))
    });
    match other.try_acquire("paused").await {
        Err(Error::Contended { nodes, .. }) | Err(Error::QuorumNotReached { nodes, .. }) => {
            // A new lock connects every node before its first round: the
            // paused node's connect timed out then.
            match &nodes.as_slice()[0].outcome {
                NodeOutcome::NoReplyBeforeDecision => {}
                NodeOutcome::Failed(e) => assert_eq!(e.kind(), NodeErrorKind::Timeout, "{e}"),
                other => panic!("n0: {other:?}"),
            }
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    testbed.node_mut(0).resume().expect("resume");
    drop(guard);
}

/// A paused node costs a release one node timeout in all, not one per
/// release: once a call to it has timed out and nothing has answered since,
/// releases send to it but do not wait for it (reported as failed, not
/// counted as new timeouts). Once it answers again, releases wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_costs_releases_one_node_timeout_in_all() {
    let mut testbed = Testbed::start(5).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    testbed.node_mut(4).pause().expect("pause");
    let timeouts = || lock.stats().nodes[4].timeouts;

    // released + not_held: an acquire decided at its quorum may have
    // skipped a request not yet written.
    let first = lock
        .try_acquire("paused")
        .await
        .expect("4 of 5")
        .release()
        .await;
    assert_eq!(
        (first.released + first.not_held, first.failed.len()),
        (4, 1),
        "{first:?}"
    );
    assert_eq!(first.failed[0].kind(), NodeErrorKind::Timeout);
    assert_eq!(
        timeouts(),
        1,
        "the first release waited out the node timeout"
    );
    // With a waiter of the same lock service: no handoff while a node is
    // suspect (a handoff waits for every node's answer), so the release
    // does not wait either; the waiter takes the name on its notice.
    let held = lock.try_acquire("paused").await.expect("4 of 5");
    let contended = lock.stats().contended;
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.acquire("paused", quorumlock::Wait::up_to(Duration::from_secs(10)))
                .await
        })
    };
    // Asleep with its handoff offer once it has subscribed (it offers
    // right after, without awaiting anything).
    common::wait_for(
        "the waiter to sleep on the name",
        Duration::from_secs(5),
        || {
            lock.stats().contended > contended
                && common::subscribers_on(testbed.node(0), "paused") == 1
        },
    )
    .await;
    held.release().await;
    let next = waiter
        .await
        .expect("waiter task")
        .expect("the waiter takes it");
    next.release().await;
    assert_eq!(timeouts(), 1, "neither release waited for the paused node");
    assert_eq!(
        lock.stats().handoffs,
        0,
        "no handoff while a node is suspect"
    );

    for _ in 0..20 {
        let report = lock
            .try_acquire("paused")
            .await
            .expect("4 of 5")
            .release()
            .await;
        // The paused node is sent the release (not waited for) if the
        // acquire was sent to it, else skipped: nothing of this guard
        // reached it (a `not_held`).
        let answered = report.released + report.not_held;
        assert_eq!(answered + report.failed.len(), 5, "{report:?}");
        assert!(report.failed.len() <= 1, "{report:?}");
        assert!(
            report
                .failed
                .iter()
                .all(|e| e.kind() == NodeErrorKind::Timeout),
            "{report:?}"
        );
    }
    assert_eq!(timeouts(), 1, "no release waited for the paused node again");

    testbed.node_mut(4).resume().expect("resume");
    // Its queued calls are answered now, which clears the suspicion; from
    // then on releases wait for it again and it takes part.
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 200, "the resumed node never took part again");
        let report = lock
            .try_acquire("paused")
            .await
            .expect("free")
            .release()
            .await;
        if report.released == 5 {
            break;
        }
        tokio::task::yield_now().await;
    }
}
