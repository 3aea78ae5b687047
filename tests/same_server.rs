//! One server casts one vote, however many URLs reach it: two databases of
//! one server (`/0`, `/1`), and spellings of one address (`127.0.0.1`,
//! `127.1`, `localhost`). URL comparison at build time catches none of
//! these; the servers' `run_id`s do.

use std::time::Duration;

use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind, NodeOutcome};
use quorumlock_testbed::Testbed;

/// A lock over `urls`, quarantine off: the test is about double votes, not
/// about young databases (a second database of a server has no epoch
/// marker yet, and quarantine alone would hide the double vote for a TTL).
fn lock_over(urls: Vec<String>) -> MultiLock {
    MultiLock::new(
        LockConfig::builder()
            .nodes(urls)
            .ttl(Duration::from_secs(30))
            .node_timeout(Duration::from_secs(1))
            .quarantine(Duration::ZERO)
            .build()
            .expect("distinct spellings pass the build-time check"),
    )
}

/// Node URLs refused as the same server, from an error's reports.
fn same_server_nodes(error: &Error) -> Vec<String> {
    error
        .node_reports()
        .expect("reports")
        .iter()
        .filter(|r| {
            matches!(&r.outcome, NodeOutcome::Failed(e) if e.kind() == NodeErrorKind::SameServer)
        })
        .map(|r| r.node.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_databases_of_one_server_are_one_vote() {
    let testbed = Testbed::start(1).expect("testbed");
    let port = testbed.node(0).port();
    // Majority of 3 is 2: with the dead third node, only a double vote
    // from the one live server could win.
    let lock = lock_over(vec![
        format!("redis://127.0.0.1:{port}/0"),
        format!("redis://127.0.0.1:{port}/1"),
        "redis://127.0.0.1:1".to_string(),
    ]);
    let error = lock
        .try_acquire("payment")
        .await
        .expect_err("one server is not a majority of three");
    // At most the one server's vote (the refusals are known at once, so
    // the round may be decided before it answers).
    assert!(
        matches!(error, Error::QuorumNotReached { won: 0 | 1, .. }),
        "{error}"
    );
    // Whichever database connected first votes for the server.
    let refused = same_server_nodes(&error);
    let databases = [
        format!("redis://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}/1"),
    ];
    assert!(
        refused.len() == 1 && databases.contains(&refused[0]),
        "{error}"
    );
    let shown = error.to_string();
    assert!(shown.contains("same server"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_of_one_address_are_one_vote() {
    let testbed = Testbed::start(1).expect("testbed");
    let port = testbed.node(0).port();
    let lock = lock_over(vec![
        format!("redis://127.0.0.1:{port}"),
        format!("redis://127.1:{port}"),
        format!("redis://localhost:{port}"),
    ]);
    // Connected first: each connection has named its server.
    for connected in lock.warm_up().await {
        connected.expect("every spelling reaches the server");
    }
    let error = lock
        .try_acquire("payment")
        .await
        .expect_err("one server is not a majority of three");
    // At most the one server's vote (the refusals are known at once, so
    // the round may be decided before it answers).
    assert!(
        matches!(error, Error::QuorumNotReached { won: 0 | 1, .. }),
        "{error}"
    );
    assert!(!same_server_nodes(&error).is_empty(), "{error}");

    // The same three with the server counted once: Quorum::AtLeast(1).
    let one = MultiLock::new(
        LockConfig::builder()
            .nodes([
                format!("redis://127.0.0.1:{port}"),
                format!("redis://127.1:{port}"),
            ])
            .quorum(quorumlock::Quorum::AtLeast(1))
            .quarantine(Duration::ZERO)
            .build()
            .expect("valid"),
    );
    let guard = one
        .try_acquire("payment")
        .await
        .expect("one vote is enough");
    assert_eq!(guard.held_nodes().count(), 1, "one server, one hold");
    guard.release().await;
}
