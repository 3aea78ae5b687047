//! Node health in the logs: a node that stops counting toward the quorum
//! is one `warn` event, however many calls meet it meanwhile, and its
//! return is one `info` event (its own test binary: it installs a global
//! subscriber, and the watchdog logs from its own task).

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quorumlock_testbed::Testbed;

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The health lines that name `node`, at `level`.
    fn lines(&self, level: &str, node: &str) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains(level) && l.contains(node) && l.contains("toward the quorum"))
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_one_warn_and_its_return_one_info() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

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
        || !captured.lines("WARN", &down).is_empty(),
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
    let warns = captured.lines("WARN", &down);
    assert_eq!(warns.len(), 1, "{warns:#?}");
    assert!(warns[0].contains("unreachable"), "{}", warns[0]);

    testbed.node_mut(2).start().expect("restart");
    common::wait_for(
        "the info for the returned node",
        Duration::from_secs(10),
        || !captured.lines("INFO", &down).is_empty(),
    )
    .await;
    let (warns, infos) = (captured.lines("WARN", &down), captured.lines("INFO", &down));
    for line in warns.iter().chain(&infos) {
        println!("{line}");
    }
    assert_eq!((warns.len(), infos.len()), (1, 1), "{warns:#?} {infos:#?}");
    for live in [testbed.node(0).url(), testbed.node(1).url()] {
        assert!(captured.lines("WARN", &live).is_empty(), "{live}");
    }
    assert!(guard.is_held());
    guard.release().await;
}
