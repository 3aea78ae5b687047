//! The metrics (feature `metrics`): a recorder installed for this test
//! binary sees exactly the names, labels and values a known sequence of
//! operations must produce, in agreement with `MultiLock::stats`.
//!
//! One test function: the recorder is process-wide.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use quorumlock::{Error, LostReason, Wait};
use quorumlock_testbed::Testbed;

type Snapshot = HashMap<(MetricKind, String, Vec<(String, String)>), DebugValue>;

fn key_of(key: &CompositeKey) -> (MetricKind, String, Vec<(String, String)>) {
    let (kind, key) = (key.kind(), key.key());
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (kind, key.name().to_owned(), labels)
}

fn counter(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match snapshot.get(&(MetricKind::Counter, name.to_owned(), labels)) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name} is not a counter: {other:?}"),
    }
}

fn histogram_len(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> usize {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match snapshot.get(&(MetricKind::Histogram, name.to_owned(), labels)) {
        Some(DebugValue::Histogram(values)) => values.len(),
        None => 0,
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_sequence_records_the_documented_metrics() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");

    let mut testbed = Testbed::start(3).expect("nodes");
    let lock = common::lock_with(&testbed, |b| b.node_timeout(Duration::from_millis(500)));
    let watched = common::lock_with(&testbed, |b| {
        b.watchdog(true).node_timeout(Duration::from_millis(500))
    });

    // 1 acquire won, 1 refused (contended), 1 waiting acquire that gives up.
    let mut guard = lock.try_acquire("m:a").await.expect("free");
    assert!(matches!(
        lock.try_acquire("m:a").await,
        Err(Error::Contended { .. })
    ));
    assert!(matches!(
        lock.acquire("m:a", Wait::up_to(Duration::from_millis(50)))
            .await,
        Err(Error::WaitBudgetExhausted { .. })
    ));
    guard.fencing_token().await.expect("token");
    guard.extend(Duration::from_secs(40)).await.expect("extend");
    guard.release().await;

    // A watched lock, force-released: one loss.
    let held = watched.try_acquire("m:b").await.expect("free");
    watched.force_release("m:b").await.expect("a lock name");
    assert_eq!(held.lost().await.reason, LostReason::ForceReleased);
    drop(held);

    // A node down: its failures are counted under its URL.
    let down = testbed.node(2).url();
    testbed.nodes_mut()[2].kill().expect("kill node 2");
    lock.try_acquire("m:c")
        .await
        .expect("2 of 3")
        .release()
        .await;

    let snapshot: Snapshot = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key_of(&key), value))
        .collect();
    let names: Vec<_> = {
        let mut n: Vec<_> = snapshot.keys().map(|(_, name, _)| name.clone()).collect();
        n.sort();
        n.dedup();
        n
    };

    let attempts = |outcome| {
        counter(
            &snapshot,
            "quorumlock_attempts_total",
            &[("outcome", outcome)],
        )
    };
    // Attempts: m:a won, 1 contended try, >= 1 contended in the wait, m:b
    // won, m:c won.
    assert_eq!(attempts("acquired"), 3, "{names:?}");
    let contended = attempts("contended");
    assert!(contended >= 2, "contended attempts: {contended}");
    let acquires = |outcome| {
        counter(
            &snapshot,
            "quorumlock_acquires_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(acquires("acquired"), 3);
    assert_eq!(acquires("contended"), 1);
    assert_eq!(acquires("wait_budget_exhausted"), 1);
    assert_eq!(
        histogram_len(
            &snapshot,
            "quorumlock_acquire_seconds",
            &[("outcome", "acquired")]
        ),
        3
    );
    assert_eq!(
        histogram_len(&snapshot, "quorumlock_attempt_seconds", &[]) as u64,
        attempts("acquired") + contended
    );
    assert_eq!(histogram_len(&snapshot, "quorumlock_wait_seconds", &[]), 5);
    assert_eq!(
        counter(&snapshot, "quorumlock_fencing_tokens_total", &[]),
        1
    );
    assert_eq!(
        counter(
            &snapshot,
            "quorumlock_extends_total",
            &[("outcome", "extended")]
        ),
        1
    );
    assert_eq!(counter(&snapshot, "quorumlock_releases_total", &[]), 2);
    assert_eq!(
        counter(
            &snapshot,
            "quorumlock_losses_total",
            &[("reason", "force_released")]
        ),
        1
    );
    // Every held lock's hold time: 2 released, 1 lost.
    assert_eq!(histogram_len(&snapshot, "quorumlock_hold_seconds", &[]), 3);
    // The killed node: failures under its URL, none under the others.
    let failures = counter(
        &snapshot,
        "quorumlock_node_errors_total",
        &[("node", &down)],
    ) + counter(
        &snapshot,
        "quorumlock_node_timeouts_total",
        &[("node", &down)],
    );
    assert!(failures >= 1, "no failure recorded for {down}: {names:?}");
    for live in [testbed.node(0).url(), testbed.node(1).url()] {
        assert_eq!(
            counter(
                &snapshot,
                "quorumlock_node_errors_total",
                &[("node", &live)]
            ),
            0
        );
    }
    // The counters agree with the lock's own stats.
    let stats = lock.stats();
    assert_eq!(stats.released, 2);
    assert_eq!(stats.fencing_tokens, 1);
}
