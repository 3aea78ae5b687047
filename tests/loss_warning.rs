//! A lost lock is reported as a `tracing` warn event that names each node
//! and what went wrong (its own test binary: it installs a global
//! subscriber, and the watchdog logs from its own task).

mod common;

use std::time::Duration;

use common::captured::Captured;
use quorumlock_testbed::Testbed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_is_a_warn_event_naming_the_failed_nodes() {
    let captured = Captured::install(tracing::Level::WARN);

    let ttl = Duration::from_secs(1);
    let mut testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10).watchdog(true)
    }))
    .await;
    let guard = lock.try_acquire("job").await.expect("free");
    for i in 0..2 {
        testbed.node_mut(i).kill().expect("kill");
    }
    let notice = tokio::time::timeout(ttl * 4, guard.lost())
        .await
        .expect("lost within a few renewal intervals");
    assert!(notice.at < notice.deadline);

    // The event comes from whichever task declared the loss: wait for it.
    common::wait_for("the loss event", Duration::from_secs(5), || {
        captured.text().contains("lock lost")
    })
    .await;
    let log = captured.text();
    let line = log
        .lines()
        .find(|l| l.contains("lock lost"))
        .unwrap_or_else(|| panic!("no loss event in: {log}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("job"), "{line}");
    for i in 0..2 {
        let url = testbed.node(i).url();
        assert!(line.contains(&url), "{url} not named: {line}");
    }
    assert!(line.contains("unreachable"), "{line}");
    guard.release().await;
}
