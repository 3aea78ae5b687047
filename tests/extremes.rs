//! Every duration a caller can pass, from zero to `Duration::MAX`, in every
//! setting and as a wait budget: the builder answers with a typed error or
//! a config, and a lock built from it acquires, waits and releases on real
//! nodes without a panic and within a bound. (Generated with proptest; the
//! cases run against one testbed started for the whole test.)

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use quorumlock::{Error, LockConfig, MultiLock, RetryPolicy, Wait};
use quorumlock_testbed::Testbed;

/// Any duration, with the edges and the everyday range well represented.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::MAX),
        (0u64..5_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

#[derive(Clone, Debug)]
struct Settings {
    ttl: Option<Duration>,
    node_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    min_validity: Option<Duration>,
    renew_interval: Option<Duration>,
    loss_margin: Option<Duration>,
    max_hold: Option<Duration>,
    quarantine: Option<Duration>,
    retry: (Duration, Duration, f64),
    watchdog: bool,
    wait: Duration,
}

fn settings() -> impl Strategy<Value = Settings> {
    let some = || proptest::option::of(any_duration());
    (
        (some(), some(), some(), some()),
        (some(), some(), some(), some()),
        (any_duration(), any_duration(), 0.0f64..=1.0),
        any::<bool>(),
        // Waits on a held name: short enough to be waited out here.
        (0u64..200).prop_map(Duration::from_millis),
    )
        .prop_map(
            |(
                (ttl, node_timeout, connect_timeout, min_validity),
                (renew_interval, loss_margin, max_hold, quarantine),
                retry,
                watchdog,
                wait,
            )| Settings {
                ttl,
                node_timeout,
                connect_timeout,
                min_validity,
                renew_interval,
                loss_margin,
                max_hold,
                quarantine,
                retry,
                watchdog,
                wait,
            },
        )
}

fn build(testbed: &Testbed, s: &Settings) -> Result<LockConfig, quorumlock::ConfigError> {
    let (base, max, jitter) = s.retry;
    let mut b = LockConfig::builder()
        .nodes(testbed.urls())
        .watchdog(s.watchdog)
        .retry(
            RetryPolicy::default()
                .with_base_delay(base)
                .with_max_delay(max)
                .with_jitter(jitter),
        );
    let set =
        |b: LockConfigBuilderAlias,
         v: Option<Duration>,
         f: fn(LockConfigBuilderAlias, Duration) -> LockConfigBuilderAlias| match v {
            Some(v) => f(b, v),
            None => b,
        };
    b = set(b, s.ttl, |b, v| b.ttl(v));
    b = set(b, s.node_timeout, |b, v| b.node_timeout(v));
    b = set(b, s.connect_timeout, |b, v| b.connect_timeout(v));
    b = set(b, s.min_validity, |b, v| b.min_validity(v));
    b = set(b, s.renew_interval, |b, v| b.renew_interval(v));
    b = set(b, s.loss_margin, |b, v| b.loss_margin(v));
    b = set(b, s.max_hold, |b, v| b.max_hold(v));
    b = set(b, s.quarantine, |b, v| b.quarantine(v));
    b.build()
}

type LockConfigBuilderAlias = quorumlock::LockConfigBuilder;

/// Longest any one step may take: every node is up and local, so only a
/// hang (or a wait past its budget) comes near it.
const BOUND: Duration = Duration::from_secs(10);

async fn exercise(testbed: &Testbed, s: &Settings) -> Result<(), TestCaseError> {
    let config = match build(testbed, s) {
        Ok(config) => config,
        Err(error) => {
            // Typed, and it says what it refused.
            prop_assert!(!error.to_string().is_empty());
            return Ok(());
        }
    };
    let lock = MultiLock::new(config);
    let bounded = |what: &'static str| move |_| TestCaseError::fail(format!("{what} hung"));

    // An unbounded budget on a free name: it may win at once, or keep
    // trying for as long as it was told (a connect timeout of a
    // nanosecond never connects); it must not panic. A while is enough to
    // see it start; then it is dropped.
    let free = tokio::time::timeout(
        Duration::from_millis(300),
        lock.acquire("free", Wait::up_to(Duration::MAX)),
    )
    .await;
    if let Ok(Ok(guard)) = free {
        tokio::time::timeout(BOUND, guard.release())
            .await
            .map_err(bounded("release"))?;
    }

    // A name held by another lock service: the wait ends by its budget.
    let holder = MultiLock::new(
        LockConfig::builder()
            .nodes(testbed.urls())
            .ttl(Duration::from_secs(30))
            .build()
            .expect("valid"),
    );
    let held = holder.try_acquire("held").await;
    let waited = tokio::time::timeout(BOUND, lock.acquire("held", Wait::up_to(s.wait)))
        .await
        .map_err(bounded("a bounded wait on a held name"))?;
    if let Ok(guard) = held {
        prop_assert!(waited.is_err(), "the name was held: {waited:?}");
        guard.release().await;
    }
    if let Err(error) = waited {
        prop_assert!(!error.to_string().is_empty());
        prop_assert!(!matches!(error, Error::Config(_)), "{error}");
    }
    Ok(())
}

#[test]
fn any_duration_is_a_typed_error_or_works_within_a_bound() {
    let testbed = Testbed::start(3).expect("testbed");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&settings(), |s| runtime.block_on(exercise(&testbed, &s)));
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
