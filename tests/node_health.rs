//! Node health in the logs: a node that stops counting toward the quorum
//! is one `warn` event, however many calls meet it meanwhile, and its
//! return is one `info` event (its own test binary: it installs a global
//! subscriber, and the watchdog logs from its own task).

mod common;

use std::time::Duration;

use common::captured::Captured;
use quorumlock_testbed::Testbed;

/// The health lines about `node` (its URL exactly) at `level`.
fn lines(captured: &Captured, level: &str, node: &str) -> Vec<String> {
    let node = format!("node=\"{node}\"");
    captured
        .text()
        .lines()
        .filter(|l| l.contains(level) && l.contains(&node) && l.contains("toward the quorum"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_one_warn_and_its_return_one_info() {
    let captured = Captured::install(tracing::Level::INFO);

    let ttl = Duration::from_secs(1);
    let mut testbed = Testbed::start(3).expect("testbed");
    // No quarantine: the restarted node counts at its first vote, so the
    // outage is the one change to "not counting".
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl)
            .node_timeout(ttl / 10)
            .watchdog(true)
            .quarantine(Duration::ZERO)
    }))
    .await;
    let guard = lock.try_acquire("job").await.expect("free");
    let down = testbed.node(2).url();
    testbed.node_mut(2).kill().expect("kill");

    common::wait_for(
        "the warn for the killed node",
        Duration::from_secs(5),
        || !lines(&captured, "WARN", &down).is_empty(),
    )
    .await;
    // Many calls during the outage: no second warn.
    for i in 0..20 {
        let other = lock
            .try_acquire(&format!("other:{i}"))
            .await
            .expect("2 of 3");
        other.release().await;
    }
    let warns = lines(&captured, "WARN", &down);
    assert_eq!(warns.len(), 1, "{warns:#?}");
    assert!(warns[0].contains("unreachable"), "{}", warns[0]);

    testbed.node_mut(2).start().expect("restart");
    common::wait_for(
        "the info for the returned node",
        Duration::from_secs(10),
        || !lines(&captured, "INFO", &down).is_empty(),
    )
    .await;
    let (warns, infos) = (
        lines(&captured, "WARN", &down),
        lines(&captured, "INFO", &down),
    );
    for line in warns.iter().chain(&infos) {
        println!("{line}");
    }
    assert_eq!((warns.len(), infos.len()), (1, 1), "{warns:#?} {infos:#?}");
    for live in [testbed.node(0).url(), testbed.node(1).url()] {
        assert!(lines(&captured, "WARN", &live).is_empty(), "{live}");
    }
    assert!(guard.is_held());
    guard.release().await;
}
