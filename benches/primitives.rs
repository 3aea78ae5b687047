//! The mutex, the semaphore and the read-write lock side by side, in one
//! process, on 3 local redis-server nodes started by the bench itself.
//! Every scenario runs for the same window (`--duration`, default 5 s)
//! after a 1 s warm-up that is not counted:
//!
//! 1. `mutex`: 16 workers on one name, `MultiLock::acquire` (waiting) +
//!    hold + release: acquisitions per second, the reference of the ratios.
//! 2. `sem K=4`: 16 workers, `MultiSemaphore::acquire(name, 4, wait)` +
//!    hold + release: permits per second, its ratio to (1), the most
//!    holders seen at once (at most 4) and max / min permits per worker.
//! 3. `sem K=1`: the same with one permit, a mutex through the semaphore's
//!    any-of path: its ratio to (1) is that path's overhead.
//! 4. `rw 8r+1w`: 8 readers and 1 writer of one name (`MultiRwLock::read` /
//!    `write`, waiting): reads and writes per second, reads per second ÷
//!    (1), the most readers seen at once, and whether a read overlapped a
//!    write.
//! 5. `rw 8r`: 8 readers, no writer: reads per second (readers never wait
//!    for each other).
//!
//! Then, for the same window, one caller alone, round by round in turn:
//! mutex acquire + release, permit acquire + release (K = 4, all free),
//! read acquire + release and write acquire + release (a write takes all
//! 32 reader slots): p50 / p99 of each, and its p50 ÷ the mutex's.
//!
//! The hold is one `yield_now` (no work, but a point where other tasks of
//! the runtime may run, so that holders can overlap and the counts of
//! holders at once mean something); `--hold-us N` holds N µs instead
//! (yielding in a loop); `--workers N` runs the mutex and the semaphores
//! with N workers instead of 16 (to tell the waiting from the rest). In-process atomics check exclusion: a holder
//! counts itself in when its guard comes back and out before it calls
//! release, so a count above the limit (1 for the mutex, K for a
//! semaphore), or a reader and a writer counted in at once, is a breach.
//!
//! Settings: library defaults (TTL 30 s, majority, wake-ups on, `fair` off
//! for the mutex and the semaphore; a read-write lock is always fair). Each
//! scenario has a lock service of its own, shared by its workers (one
//! process), and reports that service's `stats()` over the window:
//! attempts per acquisition, `contended`, `woken`. The client runs on a
//! multi-thread Tokio runtime with 2 workers (the machine has 2 cores,
//! shared with the 3 servers): compare the ratios of one run, not the
//! absolute figures of different runs.
//!
//! Prints one table, then PASS or FAIL: FAIL (exit code 1) on any breach of
//! exclusion, any acquire error, a scenario with no acquisitions, or a
//! writer that never got in.
//!
//! Run: `testbed/run bench primitives [--duration SECS] [--hold-us N] [--workers N]`, or
//! `cargo bench --bench primitives -- --duration 5`; `QL_PRIMITIVES_SECS`
//! sets the window too (the flag wins).

#![forbid(unsafe_code)]

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quorumlock::{
    LockConfig, LockGuard, LockStats, MultiLock, MultiRwLock, MultiSemaphore, Permit, ReadGuard,
    ReleaseReport, Wait, WriteGuard,
};
use quorumlock_testbed::Testbed;
use quorumlock_testbed::table::{Align, Table};

const NODES: usize = 3;
const WORKERS: usize = 16;
const READERS: usize = 8;
const PERMITS: u32 = 4;
const NAME: &str = "primitives-bench";
const WAIT_BUDGET: Duration = Duration::from_secs(30);
const WARM_UP: Duration = Duration::from_secs(1);
/// Uncontended rounds run before the latency window, not recorded.
const LATENCY_WARM_UP: usize = 50;

struct Args {
    duration: Duration,
    hold: Duration,
    /// Workers of the mutex and semaphore scenarios.
    workers: usize,
}

fn parse_secs(what: &str, value: &str) -> Result<Duration, Box<dyn Error>> {
    let secs: f64 = value.parse()?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("{what} must be positive, got {secs}").into());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        duration: Duration::from_secs(5),
        hold: Duration::ZERO,
        workers: WORKERS,
    };
    if let Ok(value) = std::env::var("QL_PRIMITIVES_SECS") {
        args.duration = parse_secs("QL_PRIMITIVES_SECS", &value)?;
    }
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name.as_str() {
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            "--duration" => args.duration = parse_secs("--duration", &value()?)?,
            "--hold-us" => args.hold = Duration::from_micros(value()?.parse()?),
            "--workers" => {
                args.workers = value()?.parse()?;
                if args.workers == 0 {
                    return Err("--workers must be at least 1".into());
                }
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (options: --duration <secs>, --hold-us <µs>, --workers <n>)"
                )
                .into());
            }
        }
    }
    Ok(args)
}

/// What one worker takes and gives back.
#[derive(Clone)]
enum Role {
    Mutex(MultiLock),
    Permit(MultiSemaphore, u32),
    Reader(MultiRwLock),
    Writer(MultiRwLock),
}

enum Held {
    Guard(LockGuard),
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Role {
    async fn acquire(&self, wait: Wait) -> Result<Held, quorumlock::Error> {
        Ok(match self {
            Role::Mutex(lock) => Held::Guard(lock.acquire(NAME, wait).await?),
            Role::Permit(sem, k) => Held::Permit(sem.acquire(NAME, *k, wait).await?),
            Role::Reader(rw) => Held::Read(rw.read(NAME, wait).await?),
            Role::Writer(rw) => Held::Write(rw.write(NAME, wait).await?),
        })
    }

    fn is_writer(&self) -> bool {
        matches!(self, Role::Writer(_))
    }
}

impl Held {
    async fn release(self) -> ReleaseReport {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Permit(p) => p.release().await,
            Held::Read(r) => r.release().await,
            Held::Write(w) => w.release().await,
        }
    }
}

/// What the workers of one scenario share.
struct Shared {
    base: Instant,
    measure_from: Instant,
    until: Instant,
    /// The most holders (other than a writer) allowed at once.
    limit: usize,
    /// Holders other than a writer, right now.
    holders: AtomicUsize,
    /// The most `holders` seen at once.
    most: AtomicUsize,
    /// Set while a writer holds.
    writing: AtomicBool,
    /// Holders counted in above the limit, and reads overlapping a write.
    over_limit: AtomicU64,
    overlaps: AtomicU64,
}

impl Shared {
    fn enter(&self, writer: bool) {
        if writer {
            if self.writing.swap(true, Ordering::SeqCst) || self.holders.load(Ordering::SeqCst) > 0
            {
                self.overlaps.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let now = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::Relaxed);
            if now > self.limit {
                self.over_limit.fetch_add(1, Ordering::Relaxed);
            }
            if self.writing.load(Ordering::SeqCst) {
                self.overlaps.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn leave(&self, writer: bool) {
        if writer {
            self.writing.store(false, Ordering::SeqCst);
        } else {
            self.holders.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[derive(Default)]
struct WorkerOut {
    writer: bool,
    acquisitions: u64,
    errors: u64,
    first_error: Option<String>,
    not_held_at_release: u64,
    /// From the acquire call to the guard, per acquisition in the window.
    waits: Vec<Duration>,
}

async fn hold(hold: Duration) {
    if hold.is_zero() {
        tokio::task::yield_now().await;
        return;
    }
    let end = Instant::now() + hold;
    while Instant::now() < end {
        tokio::task::yield_now().await;
    }
}

async fn worker(role: Role, shared: Arc<Shared>, hold_for: Duration) -> WorkerOut {
    let writer = role.is_writer();
    let mut out = WorkerOut {
        writer,
        ..WorkerOut::default()
    };
    tokio::time::sleep_until(shared.base.into()).await;
    loop {
        let called = Instant::now();
        let held = match role.acquire(Wait::up_to(WAIT_BUDGET)).await {
            Ok(held) => held,
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
                if Instant::now() >= shared.until {
                    break;
                }
                continue;
            }
        };
        let acquired = Instant::now();
        shared.enter(writer);
        let done = acquired >= shared.until;
        if !done {
            hold(hold_for).await;
        }
        shared.leave(writer);
        if !held.release().await.was_held {
            out.not_held_at_release += 1;
        }
        if done {
            break;
        }
        if acquired >= shared.measure_from {
            out.acquisitions += 1;
            out.waits.push(acquired - called);
        }
    }
    out
}

/// The counters this bench reports, from one lock service.
#[derive(Clone, Copy, Default)]
struct Counts {
    attempts: u64,
    acquired: u64,
    contended: u64,
    woken: u64,
    wake_notices: u64,
    handoffs: u64,
    stepped_aside: u64,
    node_errors: u64,
}

impl Counts {
    fn of(lock: &MultiLock) -> Counts {
        let s: LockStats = lock.stats();
        Counts {
            attempts: s.attempts,
            acquired: s.acquired,
            contended: s.contended,
            woken: s.woken,
            wake_notices: s.wake_notices,
            handoffs: s.handoffs,
            stepped_aside: s.stepped_aside,
            node_errors: s.nodes.iter().map(|n| n.errors + n.timeouts).sum(),
        }
    }

    fn since(self, start: Counts) -> Counts {
        Counts {
            attempts: self.attempts - start.attempts,
            acquired: self.acquired - start.acquired,
            contended: self.contended - start.contended,
            woken: self.woken - start.woken,
            wake_notices: self.wake_notices - start.wake_notices,
            handoffs: self.handoffs - start.handoffs,
            stepped_aside: self.stepped_aside - start.stepped_aside,
            node_errors: self.node_errors - start.node_errors,
        }
    }
}

struct Scenario {
    label: &'static str,
    /// One role per worker.
    roles: Vec<Role>,
    /// The lock service underneath, for its counters.
    service: MultiLock,
    limit: usize,
}

struct Outcome {
    label: &'static str,
    window_secs: f64,
    /// Acquisitions in the window per worker (readers or holders; the writer apart).
    per_worker: Vec<u64>,
    writes: Option<u64>,
    most: usize,
    limit: usize,
    over_limit: u64,
    overlaps: u64,
    errors: u64,
    first_error: Option<String>,
    not_held_at_release: u64,
    counts: Counts,
    /// Sorted: the waits of the holders (readers), and of the writer.
    waits: Vec<Duration>,
    writer_waits: Vec<Duration>,
}

impl Outcome {
    fn total(&self) -> u64 {
        self.per_worker.iter().sum()
    }

    fn per_sec(&self) -> f64 {
        self.total() as f64 / self.window_secs
    }

    fn writes_per_sec(&self) -> Option<f64> {
        self.writes.map(|w| w as f64 / self.window_secs)
    }

    fn spread(&self) -> String {
        let max = self.per_worker.iter().copied().max().unwrap_or(0);
        let min = self.per_worker.iter().copied().min().unwrap_or(0);
        if min == 0 {
            format!("{max} / 0")
        } else {
            format!("{:.2} ({max} / {min})", max as f64 / min as f64)
        }
    }
}

fn config(testbed: &Testbed) -> Result<LockConfig, Box<dyn Error>> {
    Ok(LockConfig::builder().nodes(testbed.urls()).build()?)
}

async fn warm(lock: &MultiLock) -> Result<(), Box<dyn Error>> {
    for r in lock.warm_up().await {
        r?;
    }
    Ok(())
}

async fn scenarios(testbed: &Testbed, workers: usize) -> Result<Vec<Scenario>, Box<dyn Error>> {
    let mut out = Vec::new();

    let lock = MultiLock::new(config(testbed)?);
    warm(&lock).await?;
    out.push(Scenario {
        label: "mutex",
        roles: vec![Role::Mutex(lock.clone()); workers],
        service: lock,
        limit: 1,
    });

    for (label, k) in [("sem K=4", PERMITS), ("sem K=1", 1)] {
        let sem = MultiSemaphore::new(config(testbed)?);
        warm(sem.lock()).await?;
        out.push(Scenario {
            label,
            roles: vec![Role::Permit(sem.clone(), k); workers],
            service: sem.lock().clone(),
            limit: k as usize,
        });
    }

    for (label, writer) in [("rw 8r+1w", true), ("rw 8r", false)] {
        let rw = MultiRwLock::new(config(testbed)?);
        warm(rw.lock()).await?;
        let mut roles = vec![Role::Reader(rw.clone()); READERS];
        if writer {
            roles.push(Role::Writer(rw.clone()));
        }
        out.push(Scenario {
            label,
            roles,
            service: rw.lock().clone(),
            limit: MultiRwLock::READER_SLOTS as usize,
        });
    }
    Ok(out)
}

async fn run_scenario(
    scenario: Scenario,
    duration: Duration,
    hold_for: Duration,
) -> Result<Outcome, Box<dyn Error>> {
    let base = Instant::now() + Duration::from_millis(50);
    let measure_from = base + WARM_UP;
    let until = measure_from + duration;
    let shared = Arc::new(Shared {
        base,
        measure_from,
        until,
        limit: scenario.limit,
        holders: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        writing: AtomicBool::new(false),
        over_limit: AtomicU64::new(0),
        overlaps: AtomicU64::new(0),
    });
    let tasks: Vec<_> = scenario
        .roles
        .iter()
        .cloned()
        .map(|role| tokio::spawn(worker(role, Arc::clone(&shared), hold_for)))
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let start = Counts::of(&scenario.service);
    let window_start = Instant::now();
    tokio::time::sleep_until(until.into()).await;
    let counts = Counts::of(&scenario.service).since(start);
    let window_secs = window_start.elapsed().as_secs_f64();
    let mut outs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outs.push(task.await?);
    }
    let waits_of = |writer: bool| {
        let mut w: Vec<Duration> = outs
            .iter()
            .filter(|o| o.writer == writer)
            .flat_map(|o| o.waits.iter().copied())
            .collect();
        w.sort_unstable();
        w
    };
    let (waits, writer_waits) = (waits_of(false), waits_of(true));
    let writes = outs.iter().any(|o| o.writer).then(|| {
        outs.iter()
            .filter(|o| o.writer)
            .map(|o| o.acquisitions)
            .sum()
    });
    Ok(Outcome {
        label: scenario.label,
        window_secs,
        per_worker: outs
            .iter()
            .filter(|o| !o.writer)
            .map(|o| o.acquisitions)
            .collect(),
        writes,
        most: shared.most.load(Ordering::SeqCst),
        limit: scenario.limit,
        over_limit: shared.over_limit.load(Ordering::SeqCst),
        overlaps: shared.overlaps.load(Ordering::SeqCst),
        errors: outs.iter().map(|o| o.errors).sum(),
        first_error: outs.iter().find_map(|o| o.first_error.clone()),
        not_held_at_release: outs.iter().map(|o| o.not_held_at_release).sum(),
        counts,
        waits,
        writer_waits,
    })
}

/// One caller's acquire + release latencies of one operation, sorted.
#[derive(Default)]
struct Latency {
    label: &'static str,
    total: Vec<Duration>,
    acquire: Vec<Duration>,
    release: Vec<Duration>,
}

/// The four operations, one caller, in turn round by round for `duration`.
async fn latencies(
    testbed: &Testbed,
    duration: Duration,
) -> Result<(Vec<Latency>, u64), Box<dyn Error>> {
    let lock = MultiLock::new(config(testbed)?);
    warm(&lock).await?;
    let sem = MultiSemaphore::new(config(testbed)?);
    warm(sem.lock()).await?;
    let rw = MultiRwLock::new(config(testbed)?);
    warm(rw.lock()).await?;
    let ops = [
        ("mutex", Role::Mutex(lock)),
        ("permit (K=4, free)", Role::Permit(sem, PERMITS)),
        ("read", Role::Reader(rw.clone())),
        ("write (32 slots)", Role::Writer(rw)),
    ];
    let mut out: Vec<Latency> = ops
        .iter()
        .map(|(label, _)| Latency {
            label,
            ..Latency::default()
        })
        .collect();
    let mut not_held = 0;
    let mut round = 0usize;
    let until = Instant::now() + duration;
    while Instant::now() < until {
        for ((_, role), lat) in ops.iter().zip(out.iter_mut()) {
            let began = Instant::now();
            let held = role.acquire(Wait::NONE).await?;
            let acquired = Instant::now();
            if !held.release().await.was_held {
                not_held += 1;
            }
            let released = Instant::now();
            if round >= LATENCY_WARM_UP {
                lat.total.push(released - began);
                lat.acquire.push(acquired - began);
                lat.release.push(released - acquired);
            }
        }
        round += 1;
    }
    for lat in &mut out {
        lat.total.sort_unstable();
        lat.acquire.sort_unstable();
        lat.release.sort_unstable();
    }
    Ok((out, not_held))
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Report {
    duration: Duration,
    hold: Duration,
    outcomes: Vec<Outcome>,
    latencies: Vec<Latency>,
    latency_not_held: u64,
}

async fn run(testbed: &Testbed, args: &Args) -> Result<Report, Box<dyn Error>> {
    let mut outcomes = Vec::new();
    for scenario in scenarios(testbed, args.workers).await? {
        eprintln!("running {} ...", scenario.label);
        let outcome = run_scenario(scenario, args.duration, args.hold).await?;
        eprintln!("  {}: {:.0} /s", outcome.label, outcome.per_sec());
        outcomes.push(outcome);
        // Let background releases and subscriber tasks wind down.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("running uncontended latencies ...");
    let (latencies, latency_not_held) = latencies(testbed, args.duration).await?;
    Ok(Report {
        duration: args.duration,
        hold: args.hold,
        outcomes,
        latencies,
        latency_not_held,
    })
}

fn row(table: &mut Table, label: &str, cells: impl Iterator<Item = String>) {
    table.row(std::iter::once(label.to_string()).chain(cells));
}

fn print(report: &Report) -> bool {
    let o = &report.outcomes;
    let mutex = o[0].per_sec();
    let hold = if report.hold.is_zero() {
        "one yield".to_string()
    } else {
        format!("{} µs", report.hold.as_micros())
    };
    println!();
    println!(
        "primitives: {NODES} nodes, one name, hold {hold}, window {:.1} s per scenario (after {} s warm-up), \
         library defaults, tokio multi-thread (2 workers)",
        report.duration.as_secs_f64(),
        WARM_UP.as_secs()
    );
    println!();
    let mut table = Table::new(std::iter::once(Align::Left).chain(o.iter().map(|_| Align::Right)))
        .indent(2)
        .gap(2)
        .min_widths(std::iter::once(34).chain(o.iter().map(|_| 12)));
    row(
        &mut table,
        "scenario",
        o.iter().map(|x| x.label.to_string()),
    );
    row(
        &mut table,
        "workers",
        o.iter().map(|x| match x.writes {
            Some(_) => format!("{}r+1w", x.per_worker.len()),
            None => x.per_worker.len().to_string(),
        }),
    );
    row(
        &mut table,
        "acquisitions (reads) /s",
        o.iter().map(|x| format!("{:.0}", x.per_sec())),
    );
    row(
        &mut table,
        "writes /s",
        o.iter().map(|x| match x.writes_per_sec() {
            Some(w) => format!("{w:.1}"),
            None => "-".into(),
        }),
    );
    row(
        &mut table,
        "ratio to mutex acquisitions/s",
        o.iter().map(|x| format!("{:.2}", x.per_sec() / mutex)),
    );
    row(
        &mut table,
        "most holders (readers) at once",
        o.iter().map(|x| format!("{} (<= {})", x.most, x.limit)),
    );
    row(
        &mut table,
        "per worker max/min (max / min)",
        o.iter().map(Outcome::spread),
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    row(
        &mut table,
        "wait p50 / p99 (ms)",
        o.iter().map(|x| {
            format!(
                "{:.2} / {:.1}",
                ms(quantile(&x.waits, 0.5)),
                ms(quantile(&x.waits, 0.99))
            )
        }),
    );
    row(
        &mut table,
        "writer wait p50 / p99 (ms)",
        o.iter().map(|x| match x.writes {
            Some(_) => format!(
                "{:.2} / {:.1}",
                ms(quantile(&x.writer_waits, 0.5)),
                ms(quantile(&x.writer_waits, 0.99))
            ),
            None => "-".into(),
        }),
    );
    let per_acq =
        |x: &Outcome, n: u64| format!("{:.2}", n as f64 / x.counts.acquired.max(1) as f64);
    row(
        &mut table,
        "attempts per acquisition",
        o.iter().map(|x| per_acq(x, x.counts.attempts)),
    );
    row(
        &mut table,
        "stats: contended / acquisition",
        o.iter().map(|x| per_acq(x, x.counts.contended)),
    );
    row(
        &mut table,
        "stats: woken / acquisition",
        o.iter().map(|x| per_acq(x, x.counts.woken)),
    );
    row(
        &mut table,
        "stats: wake_notices / acquisition",
        o.iter().map(|x| per_acq(x, x.counts.wake_notices)),
    );
    row(
        &mut table,
        "stats: handoffs / acquisition",
        o.iter().map(|x| per_acq(x, x.counts.handoffs)),
    );
    row(
        &mut table,
        "stats: stepped_aside / acquisition",
        o.iter().map(|x| per_acq(x, x.counts.stepped_aside)),
    );
    row(
        &mut table,
        "stats: acquired (window)",
        o.iter().map(|x| x.counts.acquired.to_string()),
    );
    row(
        &mut table,
        "breaches: over limit / read+write",
        o.iter()
            .map(|x| format!("{} / {}", x.over_limit, x.overlaps)),
    );
    row(
        &mut table,
        "errors: acquire / node / lost",
        o.iter().map(|x| {
            format!(
                "{} / {} / {}",
                x.errors, x.counts.node_errors, x.not_held_at_release
            )
        }),
    );
    table.text("");
    table.text("  uncontended, one caller, in turn round by round (µs):");
    row(
        &mut table,
        "acquire+release",
        ["p50", "p99", "p50 ÷ mutex", "acquire p50", "release p50"]
            .into_iter()
            .map(String::from),
    );
    let mutex_p50 = quantile(&report.latencies[0].total, 0.5);
    for lat in &report.latencies {
        let p50 = quantile(&lat.total, 0.5);
        row(
            &mut table,
            lat.label,
            [
                format!("{:.0}", us(p50)),
                format!("{:.0}", us(quantile(&lat.total, 0.99))),
                format!("{:.2}", p50.as_secs_f64() / mutex_p50.as_secs_f64()),
                format!("{:.0}", us(quantile(&lat.acquire, 0.5))),
                format!("{:.0}", us(quantile(&lat.release, 0.5))),
            ]
            .into_iter(),
        );
    }
    table.text(format!(
        "  ({} rounds of the four after {LATENCY_WARM_UP} not counted)",
        report.latencies[0].total.len()
    ));
    print!("{table}");
    println!();

    let mut pass = true;
    let mut check = |ok: bool, what: String| {
        println!("  {} {what}", if ok { "ok  " } else { "FAIL" });
        pass &= ok;
    };
    for x in o {
        check(
            x.over_limit == 0 && x.overlaps == 0,
            format!(
                "{}: exclusion held (most at once {} of {}; {} over, {} read/write overlaps)",
                x.label, x.most, x.limit, x.over_limit, x.overlaps
            ),
        );
        check(
            x.errors == 0 && x.not_held_at_release == 0,
            format!(
                "{}: no acquire error, nothing lost before release ({} / {}{})",
                x.label,
                x.errors,
                x.not_held_at_release,
                x.first_error
                    .as_deref()
                    .map(|e| format!("; first: {e}"))
                    .unwrap_or_default()
            ),
        );
        check(
            x.total() > 0 && x.writes != Some(0),
            format!(
                "{}: every role got in ({} acquisitions{})",
                x.label,
                x.total(),
                x.writes
                    .map(|w| format!(", {w} writes"))
                    .unwrap_or_default()
            ),
        );
    }
    check(
        report.latency_not_held == 0,
        format!(
            "latencies: every hold released ({} not held)",
            report.latency_not_held
        ),
    );
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
