//! The chaos mix: workers contend for a few lock names (mutexes, and
//! beside them read-write lock names and a semaphore) while three lanes
//! inject faults (node processes; links and clocks; clients), then the
//! run goes quiet, looks for keys left behind, and checks the history.

use std::io::{Read as _, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::book::{FaultBook, by_lane, progress};
use super::checker::{CheckReport, Floors};
use super::cluster::{Backing, Cluster, Role, Slot};
use super::faults::{FaultKind, Lane};
use super::history::{self, HistoryWriter, What};
use super::worker::{SEMAPHORE, WorkerOptions, fenced_key, read_counters, rw_names, unfenced_key};
use super::workers::Workers;
use super::{ChaosError, finish};
use crate::{ClockSkew, NetFault, Restart};
use quorumlock::LockConfig;

/// Settings of one mix.
#[derive(Clone, Debug)]
pub struct MixOptions {
    /// How long faults are injected (the run takes a few seconds more).
    pub duration: Duration,
    /// Lock nodes (at least 3).
    pub nodes: usize,
    /// Seed of every random choice (faults, targets, workers' choices).
    pub seed: u64,
    /// The fault kinds to inject.
    pub faults: Vec<FaultKind>,
    /// The run's directory (created).
    pub dir: PathBuf,
    /// The chaos binary, started as `bin worker …` for each worker.
    pub worker_bin: PathBuf,
    /// Worker processes.
    pub workers: usize,
    /// Tasks (concurrent holders) per worker.
    pub tasks: usize,
    /// Lock names with short holds (plus one with long holds).
    pub keys: usize,
    /// Read-write lock names (`rw0`, …).
    pub rw_names: usize,
    /// Read-write lock tasks per worker (0: no read-write workload).
    pub rw_tasks: usize,
    /// Semaphore tasks per worker (0: no semaphore workload).
    pub permit_tasks: usize,
    /// The semaphore's permits K.
    pub permits: u32,
    /// The locks' TTL.
    pub ttl: Duration,
    /// The per-node call timeout.
    pub node_timeout: Duration,
    /// The clock-drift allowance (fraction of the TTL).
    pub drift_factor: f64,
    /// Coverage floors below which the run is invalid.
    pub floors: Floors,
    /// Print progress to standard error while it runs.
    pub progress: bool,
    /// Run against servers someone else started instead of starting nodes.
    pub external: Option<External>,
}

/// Servers the run did not start (e.g. `testbed/docker-compose.yml`).
#[derive(Clone, Debug)]
pub struct External {
    /// The lock nodes' URLs; the run puts a proxy in front of each.
    pub nodes: Vec<String>,
    /// The URL of the server for the protected counters.
    pub resource: String,
}

impl External {
    /// The fault kinds that apply to servers the run cannot signal: link
    /// faults (through the proxies) and client faults.
    pub fn applicable(kind: FaultKind) -> bool {
        matches!(
            kind,
            FaultKind::NetDelay
                | FaultKind::NetLoss
                | FaultKind::NetPartition
                | FaultKind::NetReset
                | FaultKind::ClientPause
                | FaultKind::ClientCrash
        )
    }
}

impl MixOptions {
    /// The defaults of `testbed/run chaos`, writing to `dir`.
    pub fn new(dir: PathBuf, worker_bin: PathBuf) -> MixOptions {
        MixOptions {
            duration: Duration::from_secs(120),
            nodes: 5,
            seed: 1,
            faults: FaultKind::ALL.to_vec(),
            dir,
            worker_bin,
            workers: 6,
            tasks: 3,
            keys: 4,
            rw_names: 2,
            rw_tasks: 1,
            permit_tasks: 1,
            permits: 3,
            ttl: Duration::from_millis(1_000),
            node_timeout: Duration::from_millis(100),
            drift_factor: 0.02,
            floors: Floors::none(),
            progress: true,
            external: None,
        }
    }

    /// The clock-drift allowance the locks subtract from their validity.
    pub fn drift(&self) -> Duration {
        self.ttl.mul_f64(self.drift_factor) + Duration::from_millis(2)
    }
}

/// What a mix produced.
#[derive(Debug)]
pub struct Outcome {
    /// The run's directory (history, report, timeline).
    pub dir: PathBuf,
    /// The checker's report.
    pub report: CheckReport,
}

/// Shared by the lanes of one run.
struct Ctx<'a> {
    options: &'a MixOptions,
    cluster: &'a Cluster,
    workers: &'a Workers,
    end: Instant,
    book: FaultBook,
}

/// Runs the mix and checks it: on nodes it starts, or on
/// [`MixOptions::external`] servers.
pub fn run(options: &MixOptions) -> Result<Outcome, ChaosError> {
    if let Some(external) = &options.external {
        let nodes = external.nodes.len();
        if let Some(kind) = options.faults.iter().find(|k| !External::applicable(**k)) {
            return Err(ChaosError::Options(format!(
                "--faults {kind}: against external servers only link and client faults apply (net_delay, net_loss, net_partition, net_reset, client_pause, client_crash)"
            )));
        }
        return run_on(&MixOptions {
            nodes,
            ..options.clone()
        });
    }
    run_on(options)
}

fn run_on(options: &MixOptions) -> Result<Outcome, ChaosError> {
    if options.nodes < 3 {
        return Err(ChaosError::Options(format!(
            "--nodes {}: the mix needs at least 3 nodes",
            options.nodes
        )));
    }
    if options.permit_tasks > 0
        && !(1..=quorumlock::MultiSemaphore::MAX_PERMITS).contains(&options.permits)
    {
        return Err(ChaosError::Options(format!(
            "--permits {}: a semaphore has 1 to {} permits",
            options.permits,
            quorumlock::MultiSemaphore::MAX_PERMITS
        )));
    }
    std::fs::create_dir_all(&options.dir).map_err(ChaosError::io(format!(
        "creating {}",
        options.dir.display()
    )))?;
    if options.external.is_none() {
        // Chains a killed run left behind (the failover's link cut).
        crate::sweep_stale_chains()?;
    }
    let dir =
        std::path::absolute(&options.dir).map_err(ChaosError::io("resolving the run directory"))?;
    let options = &MixOptions {
        dir,
        ..options.clone()
    };
    let say = |text: &str| {
        if options.progress {
            eprintln!("{text}");
        }
    };
    say(&format!(
        "chaos: {} nodes, {} workers × {} tasks, {} names + 1 long, TTL {:?}, seed {}, {:?} of faults",
        options.nodes,
        options.workers,
        options.tasks,
        options.keys,
        options.ttl,
        options.seed,
        options.duration
    ));
    say(&format!(
        "chaos: beside them, per worker {} read-write task(s) on {} name(s) and {} task(s) on a semaphore of {} permits",
        options.rw_tasks, options.rw_names, options.permit_tasks, options.permits
    ));
    let cluster = match &options.external {
        Some(external) => Cluster::external(&external.nodes, &external.resource)?,
        None => Cluster::start(options.nodes)?,
    };
    let keys: Vec<String> = (0..options.keys).map(|i| format!("k{i}")).collect();
    let rw_keys = if options.rw_tasks > 0 {
        rw_names(options.rw_names)
    } else {
        Vec::new()
    };
    let semaphore = (options.permit_tasks > 0).then(|| (SEMAPHORE.to_string(), options.permits));
    // The names with counters: the mutexes', and the read-write locks'
    // (their writers update them).
    let mut names = keys.clone();
    names.push("job".to_string());
    names.extend(rw_keys.iter().cloned());
    reset_counters(&mut cluster.resource.connection()?, &names)?;
    let probed = probed_names(&names[..keys.len() + 1], &rw_keys, semaphore.as_ref());
    let chaos_history = options.dir.join("history-chaos.jsonl");
    let log = HistoryWriter::create(&chaos_history, "chaos")
        .map_err(ChaosError::io("creating the chaos history"))?;
    let template = WorkerOptions {
        id: String::new(),
        nodes: cluster.urls(),
        resource: cluster.resource.url(),
        keys: keys.clone(),
        long_key: Some("job".to_string()),
        tasks: options.tasks,
        ttl: options.ttl,
        node_timeout: options.node_timeout,
        drift_factor: options.drift_factor,
        history: PathBuf::new(),
        seed: options.seed,
        pause_before_write: None,
        holds_per_task: None,
        rw_keys,
        rw_tasks: options.rw_tasks,
        semaphore,
        permit_tasks: options.permit_tasks,
    };
    // The workers keep the default quarantine; the checker judges votes by it.
    let quarantine = LockConfig::builder()
        .node("redis://127.0.0.1:1")
        .ttl(options.ttl)
        .build()
        .map_err(|e| ChaosError::Options(format!("the workers' settings: {e}")))?
        .quarantine();
    let _ = log.log(What::Settings {
        quarantine_ms: u64::try_from(quarantine.as_millis()).unwrap_or(u64::MAX),
    });
    let workers = Workers::new(&options.worker_bin, &options.dir, template);
    for _ in 0..options.workers {
        workers.spawn()?;
    }
    // Let the workers connect and settle before the first fault.
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_secs(10)
        && count_won(&workers.histories()) < (options.workers * 20) as u64
    {
        thread::sleep(Duration::from_millis(50));
    }
    let _ = log.log(What::Note {
        text: "faults start".into(),
    });
    let ctx = Ctx {
        options,
        cluster: &cluster,
        workers: &workers,
        end: Instant::now() + options.duration,
        book: FaultBook::new(log.clone()),
    };
    thread::scope(|scope| {
        for (kinds, seed) in by_lane(&options.faults, FaultKind::lane, options.seed) {
            let ctx = &ctx;
            scope.spawn(move || run_lane(ctx, kinds, StdRng::seed_from_u64(seed)));
        }
        if options.progress {
            scope.spawn(|| progress(&ctx.book, &workers, ctx.end, options.duration));
        }
        scope.spawn(|| probe(&cluster, &log, ctx.end, &probed));
    });
    let _ = log.log(What::Note {
        text: "faults end".into(),
    });
    say("chaos: faults over; healing every node and stopping the workers");
    cluster.heal_all()?;
    let killed = workers.stop_all(options.ttl * 3 + Duration::from_secs(5));
    if !killed.is_empty() {
        ctx.problem(format!("workers that did not stop in time: {killed:?}"));
    }
    // Quiet: every key a holder did not release must expire by its TTL.
    let quiet = options.ttl + options.ttl / 2 + Duration::from_millis(500);
    thread::sleep(quiet);
    let keys_left = cluster.lock_keys()?;
    let (fenced, unfenced) = read_counters(&mut cluster.resource.connection()?, &names)
        .map_err(crate::TestbedError::from)?;
    let _ = log.log(What::Final {
        fenced,
        unfenced,
        keys_left,
    });
    ctx.book.note_problems();
    let mut inputs = workers.histories();
    inputs.push(chaos_history);
    drop(cluster);
    let report = finish(&options.dir, &inputs, &options.floors)?;
    Ok(Outcome {
        dir: options.dir.clone(),
        report,
    })
}

/// Deletes the counters a previous run left on a reused resource server,
/// so that the final values count this run's writes only.
pub(super) fn reset_counters(
    con: &mut redis::Connection,
    names: &[String],
) -> Result<(), ChaosError> {
    for name in names {
        redis::cmd("DEL")
            .arg(fenced_key(name))
            .arg(unfenced_key(name))
            .query::<()>(con)
            .map_err(crate::TestbedError::from)?;
    }
    Ok(())
}

/// Counts `won` events in the workers' histories (for progress).
pub(super) fn count_won(paths: &[PathBuf]) -> u64 {
    paths.iter().map(|p| count_in(p, 0).0).sum()
}

/// Counts `"ev":"won"` in `path` from byte `from`; returns the count and
/// the new end.
pub(super) fn count_in(path: &Path, from: u64) -> (u64, u64) {
    let Ok(mut file) = std::fs::File::open(path) else {
        return (0, from);
    };
    if file.seek(SeekFrom::Start(from)).is_err() {
        return (0, from);
    }
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() {
        return (0, from);
    }
    // Only whole lines count; a torn last line is read next time.
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    let n = text[..whole].matches("\"ev\":\"won\"").count() as u64;
    (n, from + whole as u64)
}

/// The lock names the prober reads: the mutexes' (`mutexes`), and every
/// slot of the read-write lock names (`quorumlock:rw:<name>:<i>`) and of
/// the semaphore (`quorumlock:permit:<name>:<i>`, i < K). A slot is an
/// ordinary lock name: a key left on one is judged as any lock key.
pub fn probed_names(
    mutexes: &[String],
    rw_keys: &[String],
    semaphore: Option<&(String, u32)>,
) -> Vec<String> {
    let mut names = mutexes.to_vec();
    for name in rw_keys {
        names.extend(
            (0..quorumlock::MultiRwLock::READER_SLOTS)
                .map(|i| quorumlock::MultiRwLock::slot_name(name, i)),
        );
    }
    if let Some((name, permits)) = semaphore {
        names.extend((0..*permits).map(|i| quorumlock::MultiSemaphore::slot_name(name, i)));
    }
    names
}

/// Reads every lock name on every node that no fault lane holds, a few
/// times a second until `end`, and logs each key found
/// ([`What::Probe`]): the checker judges each against the release or
/// rollback that should have removed it (`checker::released`).
fn probe(cluster: &Cluster, log: &HistoryWriter, end: Instant, names: &[String]) {
    while Instant::now() < end {
        for i in 0..cluster.slots.len() {
            // A node a lane is faulting is not judged anyway.
            let Some(slot) = cluster.try_slot(i) else {
                continue;
            };
            let Ok(mut conn) = slot.backing.connection() else {
                continue;
            };
            drop(slot);
            // Stamped before the read is sent: what it finds was there at
            // some instant after the stamp. A stamp taken at the reply (or
            // at logging) would be late by however long this thread was
            // kept off the CPU, and a loaded machine keeps it off for
            // hundreds of ms: a key read before its release landed would
            // be judged as left after it. Every name is read in one call,
            // at one instant.
            let sent = history::now();
            let Ok(found) = crate::lock_key::probe(&mut conn, names) else {
                continue;
            };
            for (name, owner, pttl_ms) in found {
                let _ = log.log_at(
                    sent,
                    What::Probe {
                        node: i,
                        key: name,
                        owner,
                        pttl_ms,
                    },
                );
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
}

impl Ctx<'_> {
    fn running(&self) -> bool {
        Instant::now() < self.end
    }

    fn problem(&self, text: String) {
        self.book.problem(text);
    }

    /// Logs a fault's start; returns its id.
    fn start(&self, kind: FaultKind, target: &str, detail: String) -> u32 {
        self.book.start(kind.name(), target, detail)
    }

    fn end(&self, fault: u32) {
        self.book.end(fault);
    }

    /// Locks a free slot whose role `fits`, trying for a bounded while.
    fn free_slot(
        &self,
        rng: &mut StdRng,
        fits: impl Fn(Role) -> bool,
    ) -> Option<std::sync::MutexGuard<'_, Slot>> {
        let mut candidates: Vec<usize> = (0..self.cluster.slots.len()).collect();
        for _ in 0..100 {
            candidates.shuffle(rng);
            for &i in &candidates {
                if let Some(slot) = self.cluster.try_slot(i)
                    && fits(slot.role)
                {
                    return Some(slot);
                }
            }
            if !self.running() {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

fn millis(rng: &mut StdRng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..=hi))
}

fn run_lane(ctx: &Ctx<'_>, kinds: Vec<FaultKind>, mut rng: StdRng) {
    let mut cycle: Vec<FaultKind> = Vec::new();
    while ctx.running() {
        if cycle.is_empty() {
            cycle = kinds.clone();
            cycle.shuffle(&mut rng);
        }
        let Some(kind) = cycle.pop() else { break };
        if let Err(e) = inject(ctx, kind, &mut rng) {
            ctx.problem(format!("{kind}: {e}"));
        }
        let gap = match kind.lane() {
            Lane::Client => millis(&mut rng, 800, 2_000),
            Lane::Node | Lane::Link => millis(&mut rng, 200, 700),
        };
        thread::sleep(gap);
    }
}

fn inject(ctx: &Ctx<'_>, kind: FaultKind, rng: &mut StdRng) -> Result<(), ChaosError> {
    let ttl = ctx.options.ttl;
    match kind {
        FaultKind::ClientPause => {
            let Some(id) = ctx.workers.pick(rng) else {
                return Ok(());
            };
            let pause = ttl.mul_f64(rng.random_range(1.5..2.5));
            let fault = ctx.start(kind, &id, format!("SIGSTOP for {pause:?}"));
            let result = ctx.workers.pause(&id);
            thread::sleep(pause);
            let resumed = ctx.workers.resume(&id);
            ctx.end(fault);
            result.and(resumed)
        }
        FaultKind::ClientCrash => {
            let Some(id) = ctx.workers.pick(rng) else {
                return Ok(());
            };
            let fault = ctx.start(kind, &id, "SIGKILL, a new worker started".into());
            let killed = ctx.workers.kill(&id);
            let spawned = ctx.workers.spawn();
            ctx.end(fault);
            killed.and(spawned.map(drop))
        }
        _ => {
            let fits = |role: Role| match kind {
                FaultKind::CrashRestartAof => role == Role::Aof,
                FaultKind::CrashRestartDelayed | FaultKind::CrashRestartEmpty => {
                    role == Role::Volatile
                }
                FaultKind::Failover => role == Role::Replicated,
                FaultKind::NetDelay
                | FaultKind::NetLoss
                | FaultKind::NetPartition
                | FaultKind::NetReset => true,
                _ => role != Role::External,
            };
            let Some(mut slot) = ctx.free_slot(rng, fits) else {
                return Ok(());
            };
            inject_node(ctx, kind, &mut slot, rng)
        }
    }
}

fn inject_node(
    ctx: &Ctx<'_>,
    kind: FaultKind,
    slot: &mut Slot,
    rng: &mut StdRng,
) -> Result<(), ChaosError> {
    let ttl = ctx.options.ttl;
    let i = slot.index;
    let target = format!("n{i}");
    let proxy = &ctx.cluster.proxies[i];
    match kind {
        FaultKind::NodePause => {
            let d = millis(rng, 500, 2_000);
            let fault = ctx.start(kind, &target, format!("SIGSTOP for {d:?}"));
            let node = local(slot)?;
            let paused = node.pause();
            thread::sleep(d);
            let resumed = node.resume();
            ctx.end(fault);
            paused.and(resumed)?;
        }
        FaultKind::NodeStall => {
            let d = millis(rng, 300, 1_500);
            let fault = ctx.start(kind, &target, format!("CLIENT PAUSE {} ALL", d.as_millis()));
            let mut con = local(slot)?.connection()?;
            let paused: Result<(), _> = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(d.as_millis() as u64)
                .arg("ALL")
                .query(&mut con);
            thread::sleep(d);
            ctx.end(fault);
            paused.map_err(crate::TestbedError::from)?;
        }
        FaultKind::CrashRestartAof => {
            let fault = ctx.start(
                kind,
                &target,
                "SIGKILL, restart at once with its AOF (appendfsync always)".into(),
            );
            let restarted = local(slot)?.restart(Restart::immediate());
            ctx.end(fault);
            restarted?;
        }
        FaultKind::CrashRestartDelayed => {
            let down = ttl + ttl / 2;
            let fault = ctx.start(
                kind,
                &target,
                format!("SIGKILL, restart empty after {down:?} (TTL {ttl:?})"),
            );
            let restarted = local(slot)?.restart(Restart::after(down).wiping());
            ctx.end(fault);
            restarted?;
        }
        FaultKind::CrashRestartEmpty => {
            let fault = ctx.start(
                kind,
                &target,
                "SIGKILL, restart empty at once (quarantined for the TTL)".into(),
            );
            let restarted = local(slot)?.restart(Restart::immediate().wiping());
            ctx.end(fault);
            restarted?;
        }
        FaultKind::Failover => {
            let Backing::Pair(pair) = &mut slot.backing else {
                return Ok(());
            };
            let lag = millis(rng, 300, 800);
            // The fault starts once the link is cut, not before: putting
            // the rule in takes tens of ms, and a write sent meanwhile still
            // reaches the replica (one 26 ms after the logged start came
            // back with the promoted replica, and the checker, which
            // excuses a failover only for calls begun before it, judged its
            // key left after the release).
            pair.cut_link()?;
            let fault = ctx.start(
                kind,
                &target,
                format!("replication cut, {lag:?} of writes on the master only, master killed, replica promoted"),
            );
            let result = (|| {
                thread::sleep(lag);
                let promoted = pair.fail_over()?;
                proxy.set_upstream(promoted);
                Ok::<_, crate::TestbedError>(())
            })();
            ctx.end(fault);
            result?;
            // Outside the fault: the dead master comes back empty as the
            // new replica, ready for the next failover (`fail_over` already
            // removed the link cut).
            pair.rejoin()?;
        }
        FaultKind::NetDelay => {
            let latency = millis(rng, 5, 40);
            let jitter = latency / 2;
            let d = millis(rng, 1_000, 3_000);
            let fault = ctx.start(
                kind,
                &target,
                format!("{latency:?} ± {jitter:?} each way for {d:?}"),
            );
            hold_net_fault(ctx, fault, proxy, NetFault::Delay { latency, jitter }, d)?;
        }
        FaultKind::NetLoss => {
            let probability = rng.random_range(0.05..0.3);
            let stall = millis(rng, 30, 200);
            let d = millis(rng, 1_000, 3_000);
            let fault = ctx.start(
                kind,
                &target,
                format!(
                    "{:.0}% of chunks retransmitted after {stall:?}, for {d:?}",
                    probability * 100.0
                ),
            );
            hold_net_fault(ctx, fault, proxy, NetFault::Loss { probability, stall }, d)?;
        }
        FaultKind::NetPartition => {
            let d = millis(rng, 500, 2_000);
            let fault = ctx.start(kind, &target, format!("nothing passes for {d:?}"));
            hold_net_fault(ctx, fault, proxy, NetFault::Blackhole, d)?;
        }
        FaultKind::NetReset => {
            let d = millis(rng, 200, 1_000);
            let fault = ctx.start(kind, &target, format!("connections reset for {d:?}"));
            hold_net_fault(ctx, fault, proxy, NetFault::Reset, d)?;
        }
        FaultKind::ClockFast => {
            // Within the allowance: over one TTL the node gains less than
            // the drift the locks subtract (see `fast_rate_limit`).
            let limit = fast_rate_limit(ctx.options);
            let rate = 1.0 + rng.random_range(0.25..1.0) * (limit - 1.0);
            let d = millis(rng, 2_000, 4_000);
            let fault = ctx.start(kind, &target, format!("wall clock × {rate:.4} for {d:?}"));
            let node = local(slot)?;
            node.set_clock(ClockSkew { rate, offset_ms: 0 })?;
            thread::sleep(d);
            node.set_clock(ClockSkew::NORMAL)?;
            ctx.end(fault);
        }
        FaultKind::ClockStep => {
            let limit = step_limit(ctx.options);
            let step = rng.random_range(1..=limit.as_millis() as i64);
            let d = millis(rng, 1_500, 3_000);
            let fault = ctx.start(
                kind,
                &target,
                format!("wall clock +{step} ms for {d:?}, then back"),
            );
            let node = local(slot)?;
            node.set_clock(ClockSkew {
                rate: 1.0,
                offset_ms: step,
            })?;
            thread::sleep(d);
            node.set_clock(ClockSkew::NORMAL)?;
            ctx.end(fault);
        }
        FaultKind::ClientPause | FaultKind::ClientCrash => {}
    }
    Ok(())
}

/// The local server of a slot, for the faults that need its process.
fn local(slot: &mut Slot) -> Result<&mut crate::RedisNode, ChaosError> {
    let index = slot.index;
    slot.backing.serving_mut().ok_or_else(|| {
        ChaosError::Options(format!(
            "n{index} is external: only its link can be faulted"
        ))
    })
}

/// Applies `net` on the proxy for `d`, then lifts it and ends the fault
/// (also when applying it failed).
fn hold_net_fault(
    ctx: &Ctx<'_>,
    fault: u32,
    proxy: &crate::Proxy,
    net: NetFault,
    d: Duration,
) -> Result<(), ChaosError> {
    let applied = proxy.set_fault(net);
    if applied.is_ok() {
        thread::sleep(d);
    }
    let lifted = proxy.set_fault(NetFault::None);
    ctx.end(fault);
    applied.and(lifted)?;
    Ok(())
}

/// The fastest node clock the mix uses: a key then loses at most 60 % of
/// the drift allowance over one TTL (`ttl × (1 − 1/rate)`), leaving the
/// rest for a step that may follow on the same node.
pub fn fast_rate_limit(options: &MixOptions) -> f64 {
    let ttl = options.ttl.as_secs_f64();
    let budget = options.drift().as_secs_f64() * 0.6;
    1.0 / (1.0 - budget / ttl)
}

/// The largest forward step the mix uses: 35 % of the drift allowance.
pub fn step_limit(options: &MixOptions) -> Duration {
    options.drift().mul_f64(0.35).max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_faults_stay_within_the_drift_allowance() {
        let options = MixOptions::new(PathBuf::new(), PathBuf::new());
        let ttl = options.ttl.as_secs_f64();
        let rate = fast_rate_limit(&options);
        let lost_to_rate = ttl * (1.0 - 1.0 / rate);
        let lost_to_step = step_limit(&options).as_secs_f64();
        assert!(rate > 1.0);
        assert!(
            lost_to_rate + lost_to_step < options.drift().as_secs_f64(),
            "{lost_to_rate} + {lost_to_step} vs {:?}",
            options.drift()
        );
    }
}
