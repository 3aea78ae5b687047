//! The command's overhead over a bare acquire: `quorumlock run x -- true`
//! against `true` alone and against one in-process try_acquire + release,
//! on 5 local redis-server nodes, interleaved round by round.
//!
//! Run: `cargo bench -p quorumlock-cli --bench overhead`. With
//! `QUORUMLOCK_BASELINE_BIN=/path/to/an/older/quorumlock`, that binary runs
//! in the same rounds too, for an A/B figure on one machine.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorumlock::{LockConfig, MultiLock};
use quorumlock_testbed::Testbed;

const ROUNDS: usize = 200;

fn timed(cmd: &mut Command) -> Duration {
    let began = Instant::now();
    let status = cmd.status().expect("spawn");
    assert!(status.success(), "{status}");
    began.elapsed()
}

fn summary(name: &str, samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    let p50 = samples[samples.len() / 2];
    let p90 = samples[samples.len() * 9 / 10];
    println!("  {name:<32} p50 {p50:>9.2?}  p90 {p90:>9.2?}");
    p50
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testbed = Testbed::start(5)?;
    // A bench judges its own figures, not what its nodes keep.
    testbed.skip_leftover_check();
    let nodes = testbed.urls().join(",");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let lock = runtime.block_on(async {
        MultiLock::new(
            LockConfig::builder()
                .nodes(testbed.urls())
                .build()
                .expect("valid"),
        )
    });
    runtime.block_on(lock.warm_up());
    let baseline = std::env::var_os("QUORUMLOCK_BASELINE_BIN");
    let quorumlock = |bin: &std::ffi::OsStr| {
        let mut cmd = Command::new(bin);
        cmd.env("QUORUMLOCK_NODES", &nodes)
            .args(["run", "bench", "--", "true"])
            .stdout(Stdio::null());
        cmd
    };
    let this = std::ffi::OsStr::new(env!("CARGO_BIN_EXE_quorumlock"));
    let (mut run, mut alone, mut inproc) = (Vec::new(), Vec::new(), Vec::new());
    let mut base = Vec::new();
    for round in 0..ROUNDS + 10 {
        let r = timed(&mut quorumlock(this));
        let b = baseline.as_deref().map(|bin| timed(&mut quorumlock(bin)));
        let a = timed(&mut Command::new("true"));
        let i = runtime.block_on(async {
            let began = Instant::now();
            lock.try_acquire("bench:inproc")
                .await
                .expect("free")
                .release()
                .await;
            began.elapsed()
        });
        if round >= 10 {
            base.extend(b);
            run.push(r);
            alone.push(a);
            inproc.push(i);
        }
    }
    println!("{ROUNDS} interleaved rounds, 5 nodes");
    let run = summary("quorumlock run bench -- true", &mut run);
    let alone = summary("true", &mut alone);
    let inproc = summary("in-process try_acquire + release", &mut inproc);
    if !base.is_empty() {
        summary("the baseline binary, same command", &mut base);
    }
    println!(
        "  overhead of the command over `true`: {:.2?} (of which {:.2?} is the acquire and release itself)",
        run.saturating_sub(alone),
        inproc
    );
    Ok(())
}
