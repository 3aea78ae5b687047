//! The least an ACL user needs: DEPLOYING.md's ACL line, given to a user on
//! real servers, runs every path (acquire, wait and wake-up, handoff,
//! re-entry, several names, extend, watchdog renewal, fencing, release)
//! with no error on any node; each line of it is needed.

use std::time::Duration;

use quorumlock::{LockConfig, MultiLock, Wait};
use quorumlock_testbed::{NodeOptions, Testbed};

/// DEPLOYING.md's ACL line, with lock names under `app:` (the library's own
/// keys and channels are under `quorumlock:`).
const ACL: &str = "quorumlock on >acl-test-password resetkeys ~app:* ~quorumlock:* \
                   resetchannels &quorumlock:released:* -@all \
                   +eval +evalsha +script|load +info +ping \
                   +subscribe +unsubscribe \
                   +get +set +del +exists +hget +hmget +hset +hdel +hlen \
                   +pexpire +pttl +time +publish +zadd +zrange +zrem";

fn testbed(acl: &str) -> Testbed {
    Testbed::start_with(
        3,
        NodeOptions {
            extra_config: vec![("user".into(), acl.into())],
            ..NodeOptions::default()
        },
    )
    .expect("testbed")
}

fn lock(testbed: &Testbed, ttl: Duration) -> MultiLock {
    let urls = testbed.nodes().iter().map(|n| {
        format!(
            "redis://quorumlock:acl-test-password@127.0.0.1:{}",
            n.port()
        )
    });
    MultiLock::new(
        LockConfig::builder()
            .nodes(urls)
            .ttl(ttl)
            .node_timeout(Duration::from_millis(100))
            .watchdog(true)
            // Fair: the waiter below queues (any waiter does) and its place
            // refuses, so the queue's commands run too.
            .fair(true)
            .build()
            .expect("valid"),
    )
}

/// Every path once: how many of its steps succeeded (of [`STEPS`]), and
/// the node errors the lock counted.
async fn every_path(testbed: &Testbed) -> (usize, u64) {
    let lock = lock(testbed, Duration::from_secs(1));
    let other = lock.clone();
    let mut done = 0;
    if let Ok(guard) = lock
        .acquire("app:ledger", Wait::up_to(Duration::from_secs(1)))
        .await
    {
        done += 1;
        // A waiter of the same service: woken by the release, handed over.
        let waiter = tokio::spawn(async move {
            other
                .acquire("app:ledger", Wait::up_to(Duration::from_secs(5)))
                .await
        });
        if let Ok(inner) = guard.reenter().await {
            done += 1;
            inner.release().await;
        }
        done += usize::from(guard.fencing_token().await.is_ok());
        // Outlast the TTL: the watchdog renews.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        done += usize::from(guard.is_held() && guard.last_renewal().is_some());
        done += usize::from(guard.release().await.was_held);
        if let Ok(Ok(next)) = waiter.await {
            done += 1;
            next.release().await;
        }
    }
    if let Ok(mut set) = lock.try_acquire_all(&["app:a", "app:b"]).await {
        done += usize::from(set.extend(Duration::from_secs(2)).await.is_ok());
        done += usize::from(set.release().await.was_held);
    }
    (done, lock.stats().nodes.iter().map(|n| n.errors).sum())
}

/// Acquire, re-entry, token, renewal, release, the waiter's turn, extend
/// and release of a set.
const STEPS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_line_is_enough() {
    let testbed = testbed(ACL);
    let (done, errors) = every_path(&testbed).await;
    assert_eq!((done, errors), (STEPS, 0), "steps done, node errors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permission_of_the_line_is_needed() {
    // Dropping one script-side permission at a time: something fails.
    let needed_all = [
        "+publish", "+pexpire", "+hset", "+set", "+time", "+evalsha", "+zadd", "+zrange", "+zrem",
    ];
    for needed in needed_all {
        let testbed = testbed(&ACL.replace(needed, ""));
        let (done, errors) = every_path(&testbed).await;
        assert!(done < STEPS || errors > 0, "{needed} looks unneeded");
    }
}
