//! Group commit: acquires and releases that queue for a node while another
//! call to it is under way go out together, in one script call, and each
//! gets its own answer. A paused node holds the first call, so the others
//! queue behind it for certain.

mod common;

use std::time::Duration;

use quorumlock::{Error, MultiLock, Quorum};
use quorumlock_testbed::Testbed;

const TASKS: usize = 20;

fn name(i: usize) -> String {
    format!("batched-{i}")
}

/// A connected lock that needs every node, with a node timeout far longer (3 s)
/// than any pause here.
async fn patient_every_node_lock(testbed: &Testbed) -> MultiLock {
    common::connected(common::lock_with(testbed, |b| {
        b.quorum(Quorum::All).node_timeout(Duration::from_secs(3))
    }))
    .await
}

/// Starts `TASKS` acquires of distinct names while node 0 is paused, and
/// resumes it once every acquire has reached the other nodes (so each has
/// offered its call to node 0: the first was sent, the rest queue).
async fn acquire_all_behind_a_paused_node(
    testbed: &mut Testbed,
    lock: &MultiLock,
) -> Vec<Result<quorumlock::LockGuard, Error>> {
    testbed.node_mut(0).pause().expect("pause node 0");
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.try_acquire(&name(i)).await })
        })
        .collect();
    common::wait_for(
        "every acquire to reach nodes 1 and 2",
        Duration::from_secs(5),
        || {
            (0..TASKS)
                .all(|i| (1..3).all(|n| common::value_on(testbed.node(n), &name(i)).is_some()))
        },
    )
    .await;
    testbed.node_mut(0).resume().expect("resume node 0");
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("acquire task"));
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_behind_a_slow_one_go_out_as_one_batch_and_each_gets_its_answer() {
    let mut testbed = Testbed::start(3).expect("testbed");
    let lock = patient_every_node_lock(&testbed).await;

    let results = acquire_all_behind_a_paused_node(&mut testbed, &lock).await;
    let guards: Vec<_> = results
        .into_iter()
        .map(|r| r.expect("every acquire wins on every node"))
        .collect();
    let node0 = &lock.stats().nodes[0];
    assert_eq!(
        (node0.batches, node0.batched),
        (1, TASKS as u64 - 1),
        "one call went out alone, the rest in one batch: {node0:?}"
    );
    for i in 0..TASKS {
        for n in 0..3 {
            assert_eq!(common::holds_on(testbed.node(n), &name(i)), 1, "{i} on {n}");
        }
    }

    // The releases too, whether batched or not, each free their own name.
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    for release in releases {
        release.await.expect("release task");
    }
    for i in 0..TASKS {
        assert_eq!(common::values(&testbed, &name(i)), vec![None, None, None]);
    }
    assert!(lock.stats().nodes.iter().all(|n| n.errors == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_fails_in_a_batch_fails_alone() {
    let mut testbed = Testbed::start(3).expect("testbed");
    let lock = patient_every_node_lock(&testbed).await;
    // Someone else's data under one name, on node 0 only.
    let spoiled = TASKS - 1;
    common::set_on(testbed.node(0), &name(spoiled), "not a lock");

    let results = acquire_all_behind_a_paused_node(&mut testbed, &lock).await;
    let node0 = &lock.stats().nodes[0];
    assert_eq!(node0.batched, TASKS as u64 - 1, "{node0:?}");
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(guard) => {
                assert_ne!(i, spoiled, "won over a string key");
                guard.release().await;
            }
            Err(e) => {
                assert_eq!(i, spoiled, "only the spoiled name fails: {e}");
                assert!(e.to_string().contains("WRONGTYPE"), "{e}");
            }
        }
    }
    assert_eq!(
        common::value_on(testbed.node(1), &name(spoiled)),
        None,
        "the failed acquire was rolled back"
    );
    // The acquire and its rollback each met the string there.
    assert_eq!(lock.stats().nodes[0].errors, 2);
}

/// The largest guard (1,024 names, 4,096 keys in its call) goes through a
/// batch like any other: queued with another call behind a paused node,
/// both go out in one batch and both win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_set_goes_out_in_a_batch() {
    let mut testbed = Testbed::start(3).expect("testbed");
    let lock = patient_every_node_lock(&testbed).await;
    let names: Vec<String> = (0..1024).map(|i| format!("sku:{i}")).collect();

    testbed.node_mut(0).pause().expect("pause node 0");
    // One call at a time, each seen on nodes 1 and 2 (so it has offered its
    // call to node 0) before the next: the first takes node 0's turn, the
    // other two queue behind it.
    let mut tasks = Vec::new();
    for (i, set) in [vec![name(0)], names.clone(), vec![name(1)]]
        .into_iter()
        .enumerate()
    {
        let probe = set[set.len() - 1].clone();
        let task_lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            task_lock.try_acquire_all(&set).await
        }));
        common::wait_for(
            &format!("acquire {i} to reach nodes 1 and 2"),
            Duration::from_secs(5),
            || (1..3).all(|n| common::value_on(testbed.node(n), &probe).is_some()),
        )
        .await;
    }
    testbed.node_mut(0).resume().expect("resume node 0");
    let mut guards = Vec::new();
    for task in tasks {
        guards.push(
            task.await
                .expect("acquire task")
                .expect("wins on every node"),
        );
    }
    let node0 = &lock.stats().nodes[0];
    assert_eq!((node0.batches, node0.batched), (1, 2), "{node0:?}");
    assert_eq!(common::holds_on(testbed.node(0), &names[1023]), 1);
    for guard in guards {
        assert!(guard.release().await.was_held);
    }
    assert_eq!(common::values(&testbed, &names[0]), vec![None, None, None]);
}
