//! The blocking API's latency against the async one: try_acquire + release
//! on 5 local redis-server nodes, both on one lock configuration, measured
//! in the same run and interleaved round by round (the order alternating),
//! so load drifting on a shared machine hits both alike.
//!
//! The blocking call hands its work to its runtime thread and waits, so it
//! pays two thread hand-offs per call; this bench shows what they cost.
//!
//! Run: `cargo bench --bench blocking --features blocking`

use std::time::{Duration, Instant};

use quorumlock::{LockConfig, MultiLock};
use quorumlock_testbed::Testbed;

const ROUNDS: usize = 4_000;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testbed = Testbed::start(5)?;
    // A bench judges its own figures, not what its nodes keep.
    testbed.skip_leftover_check();
    let config = || {
        LockConfig::builder()
            .nodes(testbed.urls())
            .ttl(Duration::from_secs(10))
            .build()
    };
    let blocking = quorumlock::blocking::MultiLock::new(config()?)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let lock = runtime.block_on(async { MultiLock::new(config().expect("valid")) });
    runtime.block_on(lock.warm_up());
    blocking.warm_up();

    let async_once = || {
        runtime.block_on(async {
            let began = Instant::now();
            lock.try_acquire("bench:async")
                .await
                .expect("free")
                .release()
                .await;
            began.elapsed()
        })
    };
    let blocking_once = || {
        let began = Instant::now();
        blocking
            .try_acquire("bench:blocking")
            .expect("free")
            .release();
        began.elapsed()
    };
    for _ in 0..200 {
        async_once();
        blocking_once();
    }
    let (mut a, mut b) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            a.push(async_once());
            b.push(blocking_once());
        } else {
            b.push(blocking_once());
            a.push(async_once());
        }
    }
    let (ma, mb) = (median(&mut a), median(&mut b));
    println!("try_acquire + release, 5 nodes, {ROUNDS} interleaved rounds");
    println!(
        "  async    p50 {:>8.1?}  p99 {:>8.1?}",
        ma,
        percentile(&a, 0.99)
    );
    println!(
        "  blocking p50 {:>8.1?}  p99 {:>8.1?}",
        mb,
        percentile(&b, 0.99)
    );
    println!(
        "  blocking / async (p50): {:.3}",
        mb.as_secs_f64() / ma.as_secs_f64()
    );
    Ok(())
}
