//! Script cache loss and foreign data under the lock key.

mod common;

use std::time::Duration;

use quorumlock::{Error, NodeErrorKind, NodeOutcome};
use quorumlock_testbed::{Restart, Testbed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_survive_script_flush() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock(&testbed);
    lock.try_acquire("flush")
        .await
        .expect("first acquire")
        .release()
        .await;
    common::on_every_node(&testbed, &["SCRIPT", "FLUSH"]);
    let mut guard = lock
        .try_acquire("flush")
        .await
        .expect("acquire falls back to EVAL");
    common::on_every_node(&testbed, &["SCRIPT", "FLUSH"]);
    guard
        .extend(Duration::from_secs(30))
        .await
        .expect("extend falls back to EVAL");
    common::on_every_node(&testbed, &["SCRIPT", "FLUSH"]);
    let carrying = common::assert_nodes_match(&testbed, &guard);
    assert!(carrying >= 2);
    assert_eq!(
        guard.release().await.released,
        carrying,
        "release falls back to EVAL"
    );
    // Each of acquire and extend decided on 2 of 3 nodes (the third node's
    // fallback is never sent after the decision); release waits for all 3.
    let evals: u64 = testbed
        .nodes()
        .iter()
        .map(|n| common::calls_on(n, "eval"))
        .sum();
    assert!(evals >= 2 + 2 + 3, "EVAL fallbacks: {evals}");
}

/// Every node restarts empty (no persistence, new process): the old
/// connections are dead and the script caches gone. The next acquire
/// reconnects and reloads transparently within one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_survive_a_node_restart() {
    let mut testbed = Testbed::start(3).expect("testbed");
    // About script caches, not data loss: the quarantine of the restarted
    // nodes is off here (tests/quarantine.rs is about it).
    let lock = common::lock_with(&testbed, |b| b.quarantine(Duration::ZERO));
    lock.try_acquire("restart")
        .await
        .expect("first acquire")
        .release()
        .await;
    for node in testbed.nodes_mut() {
        node.restart(Restart::immediate()).expect("restart");
    }
    let guard = lock
        .try_acquire("restart")
        .await
        .expect("reconnects and falls back to EVAL");
    assert_eq!(common::reached(&guard), 3, "every node got the request");
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_type_is_a_typed_error() {
    let testbed = Testbed::start(3).expect("testbed");
    common::on_every_node(&testbed, &["LPUSH", "queue", "job-1"]);
    let lock = common::lock(&testbed);
    match lock.try_acquire("queue").await {
        Err(Error::QuorumNotReached { nodes, won: 0, .. }) => {
            // Decided once two nodes failed; the third may not have answered.
            let wrong_type = nodes
                .errors()
                .filter(|e| e.kind() == NodeErrorKind::WrongType);
            assert!(wrong_type.count() >= 2, "{nodes}");
            let others_undecided = nodes.iter().all(|r| match &r.outcome {
                NodeOutcome::Failed(e) => e.kind() == NodeErrorKind::WrongType,
                other => *other == NodeOutcome::NoReplyBeforeDecision,
            });
            assert!(others_undecided, "{nodes}");
        }
        other => panic!("expected WRONGTYPE failures, got {other:?}"),
    }
    // The list is untouched.
    let mut conn = testbed.node(0).connection().expect("connect");
    let len: i64 = redis::cmd("LLEN")
        .arg("queue")
        .query(&mut conn)
        .expect("LLEN");
    assert_eq!(len, 1);
}

/// A string that is not a lock key in the library's own form (`"<owner>
/// <entry>"`, lowercase hex, `" w"` after it once marked) is someone else's
/// data: refused as a key of another type, never overwritten, never taken
/// for a hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_that_is_not_a_lock_key_is_refused_as_another_type() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::lock(&testbed);
    let foreign = [
        "plain text",
        "ABCDEF0123456789ABCDEF0123456789 0123456789ABCDEF",
        "0123456789abcdef0123456789abcdef 0123456789abcdef x",
    ];
    for (i, value) in foreign.iter().enumerate() {
        let name = format!("foreign:{i}");
        common::on_every_node(&testbed, &["SET", &name, value]);
        match lock.try_acquire(&name).await {
            Err(Error::QuorumNotReached { nodes, won: 0, .. }) => {
                let wrong_type = nodes
                    .errors()
                    .filter(|e| e.kind() == NodeErrorKind::WrongType);
                assert!(wrong_type.count() >= 2, "{value:?}: {nodes}");
            }
            other => panic!("{value:?}: expected WRONGTYPE failures, got {other:?}"),
        }
        for node in testbed.nodes() {
            let mut conn = node.connection().expect("connect");
            let kept: String = redis::cmd("GET").arg(&name).query(&mut conn).expect("GET");
            assert_eq!(kept, *value, "untouched on {}", node.url());
        }
    }
}
