//! Wake-ups under contention: 8 workers contending for one key, each
//! holding it ~1 ms, on 5 local redis-server nodes started by the bench
//! itself. Everything below is measured in the same run:
//!
//! * **One acquire round trip**: the median latency of an uncontended
//!   `try_acquire` (the acquire only; each guard is released before the
//!   next call), over 2,000 calls with the default lock settings: 1,000
//!   before the scenarios and 1,000 after, so that drift over the run
//!   moves the reference less.
//! * Four scenarios, each run for the window (`--duration`, default 10 s)
//!   after a 1 s warm-up, with the same 8 workers:
//!   - `on/shared`: wake-ups on, the workers sharing **one** `MultiLock`
//!     (one process: shared connections, one subscriber connection per
//!     node);
//!   - `off/shared`: wake-ups off (plain jittered polling), one shared
//!     `MultiLock`;
//!   - `on/separate`: wake-ups on, each worker its own `MultiLock` (like 8
//!     processes: only the nodes' pub/sub notices wake a waiter);
//!   - `off/separate`: wake-ups off, each worker its own `MultiLock`.
//!
//! Each worker loops: `acquire(KEY, 60 s)` (the wait, from the call to the
//! guard, is recorded), hold the lock exactly ~1 ms from the moment the
//! guard came back, `release().await`. The hold sleeps on a per-worker OS
//! thread (`nanosleep` is precise to tens of µs, Tokio's timer only to the
//! next millisecond tick) until 200 µs before its end, then yields in a loop
//! until the 1 ms is up; the real hold is recorded. An `AtomicBool` set
//! while a worker holds the lock checks mutual exclusion in this process.
//!
//! The **ideal** rate of a scenario is `1 / (mean hold + acquire round
//! trip)`: a handoff that costs nothing beyond the next holder's acquire.
//! Also reported per scenario: acquisitions per second and their ratio to
//! the ideal, wait p50/p99, the mean hold, the handoff (from a holder's
//! release call to the next holder's guard), the lock's `stats()` counters
//! over the window (`contended`, `woken`, `wake_notices`, attempts per
//! acquisition), how evenly the workers got the lock, and the CPU used over
//! the window by this process, by the 5 servers and by anything else on
//! the machine (from `/proc`; "other" shows a machine that was not quiet).
//!
//! `--trace` also installs a minimal `tracing` subscriber that records each
//! acquire attempt of the library (its `acquire` span and "acquired" event)
//! and breaks every handoff down: release call → start of the winning
//! attempt (the wake-up), the winning attempt itself, its end → guard in
//! the worker's hands; plus the losing attempts per cycle. It costs a mutex
//! per span event, so its rates are for diagnosis, not for the target.
//!
//! Settings: the library defaults (TTL 30 s, majority, node timeout 50 ms,
//! default `RetryPolicy`: 10 ms doubling to 200 ms, half jittered), only
//! `wake_ups` changed. The client runs on a multi-thread Tokio runtime with
//! 2 workers (the machine has 2 cores, shared with the 5 servers).
//!
//! Target: wake-ups on with a shared lock ≥ 0.95× the ideal (the separate
//! locks' ratio is printed for information). Prints a table, one JSON line
//! (prefixed `json: `) and PASS or FAIL; exits non-zero on FAIL, and on any
//! breach of mutual exclusion or acquire error.
//!
//! Run: `testbed/run bench wakeups [--duration SECS] [--trace]`, or
//! `cargo bench --bench wakeups -- --duration 5`.

#![forbid(unsafe_code)]

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quorumlock::{LockConfig, LockStats, MultiLock, Wait};
use quorumlock_testbed::Testbed;
use quorumlock_testbed::table::{Align, Table};
use tokio::sync::Notify;

const NODES: usize = 5;
const WORKERS: usize = 8;
const KEY: &str = "wakeups-bench";
const HOLD: Duration = Duration::from_millis(1);
/// The hold's sleeping thread hands back this long before the hold's end;
/// the worker yields in a loop for the rest.
const SPIN: Duration = Duration::from_micros(200);
const WAIT_BUDGET: Duration = Duration::from_secs(60);
const WARM_UP: Duration = Duration::from_secs(1);
const RTT_WARM_UP: usize = 200;
/// Acquire round trips measured before the scenarios, and as many after.
const RTT_SAMPLES_EACH: usize = 1_000;
const TARGET_RATIO: f64 = 0.95;

struct Args {
    duration: Duration,
    trace: bool,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        duration: Duration::from_secs(10),
        trace: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        match name.as_str() {
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            "--trace" => args.trace = true,
            "--duration" => {
                let value = inline
                    .or_else(|| it.next())
                    .ok_or("--duration needs a value")?;
                let secs: f64 = value.parse()?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err(format!("--duration must be positive, got {secs}").into());
                }
                args.duration = Duration::from_secs_f64(secs);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (options: --duration <secs>, --trace)"
                )
                .into());
            }
        }
    }
    Ok(args)
}

#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    wake_ups: bool,
    shared: bool,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "on/shared",
        wake_ups: true,
        shared: true,
    },
    Scenario {
        name: "off/shared",
        wake_ups: false,
        shared: true,
    },
    Scenario {
        name: "on/separate",
        wake_ups: true,
        shared: false,
    },
    Scenario {
        name: "off/separate",
        wake_ups: false,
        shared: false,
    },
];

/// A precise sleep for one worker: an OS thread that sleeps until the
/// deadline it is sent and then wakes the worker. No allocation per sleep.
struct Sleeper {
    deadlines: SyncSender<Instant>,
    woke: Arc<Notify>,
}

impl Sleeper {
    fn start() -> (Sleeper, JoinHandle<()>) {
        let (deadlines, rx) = sync_channel::<Instant>(1);
        let woke = Arc::new(Notify::new());
        let notify = Arc::clone(&woke);
        let thread = std::thread::spawn(move || {
            for deadline in rx {
                let now = Instant::now();
                if deadline > now {
                    std::thread::sleep(deadline - now);
                }
                notify.notify_one();
            }
        });
        (Sleeper { deadlines, woke }, thread)
    }

    /// Holds until exactly `deadline` (give or take a yield): sleeps on the
    /// thread until `SPIN` before it, then yields in a loop.
    async fn hold_until(&self, deadline: Instant) {
        let wake_at = deadline - SPIN;
        if wake_at > Instant::now() {
            // The channel is empty: every send is followed by its wake-up.
            self.deadlines.send(wake_at).expect("sleeper thread alive");
            self.woke.notified().await;
        }
        while Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
    }
}

/// What the workers of one scenario share.
struct Shared {
    /// Zero point of `last_release`.
    base: Instant,
    measure_from: Instant,
    until: Instant,
    /// Set while a worker holds the lock.
    held: AtomicBool,
    /// When the last holder called release, in ns since `base` (0: none).
    last_release: AtomicU64,
}

/// One worker's record of the window.
#[derive(Default)]
struct WorkerOut {
    acquisitions: u64,
    waits_us: Vec<u32>,
    /// (the previous holder's release call, this guard), per acquisition.
    handoffs: Vec<(Instant, Instant)>,
    hold_sum: Duration,
    hold_max: Duration,
    violations: u64,
    not_held_at_release: u64,
    errors: u64,
    first_error: Option<String>,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

async fn worker(
    lock: MultiLock,
    shared: Arc<Shared>,
    sleeper: Sleeper,
    capacity: usize,
) -> WorkerOut {
    let mut out = WorkerOut {
        waits_us: Vec::with_capacity(capacity),
        handoffs: Vec::with_capacity(capacity),
        ..WorkerOut::default()
    };
    tokio::time::sleep_until(shared.base.into()).await;
    loop {
        let called = Instant::now();
        let guard = match lock.acquire(KEY, Wait::up_to(WAIT_BUDGET)).await {
            Ok(guard) => guard,
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
        if shared.held.swap(true, Ordering::AcqRel) {
            out.violations += 1;
        }
        if acquired >= shared.until {
            // Past the window: give it back at once and stop.
            shared.held.store(false, Ordering::Release);
            guard.release().await;
            break;
        }
        let previous = shared.last_release.load(Ordering::Acquire);
        sleeper.hold_until(acquired + HOLD).await;
        let releasing = Instant::now();
        shared.held.store(false, Ordering::Release);
        shared.last_release.store(
            u64::try_from((releasing - shared.base).as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        if acquired >= shared.measure_from {
            let hold = releasing - acquired;
            out.acquisitions += 1;
            out.waits_us.push(micros(acquired - called));
            if previous != 0 {
                let previous = shared.base + Duration::from_nanos(previous);
                out.handoffs.push((previous, acquired));
            }
            out.hold_sum += hold;
            out.hold_max = out.hold_max.max(hold);
        }
        if !guard.release().await.was_held {
            out.not_held_at_release += 1;
        }
    }
    out
}

/// The counters this bench reports, summed over a scenario's locks.
#[derive(Clone, Copy, Default)]
struct Counts {
    attempts: u64,
    acquired: u64,
    contended: u64,
    quorum_not_reached: u64,
    woken: u64,
    wake_notices: u64,
    node_errors: u64,
}

impl Counts {
    fn of(locks: &[MultiLock]) -> Counts {
        let mut c = Counts::default();
        for lock in locks {
            let s: LockStats = lock.stats();
            c.attempts += s.attempts;
            c.acquired += s.acquired;
            c.contended += s.contended;
            c.quorum_not_reached += s.quorum_not_reached;
            c.woken += s.woken;
            c.wake_notices += s.wake_notices;
            c.node_errors += s.nodes.iter().map(|n| n.errors + n.timeouts).sum::<u64>();
        }
        c
    }

    fn since(self, start: Counts) -> Counts {
        Counts {
            attempts: self.attempts - start.attempts,
            acquired: self.acquired - start.acquired,
            contended: self.contended - start.contended,
            quorum_not_reached: self.quorum_not_reached - start.quorum_not_reached,
            woken: self.woken - start.woken,
            wake_notices: self.wake_notices - start.wake_notices,
            node_errors: self.node_errors - start.node_errors,
        }
    }
}

/// CPU time in clock ticks (`USER_HZ`, from `/proc`): this process, the
/// redis-servers, and the whole machine (busy, all cores).
#[derive(Clone, Copy, Default)]
struct Cpu {
    client: u64,
    servers: u64,
    machine: u64,
}

/// utime + stime of a process, in ticks (0 if it cannot be read).
fn process_ticks(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // After the command name (in parentheses): state is field 3, utime 14,
    // stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> u64 { fields.get(n - 3).and_then(|f| f.parse().ok()).unwrap_or(0) };
    field(14) + field(15)
}

/// Busy ticks of all cores together (`/proc/stat`: all but idle and iowait).
fn machine_busy_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum()
}

impl Cpu {
    fn now(servers: &[String]) -> Cpu {
        Cpu {
            client: process_ticks("self"),
            servers: servers.iter().map(|p| process_ticks(p)).sum(),
            machine: machine_busy_ticks(),
        }
    }

    fn since(self, start: Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(start.client),
            servers: self.servers.saturating_sub(start.servers),
            machine: self.machine.saturating_sub(start.machine),
        }
    }
}

/// Clock ticks per second in `/proc` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

struct Outcome {
    scenario: Scenario,
    window_secs: f64,
    acquisitions: u64,
    per_worker: Vec<u64>,
    waits_us: Vec<u32>,
    /// Sorted by the guard's time.
    handoffs: Vec<(Instant, Instant)>,
    handoffs_us: Vec<u32>,
    mean_hold: Duration,
    max_hold: Duration,
    counts: Counts,
    cpu: Cpu,
    violations: u64,
    not_held_at_release: u64,
    errors: u64,
    first_error: Option<String>,
    breakdown: Option<trace::Breakdown>,
}

impl Outcome {
    fn per_sec(&self) -> f64 {
        self.acquisitions as f64 / self.window_secs
    }
    fn ideal(&self, rtt: Duration) -> f64 {
        1.0 / (self.mean_hold + rtt).as_secs_f64()
    }
    fn ratio(&self, rtt: Duration) -> f64 {
        self.per_sec() / self.ideal(rtt)
    }
    fn mean_handoff_us(&self) -> f64 {
        mean(&self.handoffs_us)
    }
    /// CPU in cores over the window: (client, servers, rest of the machine).
    fn cores(&self) -> (f64, f64, f64) {
        let per = |t: u64| t as f64 / TICKS_PER_SEC / self.window_secs;
        let c = self.cpu;
        (
            per(c.client),
            per(c.servers),
            per(c.machine.saturating_sub(c.client + c.servers)),
        )
    }
}

fn mean(v: &[u32]) -> f64 {
    v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64
}

fn config(testbed: &Testbed, wake_ups: bool) -> Result<LockConfig, Box<dyn Error>> {
    Ok(LockConfig::builder()
        .nodes(testbed.urls())
        .wake_ups(wake_ups)
        .build()?)
}

async fn new_lock(config: LockConfig) -> Result<MultiLock, Box<dyn Error>> {
    let lock = MultiLock::new(config);
    for r in lock.warm_up().await {
        r?;
    }
    Ok(lock)
}

/// Uncontended `try_acquire` latencies (acquire only), sorted.
async fn acquire_round_trips(lock: MultiLock) -> Result<Vec<Duration>, quorumlock::Error> {
    let mut took = Vec::with_capacity(RTT_SAMPLES_EACH);
    for i in 0..RTT_WARM_UP + RTT_SAMPLES_EACH {
        let started = Instant::now();
        let guard = lock.try_acquire(KEY).await?;
        let elapsed = started.elapsed();
        guard.release().await;
        if i >= RTT_WARM_UP {
            took.push(elapsed);
        }
    }
    took.sort_unstable();
    Ok(took)
}

async fn run_scenario(
    testbed: &Testbed,
    scenario: Scenario,
    duration: Duration,
    tracing: bool,
) -> Result<Outcome, Box<dyn Error>> {
    let servers: Vec<String> = testbed
        .nodes()
        .iter()
        .filter_map(|n| n.pid())
        .map(|p| p.to_string())
        .collect();
    let mut locks = Vec::with_capacity(WORKERS);
    if scenario.shared {
        locks.push(new_lock(config(testbed, scenario.wake_ups)?).await?);
    } else {
        for _ in 0..WORKERS {
            locks.push(new_lock(config(testbed, scenario.wake_ups)?).await?);
        }
    }
    let base = Instant::now() + Duration::from_millis(50);
    let measure_from = base + WARM_UP;
    let until = measure_from + duration;
    let shared = Arc::new(Shared {
        base,
        measure_from,
        until,
        held: AtomicBool::new(false),
        last_release: AtomicU64::new(0),
    });
    // Room for every acquisition of the window in one worker (polling can
    // let one worker take nearly all of them): no growth in the loop.
    let capacity = (duration.as_secs_f64() * 1_500.0) as usize + 64;
    let mut threads = Vec::with_capacity(WORKERS);
    let mut tasks = Vec::with_capacity(WORKERS);
    let traced_from = trace::recorded();
    for i in 0..WORKERS {
        let (sleeper, thread) = Sleeper::start();
        threads.push(thread);
        let lock = locks[i % locks.len()].clone();
        tasks.push(tokio::spawn(worker(
            lock,
            Arc::clone(&shared),
            sleeper,
            capacity,
        )));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let (counts_start, cpu_start) = (Counts::of(&locks), Cpu::now(&servers));
    let window_start = Instant::now();
    tokio::time::sleep_until(until.into()).await;
    let (counts_end, cpu_end) = (Counts::of(&locks), Cpu::now(&servers));
    let window_secs = (Instant::now() - window_start).as_secs_f64();

    let mut outs = Vec::with_capacity(WORKERS);
    for task in tasks {
        outs.push(task.await?);
    }
    // The workers dropped their sleepers: each thread ends.
    for thread in threads {
        thread.join().map_err(|_| "a sleeper thread panicked")?;
    }
    drop(locks);

    let acquisitions: u64 = outs.iter().map(|o| o.acquisitions).sum();
    let hold_sum: Duration = outs.iter().map(|o| o.hold_sum).sum();
    let mut waits_us: Vec<u32> = outs
        .iter()
        .flat_map(|o| o.waits_us.iter().copied())
        .collect();
    waits_us.sort_unstable();
    let mut handoffs: Vec<(Instant, Instant)> = outs
        .iter()
        .flat_map(|o| o.handoffs.iter().copied())
        .collect();
    handoffs.sort_unstable_by_key(|&(_, guard)| guard);
    let mut handoffs_us: Vec<u32> = handoffs
        .iter()
        .map(|&(release, guard)| micros(guard.saturating_duration_since(release)))
        .collect();
    handoffs_us.sort_unstable();
    let breakdown = tracing.then(|| trace::breakdown(&trace::since(traced_from), &handoffs));
    Ok(Outcome {
        scenario,
        window_secs,
        acquisitions,
        per_worker: outs.iter().map(|o| o.acquisitions).collect(),
        waits_us,
        handoffs,
        handoffs_us,
        mean_hold: hold_sum / u32::try_from(acquisitions.max(1)).unwrap_or(u32::MAX),
        max_hold: outs.iter().map(|o| o.hold_max).max().unwrap_or_default(),
        counts: counts_end.since(counts_start),
        cpu: cpu_end.since(cpu_start),
        violations: outs.iter().map(|o| o.violations).sum(),
        not_held_at_release: outs.iter().map(|o| o.not_held_at_release).sum(),
        errors: outs.iter().map(|o| o.errors).sum(),
        first_error: outs.iter_mut().find_map(|o| o.first_error.take()),
        breakdown,
    })
}

/// `--trace`: every acquire attempt of the library (its `acquire` span:
/// start, end, nodes won), to break each handoff down into the wake-up,
/// the winning attempt and the return to the caller, and to count the
/// attempts that lost. Off by default: no subscriber is installed then and
/// the library's spans cost next to nothing.
mod trace {
    use std::cell::RefCell;
    use std::sync::{Mutex, PoisonError};
    use std::time::Instant;

    use tracing::span::{Attributes, Id, Record};
    use tracing::subscriber::Interest;
    use tracing::{Event, Metadata, Subscriber};

    #[derive(Clone, Copy)]
    pub struct Attempt {
        start: Instant,
        end: Option<Instant>,
        won: bool,
    }

    static ATTEMPTS: Mutex<Vec<Attempt>> = Mutex::new(Vec::new());

    thread_local! {
        static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    }

    fn attempts() -> std::sync::MutexGuard<'static, Vec<Attempt>> {
        ATTEMPTS.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Installs the recorder as the global subscriber.
    pub fn install() -> Result<(), tracing::subscriber::SetGlobalDefaultError> {
        attempts().reserve(1 << 20);
        tracing::subscriber::set_global_default(Recorder)
    }

    /// How many attempts have been recorded so far.
    pub fn recorded() -> usize {
        attempts().len()
    }

    /// The attempts recorded after the first `from`.
    pub fn since(from: usize) -> Vec<Attempt> {
        attempts().get(from..).unwrap_or_default().to_vec()
    }

    /// Records the library's `acquire` spans (one per attempt) and its
    /// "acquired" event (the attempt won), nothing else. The span an event
    /// belongs to is the innermost one entered on its thread.
    struct Recorder;

    fn is_attempt(meta: &Metadata<'_>) -> bool {
        meta.is_span() && meta.name() == "acquire" && meta.target() == "quorumlock::lock"
    }

    /// `debug!(won, ?validity, "acquired")` in the acquire path.
    fn is_win(meta: &Metadata<'_>) -> bool {
        meta.is_event()
            && meta.target() == "quorumlock::lock"
            && meta.fields().field("validity").is_some()
    }

    impl Subscriber for Recorder {
        fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
            if is_attempt(meta) || is_win(meta) {
                Interest::always()
            } else {
                Interest::never()
            }
        }
        fn enabled(&self, meta: &Metadata<'_>) -> bool {
            is_attempt(meta) || is_win(meta)
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            let mut all = attempts();
            all.push(Attempt {
                start: Instant::now(),
                end: None,
                won: false,
            });
            Id::from_u64(all.len() as u64)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            if !is_win(event.metadata()) {
                return;
            }
            let Some(id) = ENTERED.with(|e| e.borrow().last().copied()) else {
                return;
            };
            if let Some(a) = attempts().get_mut(id as usize - 1) {
                a.won = true;
            }
        }
        fn enter(&self, id: &Id) {
            ENTERED.with(|e| e.borrow_mut().push(id.into_u64()));
        }
        fn exit(&self, id: &Id) {
            ENTERED.with(|e| {
                let mut e = e.borrow_mut();
                if let Some(i) = e.iter().rposition(|&x| x == id.into_u64()) {
                    e.remove(i);
                }
            });
        }
        fn try_close(&self, id: Id) -> bool {
            // The span and its clones: the last close is the attempt's end.
            let now = Instant::now();
            if let Some(a) = attempts().get_mut(id.into_u64() as usize - 1) {
                a.end = Some(a.end.map_or(now, |e| e.max(now)));
            }
            false
        }
    }

    /// Each handoff (a holder's release call to the next guard) split into
    /// its parts, and the attempts that lost.
    pub struct Breakdown {
        pub matched: usize,
        pub unmatched: usize,
        /// Release call to the start of the winning attempt.
        pub wake_us: Vec<u32>,
        /// The winning attempt (its span).
        pub attempt_us: Vec<u32>,
        /// End of the winning attempt to the guard in the worker's hands.
        pub lag_us: Vec<u32>,
        /// Losing attempts started per cycle (guard to next guard).
        pub lost_per_cycle: f64,
        /// Of those, started between the release call and the next guard.
        pub lost_in_handoff: f64,
    }

    fn us(d: std::time::Duration) -> u32 {
        u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
    }

    /// `handoffs`: (release call, next guard), sorted by the guard.
    pub fn breakdown(attempts: &[Attempt], handoffs: &[(Instant, Instant)]) -> Breakdown {
        let mut winners: Vec<(Instant, Instant)> = attempts
            .iter()
            .filter(|a| a.won)
            .filter_map(|a| a.end.map(|end| (a.start, end)))
            .collect();
        winners.sort_unstable_by_key(|&(_, end)| end);
        let mut losers: Vec<Instant> = attempts
            .iter()
            .filter(|a| !a.won)
            .map(|a| a.start)
            .collect();
        losers.sort_unstable();
        let count = |from: Instant, to: Instant| {
            losers.partition_point(|&s| s <= to) - losers.partition_point(|&s| s <= from)
        };
        let mut b = Breakdown {
            matched: 0,
            unmatched: 0,
            wake_us: Vec::with_capacity(handoffs.len()),
            attempt_us: Vec::with_capacity(handoffs.len()),
            lag_us: Vec::with_capacity(handoffs.len()),
            lost_per_cycle: 0.0,
            lost_in_handoff: 0.0,
        };
        let (mut cycle, mut handoff, mut cycles) = (0usize, 0usize, 0usize);
        for (i, &(release, guard)) in handoffs.iter().enumerate() {
            let w = winners.partition_point(|&(_, end)| end <= guard);
            match w.checked_sub(1).map(|w| winners[w]) {
                Some((start, end)) if end >= release => {
                    b.matched += 1;
                    b.wake_us.push(us(start.saturating_duration_since(release)));
                    b.attempt_us.push(us(end - start));
                    b.lag_us.push(us(guard - end));
                }
                _ => b.unmatched += 1,
            }
            handoff += count(release, guard);
            if let Some(&(_, previous)) = i.checked_sub(1).map(|p| &handoffs[p]) {
                cycle += count(previous, guard);
                cycles += 1;
            }
        }
        for v in [&mut b.wake_us, &mut b.attempt_us, &mut b.lag_us] {
            v.sort_unstable();
        }
        b.lost_per_cycle = cycle as f64 / cycles.max(1) as f64;
        b.lost_in_handoff = handoff as f64 / handoffs.len().max(1) as f64;
        b
    }
}

struct Report {
    duration: Duration,
    /// Sorted: before and after the scenarios together.
    rtt: Vec<Duration>,
    rtt_before: Duration,
    rtt_after: Duration,
    outcomes: Vec<Outcome>,
    retry: String,
}

impl Report {
    fn rtt_median(&self) -> Duration {
        quantile(&self.rtt, 0.5)
    }
}

fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms_us(us: u32) -> f64 {
    f64::from(us) / 1e3
}

async fn run(testbed: &Testbed, args: &Args) -> Result<Report, Box<dyn Error>> {
    let defaults = config(testbed, true)?;
    let retry = defaults.retry();
    let retry = format!(
        "default: base {:?}, max {:?}, jitter {}, max attempts {:?}",
        retry.base_delay(),
        retry.max_delay(),
        retry.jitter(),
        retry.max_attempts()
    );
    eprintln!(
        "wakeups: {WORKERS} workers, {NODES} nodes, hold {HOLD:?}, window {:?} per scenario; retry {retry}",
        args.duration
    );
    let rtt_lock = new_lock(defaults).await?;
    let before = tokio::spawn(acquire_round_trips(rtt_lock.clone())).await??;
    eprintln!(
        "acquire round trip (uncontended try_acquire, {RTT_SAMPLES_EACH} calls): median {:.1} µs",
        quantile(&before, 0.5).as_secs_f64() * 1e6
    );
    let mut outcomes = Vec::with_capacity(SCENARIOS.len());
    for scenario in SCENARIOS {
        eprintln!("running {} ...", scenario.name);
        let outcome = run_scenario(testbed, scenario, args.duration, args.trace).await?;
        eprintln!(
            "  {}: {:.0} acquisitions/s",
            scenario.name,
            outcome.per_sec()
        );
        outcomes.push(outcome);
        // Let background releases and subscriber tasks wind down.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Again after the scenarios: the ideal uses the median of both sets,
    // so that drift over the run hits it less.
    let after = tokio::spawn(acquire_round_trips(rtt_lock)).await??;
    let mut rtt = [before.as_slice(), after.as_slice()].concat();
    rtt.sort_unstable();
    Ok(Report {
        duration: args.duration,
        rtt_before: quantile(&before, 0.5),
        rtt_after: quantile(&after, 0.5),
        rtt,
        outcomes,
        retry,
    })
}

/// Adds a row to the results table: a label, then one cell per scenario.
fn row(table: &mut Table, label: &str, cells: impl Iterator<Item = String>) {
    table.row(std::iter::once(label.to_string()).chain(cells));
}

fn print(report: &Report) -> bool {
    let rtt = report.rtt_median();
    let rtt_us = rtt.as_secs_f64() * 1e6;
    let o = &report.outcomes;

    println!();
    println!(
        "wakeups: {WORKERS} workers, one key, {NODES} nodes, hold {} ms, window {:.1} s per scenario, tokio multi-thread (2 workers)",
        HOLD.as_millis(),
        report.duration.as_secs_f64()
    );
    println!("retry policy: {}", report.retry);
    println!(
        "acquire round trip (uncontended try_acquire, {} calls, half before and half after the scenarios): \
         p10 {:.1} / median {rtt_us:.1} / p90 {:.1} µs (medians before / after: {:.1} / {:.1} µs)",
        report.rtt.len(),
        quantile(&report.rtt, 0.1).as_secs_f64() * 1e6,
        quantile(&report.rtt, 0.9).as_secs_f64() * 1e6,
        report.rtt_before.as_secs_f64() * 1e6,
        report.rtt_after.as_secs_f64() * 1e6,
    );
    println!(
        "ideal = 1 / (mean hold + {rtt_us:.1} µs); at exactly 1 ms: {:.0} /s",
        1.0 / (HOLD + rtt).as_secs_f64()
    );
    println!();
    let mut table = Table::new(std::iter::once(Align::Left).chain(o.iter().map(|_| Align::Right)))
        .indent(2)
        .gap(1)
        .min_widths(std::iter::once(34).chain(o.iter().map(|_| 15)));
    row(
        &mut table,
        "wake-ups / lock",
        o.iter().map(|x| x.scenario.name.to_string()),
    );
    row(
        &mut table,
        "acquisitions in window",
        o.iter().map(|x| x.acquisitions.to_string()),
    );
    row(
        &mut table,
        "acquisitions/s",
        o.iter().map(|x| format!("{:.1}", x.per_sec())),
    );
    row(
        &mut table,
        "ideal /s",
        o.iter().map(|x| format!("{:.1}", x.ideal(rtt))),
    );
    row(
        &mut table,
        "ratio to ideal",
        o.iter().map(|x| format!("{:.3}", x.ratio(rtt))),
    );
    row(
        &mut table,
        "wait p50 (ms)",
        o.iter()
            .map(|x| format!("{:.2}", ms_us(quantile(&x.waits_us, 0.5)))),
    );
    row(
        &mut table,
        "wait p99 (ms)",
        o.iter()
            .map(|x| format!("{:.2}", ms_us(quantile(&x.waits_us, 0.99)))),
    );
    row(
        &mut table,
        "wait max (ms)",
        o.iter()
            .map(|x| format!("{:.2}", ms_us(x.waits_us.last().copied().unwrap_or(0)))),
    );
    row(
        &mut table,
        "mean hold (ms)",
        o.iter()
            .map(|x| format!("{:.4}", x.mean_hold.as_secs_f64() * 1e3)),
    );
    row(
        &mut table,
        "max hold (ms)",
        o.iter()
            .map(|x| format!("{:.3}", x.max_hold.as_secs_f64() * 1e3)),
    );
    row(
        &mut table,
        "handoff mean (µs)",
        o.iter().map(|x| format!("{:.1}", x.mean_handoff_us())),
    );
    row(
        &mut table,
        "handoff p50 / p99 (µs)",
        o.iter().map(|x| {
            format!(
                "{} / {}",
                quantile(&x.handoffs_us, 0.5),
                quantile(&x.handoffs_us, 0.99)
            )
        }),
    );
    row(
        &mut table,
        "attempts per acquisition",
        o.iter().map(|x| {
            format!(
                "{:.2}",
                x.counts.attempts as f64 / x.counts.acquired.max(1) as f64
            )
        }),
    );
    row(
        &mut table,
        "stats: contended",
        o.iter().map(|x| x.counts.contended.to_string()),
    );
    row(
        &mut table,
        "stats: woken",
        o.iter().map(|x| x.counts.woken.to_string()),
    );
    row(
        &mut table,
        "stats: wake_notices",
        o.iter().map(|x| x.counts.wake_notices.to_string()),
    );
    row(
        &mut table,
        "stats: quorum_not_reached",
        o.iter().map(|x| x.counts.quorum_not_reached.to_string()),
    );
    row(
        &mut table,
        "per worker min / max",
        o.iter().map(|x| {
            format!(
                "{} / {}",
                x.per_worker.iter().min().unwrap_or(&0),
                x.per_worker.iter().max().unwrap_or(&0)
            )
        }),
    );
    row(
        &mut table,
        "CPU cores: client/servers/other",
        o.iter().map(|x| {
            let (c, s, r) = x.cores();
            format!("{c:.2}/{s:.2}/{r:.2}")
        }),
    );
    row(
        &mut table,
        "CPU µs per acquisition (cl+srv)",
        o.iter().map(|x| {
            let t = (x.cpu.client + x.cpu.servers) as f64 / TICKS_PER_SEC;
            format!("{:.0}", t * 1e6 / x.acquisitions.max(1) as f64)
        }),
    );
    row(
        &mut table,
        "breaches / errors (acquire+node)",
        o.iter()
            .map(|x| format!("{} / {}", x.violations, x.errors + x.counts.node_errors)),
    );
    table.text(
        "  (handoff: from a holder's release call to the next holder's guard; ideal: the acquire round trip)",
    );
    if o.iter().any(|x| x.breakdown.is_some()) {
        table.text("handoff breakdown (--trace; µs, p50 / mean):");
        let mut part = |label: &str, f: &dyn Fn(&trace::Breakdown) -> &Vec<u32>| {
            row(
                &mut table,
                label,
                o.iter().map(|x| match &x.breakdown {
                    Some(b) => format!("{} / {:.0}", quantile(f(b), 0.5), mean(f(b))),
                    None => "-".into(),
                }),
            );
        };
        part("release call -> winning attempt", &|b| &b.wake_us);
        part("winning attempt", &|b| &b.attempt_us);
        part("attempt end -> guard in hand", &|b| &b.lag_us);
        row(
            &mut table,
            "losing attempts per cycle",
            o.iter().map(|x| match &x.breakdown {
                Some(b) => format!("{:.2}", b.lost_per_cycle),
                None => "-".into(),
            }),
        );
        row(
            &mut table,
            "  of which during the handoff",
            o.iter().map(|x| match &x.breakdown {
                Some(b) => format!("{:.2}", b.lost_in_handoff),
                None => "-".into(),
            }),
        );
        row(
            &mut table,
            "handoffs matched / not",
            o.iter().map(|x| match &x.breakdown {
                Some(b) => format!("{} / {}", b.matched, b.unmatched),
                None => "-".into(),
            }),
        );
    }
    print!("{table}");

    let headline = &o[0];
    let separate = &o[2];
    let breaches: u64 = o.iter().map(|x| x.violations).sum();
    let errors: u64 = o.iter().map(|x| x.errors).sum();
    let not_held: u64 = o.iter().map(|x| x.not_held_at_release).sum();
    let met = headline.ratio(rtt) >= TARGET_RATIO;
    let pass = met && breaches == 0 && errors == 0 && not_held == 0;
    let scenarios: Vec<serde_json::Value> = o
        .iter()
        .map(|x| {
            let (client, servers, other) = x.cores();
            serde_json::json!({
                "scenario": x.scenario.name,
                "wake_ups": x.scenario.wake_ups,
                "shared_lock": x.scenario.shared,
                "window_s": x.window_secs,
                "acquisitions": x.acquisitions,
                "per_s": x.per_sec(),
                "ideal_per_s": x.ideal(rtt),
                "ratio_to_ideal": x.ratio(rtt),
                "wait_p50_ms": ms_us(quantile(&x.waits_us, 0.5)),
                "wait_p99_ms": ms_us(quantile(&x.waits_us, 0.99)),
                "wait_max_ms": ms_us(x.waits_us.last().copied().unwrap_or(0)),
                "mean_hold_ms": x.mean_hold.as_secs_f64() * 1e3,
                "handoffs": x.handoffs.len(),
                "handoff_mean_us": x.mean_handoff_us(),
                "handoff_p50_us": quantile(&x.handoffs_us, 0.5),
                "handoff_p99_us": quantile(&x.handoffs_us, 0.99),
                "attempts": x.counts.attempts,
                "acquired": x.counts.acquired,
                "contended": x.counts.contended,
                "quorum_not_reached": x.counts.quorum_not_reached,
                "woken": x.counts.woken,
                "wake_notices": x.counts.wake_notices,
                "per_worker": x.per_worker,
                "cpu_cores_client": client,
                "cpu_cores_servers": servers,
                "cpu_cores_other": other,
                "exclusion_breaches": x.violations,
                "errors": x.errors,
                "node_errors": x.counts.node_errors,
            })
        })
        .collect();
    let json = serde_json::json!({
        "bench": "wakeups",
        "workers": WORKERS,
        "nodes": NODES,
        "hold_target_ms": HOLD.as_secs_f64() * 1e3,
        "runtime": "tokio multi-thread, 2 workers",
        "retry": report.retry,
        "acquire_rtt_median_us": rtt_us,
        "acquire_rtt_median_before_us": report.rtt_before.as_secs_f64() * 1e6,
        "acquire_rtt_median_after_us": report.rtt_after.as_secs_f64() * 1e6,
        "scenarios": scenarios,
        "target_ratio": TARGET_RATIO,
        "ratio_shared": headline.ratio(rtt),
        "ratio_separate": separate.ratio(rtt),
        "pass": pass,
    });
    println!();
    println!("json: {json}");
    println!();
    println!(
        "  {} wake-ups on, shared lock >= {TARGET_RATIO}x ideal: {:.3}",
        if met { "ok  " } else { "MISS" },
        headline.ratio(rtt)
    );
    println!(
        "  info wake-ups on, separate locks: {:.3}x ideal",
        separate.ratio(rtt)
    );
    if breaches > 0 {
        println!(
            "  MUTUAL EXCLUSION BROKEN: {breaches} acquisitions found the lock already held in this process"
        );
    }
    if errors > 0 || not_held > 0 {
        let first = o
            .iter()
            .find_map(|x| x.first_error.as_deref())
            .unwrap_or("-");
        println!(
            "  MISS acquire errors: {errors} (first: {first}); released after losing: {not_held}"
        );
    }
    println!("{}", if pass { "PASS" } else { "FAIL" });
    pass
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    if args.trace {
        trace::install()?;
    }
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
