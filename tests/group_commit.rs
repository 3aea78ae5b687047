//! Group commit (`src/outbox.rs`): calls bound for one node while a call to
//! it is out leave together, in order, as one script call; one caller's bad
//! key costs no other caller its answer; an acquire given up while queued is
//! never sent, and its rollback is.

mod common;

use std::time::Duration;

use futures::future::join_all;
use quorumlock::{Error, NodeErrorKind, NodeOutcome};

use common::ScriptCall;

/// 20 acquires started in one poll of one task: the first flies alone, the
/// other 19 queue behind it and leave as one call, on every node. The
/// releases batch the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_while_one_is_out_leave_as_one_script_call() {
    let testbed = common::start_recording(3);
    let lock = common::connected(common::lock(&testbed)).await;
    let names: Vec<String> = (0..20).map(|i| format!("batch-{i:02}")).collect();

    let guards = join_all(names.iter().map(|n| lock.try_acquire(n))).await;
    let guards: Vec<_> = guards
        .into_iter()
        .map(|g| g.expect("distinct free names are all won"))
        .collect();
    // Each round decides at 2 of 3 nodes: its call to the third may land
    // later, or never (a queued call whose round was decided is dropped).
    // So a majority of the nodes shows the batch.
    let batched = |node| {
        common::batch_calls(node, "batch-")
            .iter()
            .any(|(_, numkeys, _)| *numkeys / 2 > 1)
    };
    common::wait_for(
        "a batch of acquires on 2 nodes",
        Duration::from_secs(5),
        || testbed.nodes().iter().filter(|n| batched(n)).count() >= 2,
    )
    .await;
    for node in testbed.nodes() {
        let calls = common::batch_calls(node, "batch-");
        let acquired: usize = calls
            .iter()
            .filter(|(_, _, kinds)| kinds.first() == Some(&ScriptCall::Acquire))
            .map(|(_, numkeys, _)| numkeys / 2)
            .sum();
        assert!(acquired <= 20, "{calls:?}");
    }

    let mark: Vec<u64> = testbed.nodes().iter().map(common::log_mark).collect();
    let reports = join_all(guards.into_iter().map(|g| g.release())).await;
    // A quorum is 2 of 3: an acquire that flew alone may have been decided,
    // and its call to the third node given up, before it was written.
    assert!(
        reports
            .iter()
            .all(|r| r.released >= 2 && r.released + r.not_held == 3),
        "{reports:?}"
    );
    for (node, mark) in testbed.nodes().iter().zip(mark) {
        let releases: Vec<usize> = common::batch_calls(node, "batch-")
            .into_iter()
            .filter(|(id, _, _)| *id > mark)
            .map(|(_, numkeys, _)| numkeys)
            .collect();
        assert_eq!(releases.iter().sum::<usize>(), 20, "{releases:?}");
        assert!(
            releases.iter().any(|n| *n > 1),
            "releases batched on {}: {releases:?}",
            node.url()
        );
    }
    for name in &names {
        assert!(common::values(&testbed, name).iter().all(Option::is_none));
    }
}

/// A lock name that holds someone else's list fails with WRONGTYPE; the
/// acquires batched with it are won all the same, and the list is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_costs_only_its_own_operation_in_a_batch() {
    let testbed = common::start_recording(3);
    common::on_every_node(&testbed, &["LPUSH", "mixed-5", "job"]);
    let lock = common::connected(common::lock(&testbed)).await;
    let names: Vec<String> = (0..10).map(|i| format!("mixed-{i}")).collect();

    let results = join_all(names.iter().map(|n| lock.try_acquire(n))).await;
    for (name, result) in names.iter().zip(results) {
        if name == "mixed-5" {
            match result {
                Err(Error::QuorumNotReached { nodes, won: 0, .. }) => assert!(
                    nodes.iter().all(|r| match &r.outcome {
                        NodeOutcome::Failed(e) => e.kind() == NodeErrorKind::WrongType,
                        other => *other == NodeOutcome::NoReplyBeforeDecision,
                    }),
                    "{nodes}"
                ),
                other => panic!("expected WRONGTYPE, got {other:?}"),
            }
        } else {
            result.expect("batched with a bad key, won").release().await;
        }
    }
    let batched = testbed.nodes().iter().any(|n| {
        common::batch_calls(n, "mixed-")
            .iter()
            .any(|(_, k, _)| *k > 2)
    });
    assert!(batched, "the bad key shared a call with others");
    let mut conn = testbed.node(0).connection().expect("connect");
    let len: i64 = redis::cmd("LLEN")
        .arg("mixed-5")
        .query(&mut conn)
        .expect("LLEN");
    assert_eq!(len, 1, "the list is untouched");
}

/// A paused node. Of two acquires made together, the first flies alone and
/// the second queues behind it; once both are decided by the other nodes,
/// the second leaves in a flight of its own, which the paused node holds.
/// So the next acquire's call to it waits in the queue; that attempt is
/// decided by the other nodes and gives the queued call up: it is never
/// sent, while the release queued after it is, once the node resumes. The
/// node ends up carrying nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_given_up_in_the_queue_is_never_sent_but_its_release_is() {
    let mut testbed = common::start_recording(5);
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.node_timeout(Duration::from_millis(200))
            .connect_timeout(Duration::from_secs(10))
    }))
    .await;
    let mark = common::log_mark(testbed.node(4));
    testbed.node_mut(4).pause().expect("pause");

    let (first, held) = tokio::join!(lock.try_acquire("queued-a"), lock.try_acquire("queued-h"));
    let first = first.expect("4 of 5 nodes");
    let held = held.expect("4 of 5 nodes");
    let second = lock.try_acquire("queued-b").await.expect("4 of 5 nodes");
    for guard in [second, held, first] {
        let _ = guard.release().await;
    }
    testbed.node_mut(4).resume().expect("resume");

    for name in ["queued-a", "queued-h", "queued-b"] {
        common::assert_rolled_back(testbed.node(4), name, mark).await;
    }
    let calls = |name: &str| -> Vec<ScriptCall> {
        common::script_calls(testbed.node(4), name)
            .into_iter()
            .filter(|(id, _)| *id > mark)
            .map(|(_, c)| c)
            .collect()
    };
    assert_eq!(
        calls("queued-b"),
        [ScriptCall::Release],
        "the given-up acquire was dropped from the queue"
    );
    assert_eq!(
        calls("queued-h"),
        [ScriptCall::Acquire, ScriptCall::Release]
    );
}
