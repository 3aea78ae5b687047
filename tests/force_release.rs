//! An operator's release of a name whatever its owner: the name is free at
//! once, a holder of this lock service is ended at once, and a holder in
//! another lock service (another process) learns it at its next renewal,
//! before its deadline, because no renewal re-takes a force-released key.

mod common;

use std::time::Duration;

use quorumlock::{Error, LostReason, MultiLock, Quorum};
use quorumlock_testbed::Testbed;

const TTL: Duration = Duration::from_secs(1);

/// A lock with the watchdog on and a short TTL, deciding at `quorum`.
fn watched(testbed: &Testbed, quorum: Quorum) -> MultiLock {
    common::lock_with(testbed, |b| {
        b.ttl(TTL)
            .node_timeout(Duration::from_millis(50))
            .watchdog(true)
            .quorum(quorum)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_elsewhere_learns_at_its_next_renewal_and_the_key_stays_gone() {
    let testbed = Testbed::start(3).expect("testbed");
    // On every node: a majority acquire decided at its quorum may still
    // have its call to the third node in flight, land it after the force
    // release, and leave a key there that only its TTL ends.
    let holder = common::connected(watched(&testbed, Quorum::All)).await;
    let operator = common::connected(common::lock(&testbed)).await;
    let guard = holder.try_acquire("nightly").await.expect("free");
    let deadline = guard.deadline();

    let found = operator
        .force_release("nightly")
        .await
        .expect("a lock name");
    assert!(found.iter().all(|r| matches!(r, Ok(true))), "{found:?}");
    let notice = tokio::time::timeout(TTL * 2, guard.lost())
        .await
        .expect("learned within the TTL");
    assert!(
        matches!(notice.reason, LostReason::KeysGone(_)),
        "{}",
        notice.reason
    );
    assert!(notice.at < deadline, "before its deadline");
    // Its renewal found the name gone and did not re-take it.
    for node in testbed.nodes() {
        assert_eq!(common::value_on(node, "nightly"), None);
    }
    let next = operator
        .try_acquire("nightly")
        .await
        .expect("free for anyone");
    next.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_of_the_same_lock_service_ends_at_once() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(watched(&testbed, Quorum::Majority)).await;
    let guard = lock.try_acquire("nightly").await.expect("free");
    lock.force_release("nightly").await.expect("a lock name");
    assert!(!guard.is_held());
    assert_eq!(guard.lost().await.reason, LostReason::ForceReleased);
    let next = lock.try_acquire("nightly").await.expect("free again");
    assert!(next.is_held());
    next.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_is_reported_as_timed_out_and_does_not_hang_the_call() {
    let mut testbed = Testbed::start(3).expect("testbed");
    let operator = common::connected(common::lock_with(&testbed, |b| {
        b.node_timeout(Duration::from_millis(50))
    }))
    .await;
    // The paused node must carry the key.
    let holder = common::every_node_lock(&testbed).await;
    let guard = holder.try_acquire("nightly").await.expect("free");
    testbed.node_mut(2).pause().expect("pause");
    // Bounded by the node timeout; the outer bound only keeps a broken
    // build from hanging the suite.
    let found = tokio::time::timeout(Duration::from_secs(10), operator.force_release("nightly"))
        .await
        .expect("returned although a node is paused")
        .expect("a lock name");
    testbed.node_mut(2).resume().expect("resume");
    drop(guard);
    assert!(
        matches!(found[0], Ok(true)) && matches!(found[1], Ok(true)),
        "{found:?}"
    );
    assert!(
        matches!(&found[2], Err(e) if e.kind() == quorumlock::NodeErrorKind::Timeout),
        "{found:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_name_is_refused_and_nothing_is_deleted() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(watched(&testbed, Quorum::Majority)).await;
    // A vote writes each node's epoch marker.
    lock.try_acquire("warm-up")
        .await
        .expect("free")
        .release()
        .await;
    let markers = |testbed: &Testbed| -> Vec<bool> {
        (0..3)
            .map(|i| {
                let mut conn = testbed.node(i).connection().expect("connect");
                redis::cmd("EXISTS")
                    .arg("quorumlock:epoch")
                    .query::<bool>(&mut conn)
                    .expect("EXISTS")
            })
            .collect()
    };
    assert_eq!(markers(&testbed), [true; 3]);
    for reserved in [
        "quorumlock:epoch",
        "quorumlock:fence:warm-up",
        "quorumlock:forced:x",
    ] {
        match lock.force_release(reserved).await {
            Err(Error::InvalidKey { key, reason }) => {
                assert_eq!(key, reserved);
                assert!(reason.contains("reserved"), "{reason}");
            }
            other => panic!("{reserved}: expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(markers(&testbed), [true; 3], "every epoch marker stays");
    lock.try_acquire("after")
        .await
        .expect("votes at once")
        .release()
        .await;
}
