//! Acquire + release latency of quorumlock against a raw floor, on 5 local
//! redis-server nodes started by the bench itself, measured in the same run.
//!
//! The floor is the least any Redlock client must do: `SET key token NX PX`
//! sent concurrently to all 5 nodes (waiting for every reply), then a
//! concurrent Lua compare-and-delete (`EVALSHA`) on all 5, over the same
//! redis-rs multiplexed connections quorumlock uses.
//!
//! Criterion reports each on its own. The headline ratio comes from a paired
//! run afterwards: floor and quorumlock interleaved round by round (the
//! order alternating), so that load drifting on a shared machine hits both
//! alike. Criterion measures one after the other, and on a noisy VM its two
//! medians can drift apart by ±15 % between windows. Target: quorumlock's
//! median ≤ 1.15× the floor's.
//!
//! Run: `cargo bench --bench acquire_release`

use std::time::Duration;

use criterion::Criterion;
use futures::future::join_all;
use quorumlock::{LockConfig, MultiLock};
use quorumlock_testbed::Testbed;
use redis::Value;
use redis::aio::MultiplexedConnection;

const GROUP: &str = "acquire_release_5_nodes";
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

async fn floor(conns: &[MultiplexedConnection], cad_sha: &str) {
    let set = join_all(conns.iter().map(|c| {
        let mut c = c.clone();
        async move {
            redis::cmd("SET")
                .arg("floor")
                .arg("floor-token")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async::<Value>(&mut c)
                .await
        }
    }))
    .await;
    debug_assert!(set.iter().all(|r| matches!(r, Ok(Value::Okay))));
    let del = join_all(conns.iter().map(|c| {
        let mut c = c.clone();
        async move {
            redis::cmd("EVALSHA")
                .arg(cad_sha)
                .arg(1)
                .arg("floor")
                .arg("floor-token")
                .query_async::<i64>(&mut c)
                .await
        }
    }))
    .await;
    debug_assert!(del.iter().all(|r| matches!(r, Ok(1))));
}

fn main() {
    let testbed = Testbed::start(5).expect("start 5 redis-server nodes");
    // A bench judges its own figures, not what its nodes keep.
    testbed.skip_leftover_check();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let lock = runtime.block_on(async {
        let lock = MultiLock::new(
            LockConfig::builder()
                .nodes(testbed.urls())
                .build()
                .expect("config"),
        );
        for r in lock.warm_up().await {
            r.expect("connect");
        }
        lock
    });
    let (conns, cad_sha) = runtime.block_on(async {
        let mut conns = Vec::new();
        let mut sha = String::new();
        for url in testbed.urls() {
            let client = redis::Client::open(url).expect("url");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(COMPARE_AND_DELETE)
                .query_async(&mut conn)
                .await
                .expect("SCRIPT LOAD");
            conns.push(conn);
        }
        (conns, sha)
    });

    let mut criterion = Criterion::default()
        .sample_size(200)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group(GROUP);
        group.bench_function("floor", |b| {
            b.to_async(&runtime).iter(|| floor(&conns, &cad_sha));
        });
        group.bench_function("quorumlock", |b| {
            b.to_async(&runtime).iter(|| async {
                let guard = lock
                    .try_acquire("bench")
                    .await
                    .expect("uncontended acquire");
                let report = guard.release().await;
                debug_assert!(report.was_held);
            });
        });
        group.finish();
    }
    criterion.final_summary();
    print_ratio();
    paired(&runtime, &lock, &conns, &cad_sha);
}

/// Floor and quorumlock interleaved, one of each per round, alternating
/// which goes first; prints both medians, p99s and the ratio of medians.
fn paired(
    runtime: &tokio::runtime::Runtime,
    lock: &MultiLock,
    conns: &[MultiplexedConnection],
    cad_sha: &str,
) {
    const ROUNDS: usize = 20_000;
    let (mut floor_ns, mut ours_ns) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    runtime.block_on(async {
        for round in 0..ROUNDS {
            for which in [round % 2, 1 - round % 2] {
                let started = std::time::Instant::now();
                if which == 0 {
                    floor(conns, cad_sha).await;
                    floor_ns.push(started.elapsed().as_nanos() as u64);
                } else {
                    let guard = lock
                        .try_acquire("bench")
                        .await
                        .expect("uncontended acquire");
                    guard.release().await;
                    ours_ns.push(started.elapsed().as_nanos() as u64);
                }
            }
        }
    });
    let pick = |v: &mut Vec<u64>, q: f64| {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize] as f64 / 1e3
    };
    let (floor_p50, ours_p50) = (pick(&mut floor_ns, 0.5), pick(&mut ours_ns, 0.5));
    let (floor_p99, ours_p99) = (pick(&mut floor_ns, 0.99), pick(&mut ours_ns, 0.99));
    println!(
        "paired, {ROUNDS} interleaved rounds: median quorumlock {ours_p50:.1} µs, floor {floor_p50:.1} µs, \
         ratio {:.3} (target <= 1.15); p99 {ours_p99:.1} µs vs {floor_p99:.1} µs",
        ours_p50 / floor_p50
    );
}

/// Reads both medians from criterion's estimates and prints their ratio.
fn print_ratio() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(|target| target.join("criterion").join(GROUP))
        .expect("target dir");
    let median = |name: &str| -> Option<f64> {
        let text =
            std::fs::read_to_string(dir.join(name).join("new").join("estimates.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["median"]["point_estimate"].as_f64()
    };
    match (median("floor"), median("quorumlock")) {
        (Some(floor), Some(ours)) => println!(
            "\ncriterion medians (separate windows): quorumlock {:.1} µs, floor {:.1} µs, ratio {:.3}",
            ours / 1e3,
            floor / 1e3,
            ours / floor
        ),
        _ => println!("\n(ratio not printed: run both benchmarks to compare medians)"),
    }
}
