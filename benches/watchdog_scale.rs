//! The watchdog at scale: 10,000 locks held with the watchdog on (TTL 10 s,
//! renew interval TTL/3, coalescing window interval/10) on 5 local
//! redis-server nodes started by the bench itself, for a 60 s window.
//!
//! Measured over the window, for the client (this process; the servers are
//! separate processes):
//!
//! * **CPU** as a share of one core: process CPU time (user + system, all
//!   threads, `CLOCK_PROCESS_CPUTIME_ID`) over wall time. The split between
//!   user and system time comes from `/proc/self/stat`.
//! * **Resident memory per held guard**: the growth of `VmRSS` from just
//!   before the 10,000 acquires to when they are all held (after a short
//!   settle), and again at the end of the window (after ~18 renewal rounds
//!   per guard), divided by 10,000. It includes everything the guards cost:
//!   the guards and their shared lease state, the watchdog's schedule, and
//!   whatever the allocator and the connections keep for them. A warm-up
//!   (256 locks acquired and released, then one TTL for the watchdog to drop
//!   them) runs first, so that runtime, connections and scripts are already
//!   set up and not counted.
//! * **Renewal round trips per node per second**: the renew script calls
//!   the watchdog sent to each node, against the round trips a per-lock
//!   renewal would need (renewals per second).
//! * **Renewals in time**: renewal rounds that reached the quorum before the
//!   guard's loss margin, over all renewal rounds of the window; plus
//!   losses, and whether every guard still holds at the end.
//!
//! The window starts and ends at a moment when no renewal is in flight, so
//! every renewal counted has its verdict counted too. The client runs on a
//! multi-thread Tokio runtime with 2 workers (what `#[tokio::main]` gives a
//! service on this 2-core machine).
//!
//! Targets: CPU ≤ 10 % of one core, ≤ 2 KiB (2048 bytes) per guard, 100 %
//! of renewals in time, no lock lost. Prints a table, one JSON line
//! (prefixed `json: `) and PASS or FAIL; exits non-zero on FAIL.
//!
//! Run: `testbed/run bench watchdog` (60 s window), or for a quick check
//! `cargo bench --bench watchdog_scale -- --duration 15`. Options:
//! `--duration <secs>` (window length, default 60), `--locks <n>` (default
//! 10000; the targets are for 10,000).

#![forbid(unsafe_code)]

use std::error::Error;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};
use quorumlock::{LockConfig, LockGuard, LockStats, MultiLock};
use quorumlock_testbed::Testbed;
use quorumlock_testbed::table::{Align, Table};
use rustix::time::{ClockId, clock_gettime};

const NODES: usize = 5;
const TTL: Duration = Duration::from_secs(10);
const PARALLELISM: usize = 64;
const WARM_UP_LOCKS: usize = 256;
const SETTLE: Duration = Duration::from_millis(500);

const TARGET_CPU_SHARE: f64 = 0.10;
const TARGET_BYTES_PER_GUARD: f64 = 2048.0;

struct Args {
    duration: Duration,
    locks: usize,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        duration: Duration::from_secs(60),
        locks: 10_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || -> Result<String, Box<dyn Error>> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value").into())
        };
        match name.as_str() {
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            "--duration" => {
                let secs: f64 = value()?.parse()?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err(format!("--duration must be positive, got {secs}").into());
                }
                args.duration = Duration::from_secs_f64(secs);
            }
            "--locks" => {
                args.locks = value()?.parse()?;
                if args.locks == 0 {
                    return Err("--locks must be at least 1".into());
                }
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (options: --duration <secs>, --locks <n>)"
                )
                .into());
            }
        }
    }
    Ok(args)
}

/// CPU time of the whole process (all threads, user + system).
fn process_cpu() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// utime and stime of the whole process from `/proc/self/stat`, in clock
/// ticks (only their ratio is used).
fn proc_ticks() -> Result<(u64, u64), Box<dyn Error>> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(')')
        .ok_or("unexpected /proc/self/stat format")?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, Box<dyn Error>> {
        Ok(fields
            .get(n - 3)
            .ok_or("unexpected /proc/self/stat format")?
            .parse()?)
    };
    Ok((field(14)?, field(15)?))
}

/// Resident set size in bytes (`VmRSS` from `/proc/self/status`).
fn rss_bytes() -> Result<u64, Box<dyn Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS in /proc/self/status")?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib * 1024)
}

/// Renewal rounds started but without a verdict yet.
fn renewals_in_flight(s: &LockStats) -> u64 {
    s.renewals.saturating_sub(s.renewed + s.renew_failed)
}

/// A point in time at which the counters and the clocks are read together.
struct Mark {
    wall: Instant,
    cpu: Duration,
    ticks: (u64, u64),
    stats: LockStats,
    in_flight: u64,
}

/// Waits (up to 2 s) for a moment when no renewal is in flight, and reads
/// the clocks and counters there.
async fn quiet_mark(lock: &MultiLock) -> Result<Mark, Box<dyn Error>> {
    let give_up = Instant::now() + Duration::from_secs(2);
    loop {
        let stats = lock.stats();
        let in_flight = renewals_in_flight(&stats);
        if in_flight == 0 || Instant::now() >= give_up {
            return Ok(Mark {
                wall: Instant::now(),
                cpu: process_cpu(),
                ticks: proc_ticks()?,
                stats,
                in_flight,
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn acquire_all(
    lock: &MultiLock,
    prefix: &str,
    n: usize,
) -> Result<Vec<LockGuard>, quorumlock::Error> {
    stream::iter(0..n)
        .map(|i| {
            let key = format!("{prefix}:{i}");
            async move { lock.try_acquire(&key).await }
        })
        .buffer_unordered(PARALLELISM)
        .try_collect()
        .await
}

/// Releases every guard; returns how many were still held when released.
async fn release_all(guards: Vec<LockGuard>) -> usize {
    stream::iter(guards)
        .map(|g| g.release())
        .buffer_unordered(PARALLELISM)
        .filter(|r| futures::future::ready(r.was_held))
        .count()
        .await
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Report {
    locks: usize,
    acquire_secs: f64,
    acquire_cpu_share: f64,
    window_secs: f64,
    cpu_share: f64,
    user_share_of_cpu: f64,
    rss_before: u64,
    rss_held: u64,
    rss_end: u64,
    start: Mark,
    end: Mark,
    took: Vec<Duration>,
    never_renewed: usize,
    min_validity: Duration,
    not_held: usize,
    released_held: usize,
    watched_after: u64,
}

impl Report {
    fn per_guard(&self, before: i64, after: i64) -> f64 {
        (after - before) as f64 / self.locks as f64
    }
    fn rss_per_guard_held(&self) -> f64 {
        self.per_guard(self.rss_before as i64, self.rss_held as i64)
    }
    fn rss_per_guard_end(&self) -> f64 {
        self.per_guard(self.rss_before as i64, self.rss_end as i64)
    }
    fn delta(&self, f: impl Fn(&LockStats) -> u64) -> u64 {
        f(&self.end.stats).saturating_sub(f(&self.start.stats))
    }
    fn renew_calls_per_node_per_sec(&self) -> Vec<f64> {
        self.end
            .stats
            .nodes
            .iter()
            .zip(&self.start.stats.nodes)
            .map(|(e, s)| (e.renew_calls - s.renew_calls) as f64 / self.window_secs)
            .collect()
    }
    fn in_time_share(&self) -> f64 {
        let renewals = self.delta(|s| s.renewals);
        if renewals == 0 {
            return 0.0;
        }
        self.delta(|s| s.renewed) as f64 / renewals as f64
    }
    fn checks(&self) -> Vec<(&'static str, bool, String)> {
        let bytes = self.rss_per_guard_held().max(self.rss_per_guard_end());
        let lost = self.delta(|s| s.lost);
        vec![
            (
                "client CPU <= 10 % of one core",
                self.cpu_share <= TARGET_CPU_SHARE,
                format!("{:.2} %", self.cpu_share * 100.0),
            ),
            (
                "resident memory <= 2048 B per guard",
                bytes <= TARGET_BYTES_PER_GUARD,
                format!("{bytes:.0} B (the larger of held and end of window)"),
            ),
            (
                "100 % of renewals in time",
                self.delta(|s| s.renewals) > 0
                    && self.delta(|s| s.renewed) == self.delta(|s| s.renewals),
                format!("{:.4} %", self.in_time_share() * 100.0),
            ),
            (
                "no lock lost, every guard held at the end",
                lost == 0 && self.not_held == 0,
                format!("{lost} lost, {} not held", self.not_held),
            ),
            (
                "all released, nothing left watched",
                self.watched_after == 0 && self.released_held == self.locks,
                format!(
                    "{} of {} released while held, watched after: {}",
                    self.released_held, self.locks, self.watched_after
                ),
            ),
        ]
    }
}

async fn run(testbed: &Testbed, args: &Args) -> Result<Report, Box<dyn Error>> {
    let lock = MultiLock::new(
        LockConfig::builder()
            .nodes(testbed.urls())
            .ttl(TTL)
            .watchdog(true)
            .build()?,
    );
    for r in lock.warm_up().await {
        r?;
    }
    let config = lock.config();
    eprintln!(
        "watchdog_scale: {} locks, {NODES} nodes, TTL {:?}, renew interval {:?}, window {:?}",
        args.locks,
        config.ttl(),
        config.renew_interval(),
        args.duration
    );

    // Warm-up: connections, scripts, runtime and allocator see the same
    // kind of traffic first; then one TTL so that the watchdog has dropped
    // every entry of the warm-up's leases (they stay scheduled until their
    // loss time even after release).
    let warm = acquire_all(&lock, "warm", WARM_UP_LOCKS).await?;
    release_all(warm).await;
    eprintln!("warm-up done; waiting {:?} for it to drain", TTL);
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;

    // Phase 1: acquire every lock.
    let rss_before = rss_bytes()?;
    let (acquire_wall, acquire_cpu) = (Instant::now(), process_cpu());
    let guards = acquire_all(&lock, "bench", args.locks).await?;
    let acquire_secs = acquire_wall.elapsed().as_secs_f64();
    let acquire_cpu_share = (process_cpu() - acquire_cpu).as_secs_f64() / acquire_secs;
    tokio::time::sleep(SETTLE).await;
    let rss_held = rss_bytes()?;
    eprintln!(
        "{} locks held after {acquire_secs:.2} s; measuring for {:?}",
        guards.len(),
        args.duration
    );

    // Phase 2: hold them all for the window.
    let start = quiet_mark(&lock).await?;
    tokio::time::sleep_until((start.wall + args.duration).into()).await;
    let end = quiet_mark(&lock).await?;
    let window_secs = (end.wall - start.wall).as_secs_f64();
    let cpu_share = (end.cpu - start.cpu).as_secs_f64() / window_secs;
    let (user, sys) = (end.ticks.0 - start.ticks.0, end.ticks.1 - start.ticks.1);
    let user_share_of_cpu = if user + sys == 0 {
        0.0
    } else {
        user as f64 / (user + sys) as f64
    };
    let rss_end = rss_bytes()?;

    let mut took: Vec<Duration> = guards
        .iter()
        .filter_map(|g| g.last_renewal().map(|r| r.took))
        .collect();
    took.sort_unstable();
    let never_renewed = guards.len() - took.len();
    let min_validity = guards
        .iter()
        .map(|g| g.validity())
        .min()
        .unwrap_or_default();
    let not_held = guards.iter().filter(|g| !g.is_held()).count();

    // Phase 3: release them all.
    let released_held = release_all(guards).await;
    let watched_after = lock.stats().watched;

    Ok(Report {
        locks: args.locks,
        acquire_secs,
        acquire_cpu_share,
        window_secs,
        cpu_share,
        user_share_of_cpu,
        rss_before,
        rss_held,
        rss_end,
        start,
        end,
        took,
        never_renewed,
        min_validity,
        not_held,
        released_held,
        watched_after,
    })
}

fn print(report: &Report) -> bool {
    let r = report;
    let renewals = r.delta(|s| s.renewals);
    let renewals_per_sec = renewals as f64 / r.window_secs;
    let calls = r.renew_calls_per_node_per_sec();
    let calls_mean = calls.iter().sum::<f64>() / calls.len().max(1) as f64;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);

    println!();
    println!(
        "watchdog_scale: {} locks, {NODES} nodes, TTL {} s, window {:.1} s, tokio multi-thread (2 workers)",
        r.locks,
        TTL.as_secs(),
        r.window_secs
    );
    let row = |label: &str, value: String| [label.to_string(), value];
    let mut table = Table::new([Align::Left, Align::Right])
        .indent(2)
        .gap(1)
        .min_widths([44, 14]);
    table
        .row(row(
            "acquire all (64 in parallel)",
            format!("{:.2} s", r.acquire_secs),
        ))
        .row(row(
            "  client CPU while acquiring",
            format!("{:.1} %", r.acquire_cpu_share * 100.0),
        ));
    table
        .text("client CPU over the window")
        .row(row(
            "share of one core",
            format!("{:.2} %", r.cpu_share * 100.0),
        ))
        .row(row(
            "  of which user / system",
            format!(
                "{:.0} / {:.0} %",
                r.user_share_of_cpu * 100.0,
                (1.0 - r.user_share_of_cpu) * 100.0
            ),
        ))
        .row(row(
            "CPU per renewal",
            format!(
                "{:.1} µs",
                (r.end.cpu - r.start.cpu).as_secs_f64() * 1e6 / renewals.max(1) as f64
            ),
        ));
    table
        .text("resident memory (VmRSS)")
        .row(row(
            "before acquiring",
            format!("{:.1} MiB", mib(r.rss_before)),
        ))
        .row(row("all held", format!("{:.1} MiB", mib(r.rss_held))))
        .row(row("end of window", format!("{:.1} MiB", mib(r.rss_end))))
        .row(row(
            "per guard, all held",
            format!("{:.0} B", r.rss_per_guard_held()),
        ))
        .row(row(
            "per guard, end of window",
            format!("{:.0} B", r.rss_per_guard_end()),
        ));
    table.text("renewal round trips (renew script calls)");
    for (node, rate) in r.end.stats.nodes.iter().zip(&calls) {
        table.row(row(&node.node, format!("{rate:.2} /s")));
    }
    table
        .row(row(
            "per-lock renewal would need, per node",
            format!("{renewals_per_sec:.1} /s"),
        ))
        .row(row(
            "saved by batching",
            format!(
                "{:.0}x",
                renewals_per_sec / calls_mean.max(f64::MIN_POSITIVE)
            ),
        ));
    let errors: u64 = r
        .end
        .stats
        .nodes
        .iter()
        .zip(&r.start.stats.nodes)
        .map(|(e, s)| (e.errors + e.timeouts) - (s.errors + s.timeouts))
        .sum();
    table
        .text("renewals over the window (one per guard per round)")
        .row(row("renewal rounds", renewals.to_string()))
        .row(row(
            "renewed in time",
            format!(
                "{} ({:.4} %)",
                r.delta(|s| s.renewed),
                r.in_time_share() * 100.0
            ),
        ))
        .row(row(
            "failed (retried)",
            r.delta(|s| s.renew_failed).to_string(),
        ))
        .row(row("healed keys", r.delta(|s| s.healed).to_string()))
        .row(row("locks lost", r.delta(|s| s.lost).to_string()))
        .row(row(
            "in flight at window start / end",
            format!("{} / {}", r.start.in_flight, r.end.in_flight),
        ))
        .row(row("node errors + timeouts", errors.to_string()))
        .row(row(
            "last renewal took p50 / p99 / max",
            format!(
                "{:.2} / {:.2} / {:.2} ms",
                ms(percentile(&r.took, 0.5)),
                ms(percentile(&r.took, 0.99)),
                ms(r.took.last().copied().unwrap_or_default())
            ),
        ))
        .row(row("guards never renewed", r.never_renewed.to_string()))
        .row(row(
            "least validity left at the end",
            format!("{:.2} s", r.min_validity.as_secs_f64()),
        ))
        .row(row("guards not held at the end", r.not_held.to_string()))
        .row(row(
            "released while held / watched after release",
            format!("{} / {}", r.released_held, r.watched_after),
        ));
    print!("{table}");

    let checks = r.checks();
    let pass = checks.iter().all(|(_, ok, _)| *ok);
    let json = serde_json::json!({
        "bench": "watchdog_scale",
        "locks": r.locks,
        "nodes": NODES,
        "ttl_s": TTL.as_secs(),
        "runtime": "tokio multi-thread, 2 workers",
        "window_s": r.window_secs,
        "acquire_s": r.acquire_secs,
        "cpu_share_of_one_core": r.cpu_share,
        "cpu_user_fraction": r.user_share_of_cpu,
        "rss_before_bytes": r.rss_before,
        "rss_per_guard_held_bytes": r.rss_per_guard_held(),
        "rss_per_guard_end_bytes": r.rss_per_guard_end(),
        "renew_calls_per_node_per_s": calls,
        "renewals_per_s": renewals_per_sec,
        "renewals": renewals,
        "renewed": r.delta(|s| s.renewed),
        "renew_failed": r.delta(|s| s.renew_failed),
        "lost": r.delta(|s| s.lost),
        "in_time_share": r.in_time_share(),
        "renewal_took_p99_ms": ms(percentile(&r.took, 0.99)),
        "not_held_at_end": r.not_held,
        "watched_after_release": r.watched_after,
        "pass": pass,
    });
    println!();
    println!("json: {json}");
    println!();
    for (name, ok, value) in &checks {
        println!("  {} {name}: {value}", if *ok { "ok  " } else { "MISS" });
    }
    println!("{}", if pass { "PASS" } else { "FAIL" });
    pass
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let testbed = Testbed::start(NODES)?;
    // A bench judges its own figures, not what its nodes keep.
    testbed.skip_leftover_check();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(&testbed, &args))?;
    // Stop the runtime and the servers before deciding the exit code:
    // `process::exit` would skip the testbed's drop, which kills them.
    drop(runtime);
    drop(testbed);
    if !print(&report) {
        std::process::exit(1);
    }
    Ok(())
}
