//! Negative controls: deterministic schedules, each under 10 s, that break
//! one of the algorithm's assumptions on purpose. The checker must report
//! at least one violation for every one of them: a checker that cannot
//! fail proves nothing.
//!
//! | control | what it breaks | what the checker must see |
//! |---|---|---|
//! | `single_node_failover` | one node only: its replica never saw the lock | overlap |
//! | `immediate_restart` | a node restarts empty at once, and two quorums meet on it | overlap (and the vote in quarantine that caused it) |
//! | `fast_clocks` | a majority's clocks run 4× fast: keys expire long before the validity ends | overlap |
//! | `client_pause` | a holder pauses past its validity between its lock check and its writes | unfenced lost update (the fenced write is refused) |
//! | `lost_release` | a release that never reaches one node (the key is put back there as the release skipped it) | key left after release |
//! | `extra_permit` | a semaphore client configured with K + 1 permits while the others (and the checker) use K | more than K holders |
//! | `partial_writer` | a "writer" that takes only half of a read-write lock's reader slots (a plain multi-name lock, which `MultiLock` accepts on slot names) | writer overlaps a reader |

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use quorumlock::{
    LockConfig, LockGuard, MultiLock, MultiRwLock, MultiSemaphore, Owner, Quorum, Wait,
};

use super::checker::{CheckReport, Floors, ViolationKind};
use super::history::{HistoryWriter, Mode, What};
use super::hold_log::{Held, HoldLog};
use super::worker::{WorkerOptions, read_counters};
use super::workers::Workers;
use super::{ChaosError, finish};
use crate::{ClockSkew, NodeOptions, Proxy, ReplicaPair, Restart, Testbed, redis_server_binary};

/// How long B works under a lock it should not have got (the overlap's
/// length in the timeline).
const WORK: Duration = Duration::from_millis(300);

/// One negative control.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Control {
    /// A one-node lock whose master fails over to a replica that never saw
    /// the lock.
    SingleNodeFailover,
    /// Three nodes without persistence; the holder has exactly two, one of
    /// them restarts empty at once, and the next client wins it and the
    /// third.
    ImmediateRestart,
    /// Three nodes; two clocks run 4× fast under a held lock.
    FastClocks,
    /// A worker process stops itself between its lock check and its writes
    /// and is continued after its validity.
    ClientPause,
    /// Three nodes; the holder's release misses one of them (the key is
    /// put back there as it was), and the run's prober finds it.
    LostRelease,
    /// Three nodes; of three clients of a semaphore with K = 2, one takes
    /// its permit with K + 1 (a misconfigured client), and all three hold.
    ExtraPermit,
    /// Three nodes; two readers of a read-write lock hold, and a "writer"
    /// takes half of the reader slots (those the readers do not hold) as a
    /// plain multi-name lock.
    PartialWriter,
}

impl Control {
    /// Every control.
    pub const ALL: [Control; 7] = [
        Control::SingleNodeFailover,
        Control::ImmediateRestart,
        Control::FastClocks,
        Control::ClientPause,
        Control::LostRelease,
        Control::ExtraPermit,
        Control::PartialWriter,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Control::SingleNodeFailover => "single_node_failover",
            Control::ImmediateRestart => "immediate_restart",
            Control::FastClocks => "fast_clocks",
            Control::ClientPause => "client_pause",
            Control::LostRelease => "lost_release",
            Control::ExtraPermit => "extra_permit",
            Control::PartialWriter => "partial_writer",
        }
    }

    /// The violation kind that catches it.
    pub fn expected_violation(self) -> ViolationKind {
        match self {
            Control::ClientPause => ViolationKind::UnfencedLostUpdate,
            Control::LostRelease => ViolationKind::KeyLeftAfterRelease,
            Control::ExtraPermit => ViolationKind::MoreThanKHolders,
            Control::PartialWriter => ViolationKind::WriterOverlap,
            _ => ViolationKind::Overlap,
        }
    }
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Control {
    type Err = ChaosError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Control::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                ChaosError::Options(format!(
                    "unknown control {s:?}; the controls are: {}",
                    Control::ALL.map(Control::name).join(", ")
                ))
            })
    }
}

/// How many times a control's schedule runs before a step that did not go
/// as planned is reported.
const SCHEDULE_TRIES: u32 = 3;

/// Runs `control`'s schedule once in `dir`: the histories to check and the
/// floors to check them against.
fn schedule_once(
    control: Control,
    dir: &Path,
    worker_bin: &Path,
) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ChaosError::io("starting a Tokio runtime"))?;
    match control {
        Control::SingleNodeFailover => runtime.block_on(single_node_failover(dir)),
        Control::ImmediateRestart => runtime.block_on(immediate_restart(dir)),
        Control::FastClocks => runtime.block_on(fast_clocks(dir)),
        Control::ClientPause => client_pause(dir, worker_bin),
        Control::LostRelease => runtime.block_on(lost_release(dir)),
        Control::ExtraPermit => runtime.block_on(extra_permit(dir)),
        Control::PartialWriter => runtime.block_on(partial_writer(dir)),
    }
}

/// What a control produced.
#[derive(Debug)]
pub struct ControlOutcome {
    /// Which control.
    pub control: Control,
    /// Its directory (history, report, timeline).
    pub dir: PathBuf,
    /// The checker's report on its history.
    pub report: CheckReport,
    /// Whether the checker reported the violation the control must cause.
    pub caught: bool,
    /// How long the schedule took.
    pub took: Duration,
}

/// Runs `control` in `dir` (created); `worker_bin` is the chaos binary
/// (the client-pause control starts worker processes).
pub fn run(control: Control, dir: &Path, worker_bin: &Path) -> Result<ControlOutcome, ChaosError> {
    std::fs::create_dir_all(dir).map_err(ChaosError::io(format!("creating {}", dir.display())))?;
    // Servers run in subdirectories and get absolute paths.
    let dir = &std::path::absolute(dir).map_err(ChaosError::io("resolving the run directory"))?;
    // A schedule that could not set up its situation (a step that did not
    // go as planned on a busy machine) proves nothing either way: it runs
    // again, in a clean directory, a bounded number of times.
    let mut tries = 1;
    let (started, inputs, floors) = loop {
        let started = Instant::now();
        match schedule_once(control, dir, worker_bin) {
            Ok((inputs, floors)) => break (started, inputs, floors),
            Err(ChaosError::Schedule { step, .. }) if tries < SCHEDULE_TRIES => {
                eprintln!(
                    "control {control}: {step}; running it again ({tries} of {SCHEDULE_TRIES})"
                );
                tries += 1;
                std::fs::remove_dir_all(dir)
                    .and_then(|()| std::fs::create_dir_all(dir))
                    .map_err(ChaosError::io(format!("emptying {}", dir.display())))?;
            }
            Err(e) => return Err(e),
        }
    };
    let took = started.elapsed();
    let report = finish(dir, &inputs, &floors)?;
    let caught = report.count(control.expected_violation()) > 0;
    Ok(ControlOutcome {
        control,
        dir: dir.to_path_buf(),
        report,
        caught,
        took,
    })
}

/// A client of a control: one `MultiLock` (and a read-write lock and a
/// semaphore service beside it) logging to its own history.
struct Client {
    lock: MultiLock,
    rw: MultiRwLock,
    log: HistoryWriter,
    name: &'static str,
    holds: u32,
}

impl Client {
    async fn new(
        dir: &Path,
        name: &'static str,
        nodes: Vec<String>,
        ttl: Duration,
    ) -> Result<Client, ChaosError> {
        // The quarantine off: it is one of the assumptions the controls
        // break on purpose (with it, an immediate restart or a single
        // node's failover casts no vote for a TTL, and nothing overlaps).
        let config = LockConfig::builder()
            .nodes(nodes)
            .quorum(Quorum::Majority)
            .ttl(ttl)
            .node_timeout(Duration::from_millis(200))
            .quarantine(Duration::ZERO)
            .build()
            .map_err(|e| ChaosError::Options(e.to_string()))?;
        let lock = MultiLock::new(config.clone());
        let _ = lock.warm_up().await;
        let rw = MultiRwLock::new(config);
        let log = HistoryWriter::create(&dir.join(format!("history-{name}.jsonl")), name)
            .map_err(ChaosError::io("creating a control history"))?;
        Ok(Client {
            lock,
            rw,
            log,
            name,
            holds: 0,
        })
    }

    fn path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("history-{name}.jsonl"))
    }

    /// Starts the next acquire call of `key` in the history (`owner`: the
    /// one its attempts write, if it names one).
    fn attempt(&mut self, key: &str, owner: Option<&Owner>) -> HoldLog {
        self.holds += 1;
        let hold = format!("{}-{}", self.name, self.holds);
        HoldLog::attempt(&self.log, key, &hold, owner)
    }

    /// Logs the win of `held` (as `mode`) and its fencing token, or the
    /// failure.
    async fn won(
        rec: HoldLog,
        held: Result<Held, quorumlock::Error>,
        mode: Option<Mode>,
    ) -> Option<(Held, HoldLog)> {
        match held {
            Ok(held) => {
                rec.won(&held, mode);
                rec.token(&held).await;
                Some((held, rec))
            }
            Err(e) => {
                rec.failed(&e);
                None
            }
        }
    }

    /// Acquires `key` (waiting up to `wait`), logging the attempt, the win
    /// (with the nodes held) and the fencing token.
    async fn acquire(&mut self, key: &str, wait: Duration) -> Option<(LockGuard, HoldLog)> {
        let owner = Owner::new();
        let rec = self.attempt(key, Some(&owner));
        let held = self.lock.acquire_as(&owner, key, Wait::up_to(wait)).await;
        match Client::won(rec, held.map(Held::Lock), None).await {
            Some((Held::Lock(guard), rec)) => Some((guard, rec)),
            _ => None,
        }
    }

    /// One of `taken` permits of semaphore `name`, logged as one of
    /// `believed` (what the holder thinks K is).
    async fn permit(
        &mut self,
        name: &str,
        taken: u32,
        believed: u32,
        wait: Duration,
    ) -> Option<(Held, HoldLog)> {
        let rec = self.attempt(name, None);
        let semaphore = MultiSemaphore::over(&self.lock);
        let held = semaphore.acquire(name, taken, Wait::up_to(wait)).await;
        let held = held.map(|permit| Held::Permit(permit, believed));
        let mode = held.as_ref().ok().and_then(Held::mode);
        Client::won(rec, held, mode).await
    }

    /// The read side of read-write lock `name`.
    async fn read(&mut self, name: &str, wait: Duration) -> Option<(Held, HoldLog)> {
        let rec = self.attempt(name, None);
        let held = self.rw.read(name, Wait::up_to(wait)).await.map(Held::Read);
        let mode = held.as_ref().ok().and_then(Held::mode);
        Client::won(rec, held, mode).await
    }

    /// A broken writer of read-write lock `name`: a plain multi-name lock
    /// on the reader slots `slots` only, logged as the write side.
    async fn partial_write(&mut self, name: &str, slots: &[u32]) -> Option<(Held, HoldLog)> {
        let rec = self.attempt(name, None);
        let names: Vec<String> = slots
            .iter()
            .map(|&i| quorumlock::MultiRwLock::slot_name(name, i))
            .collect();
        let held = self.lock.try_acquire_all(&names).await.map(Held::Lock);
        Client::won(rec, held, Some(Mode::Write)).await
    }

    async fn release(&self, guard: LockGuard, rec: &HoldLog) {
        self.release_held(Held::Lock(guard), rec).await;
    }

    async fn release_held(&self, held: Held, rec: &HoldLog) {
        rec.release(held, None).await;
    }
}

fn schedule(control: Control, step: impl Into<String>) -> ChaosError {
    ChaosError::Schedule {
        control: control.name().to_string(),
        step: step.into(),
    }
}

/// The injector's own history of a control (fault bands, notes).
fn injector(dir: &Path) -> Result<(HistoryWriter, PathBuf), ChaosError> {
    let path = dir.join("history-chaos.jsonl");
    let log =
        HistoryWriter::create(&path, "chaos").map_err(ChaosError::io("creating a history"))?;
    Ok((log, path))
}

fn fault_start(log: &HistoryWriter, fault: u32, kind: &str, target: &str, detail: &str) {
    let _ = log.log(What::FaultStart {
        fault,
        kind: kind.into(),
        target: target.into(),
        detail: detail.into(),
    });
}

/// The end of an in-process schedule: B, if it won, works a moment while A
/// still believes it holds the lock (so an overlap shows in the timeline);
/// both release; the history files to check, with no floors.
async fn wind_up(
    a: &Client,
    b: &Client,
    (guard_a, hold_a): (LockGuard, HoldLog),
    won_b: Option<(LockGuard, HoldLog)>,
    log: &HistoryWriter,
    dir: &Path,
    chaos: PathBuf,
) -> (Vec<PathBuf>, Floors) {
    if let Some((guard_b, hold_b)) = won_b {
        tokio::time::sleep(WORK).await;
        b.release(guard_b, &hold_b).await;
    }
    a.release(guard_a, &hold_a).await;
    let _ = log.log(What::Final {
        fenced: Vec::new(),
        unfenced: Vec::new(),
        keys_left: Vec::new(),
    });
    (
        vec![Client::path(dir, "A"), Client::path(dir, "B"), chaos],
        Floors::none(),
    )
}

/// A master with an async replica, in sync, and a proxy in front of the
/// master (clients follow the failover through it).
fn proxied_pair(dir: &Path) -> Result<(ReplicaPair, Proxy), ChaosError> {
    let binary = redis_server_binary()?;
    let pair = ReplicaPair::start_in(dir.join("pair"), binary, NodeOptions::default())?;
    // `start_in` returns with the replica in sync.
    let proxy = Proxy::start(pair.master().addr())?;
    Ok((pair, proxy))
}

/// Logs the failover (fault 1) on `target` and cuts the replication link:
/// from now on the master's writes do not reach the replica.
fn begin_failover(
    log: &HistoryWriter,
    pair: &mut ReplicaPair,
    target: &str,
) -> Result<(), ChaosError> {
    fault_start(
        log,
        1,
        "failover",
        target,
        "replication cut, lock written, master killed, replica promoted",
    );
    pair.cut_link()?;
    Ok(())
}

async fn single_node_failover(dir: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::SingleNodeFailover;
    let (mut pair, proxy) = proxied_pair(dir)?;
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(5);
    let mut a = Client::new(dir, "A", vec![proxy.url()], ttl).await?;
    let mut b = Client::new(dir, "B", vec![proxy.url()], ttl).await?;

    begin_failover(&log, &mut pair, "n0")?;
    let (guard_a, hold_a) = a
        .acquire("order:1", Duration::from_secs(1))
        .await
        .ok_or_else(|| schedule(c, "A did not get the lock"))?;
    if b.acquire("order:1", Duration::ZERO).await.is_some() {
        return Err(schedule(c, "B got the lock before the failover"));
    }
    let promoted = pair.fail_over()?;
    proxy.set_upstream(promoted);
    let _ = log.log(What::FaultEnd { fault: 1 });
    let won_b = b.acquire("order:1", Duration::from_secs(3)).await;
    Ok(wind_up(&a, &b, (guard_a, hold_a), won_b, &log, dir, chaos).await)
}

/// The passing twin of [`Control::SingleNodeFailover`]: the same
/// schedule, but the lock spans 5 nodes and only the last one fails over.
/// A held all 5, so B finds 4 of them still taken and must not win.
/// Returns the checker's report (its verdict must be a pass, with B's
/// attempt failed).
pub fn one_of_five_fails_over(dir: &Path) -> Result<CheckReport, ChaosError> {
    std::fs::create_dir_all(dir).map_err(ChaosError::io(format!("creating {}", dir.display())))?;
    let dir = &std::path::absolute(dir).map_err(ChaosError::io("resolving the run directory"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ChaosError::io("starting a Tokio runtime"))?;
    let inputs = runtime.block_on(async {
        let plain = Testbed::start(4)?;
        // A control breaks the algorithm's assumptions on purpose; its
        // checker judges the run, not what the nodes keep.
        plain.skip_leftover_check();
        let (mut pair, proxy) = proxied_pair(dir)?;
        let mut urls = plain.urls();
        urls.push(proxy.url());
        let (log, chaos) = injector(dir)?;
        let ttl = Duration::from_secs(5);
        let mut a = Client::new(dir, "A", urls.clone(), ttl).await?;
        let mut b = Client::new(dir, "B", urls, ttl).await?;
        begin_failover(&log, &mut pair, "n4")?;
        let (guard_a, hold_a) = a
            .acquire("order:5", Duration::from_secs(1))
            .await
            .ok_or_else(|| schedule(Control::SingleNodeFailover, "A did not get the lock"))?;
        // Wait until A's key is on all five (the last may answer after the
        // quorum): the twin is about a holder with every node.
        let limit = Instant::now() + Duration::from_secs(2);
        while guard_a.held_nodes().count() < 5 && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let promoted = pair.fail_over()?;
        proxy.set_upstream(promoted);
        let _ = log.log(What::FaultEnd { fault: 1 });
        let won_b = b.acquire("order:5", Duration::from_millis(500)).await;
        let (inputs, _) = wind_up(&a, &b, (guard_a, hold_a), won_b, &log, dir, chaos).await;
        Ok::<_, ChaosError>(inputs)
    })?;
    drop(runtime);
    finish(dir, &inputs, &Floors::none())
}

async fn immediate_restart(dir: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::ImmediateRestart;
    let mut nodes = Testbed::start(3)?;
    nodes.skip_leftover_check();
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(5);
    let mut a = Client::new(dir, "A", nodes.urls(), ttl).await?;
    let mut b = Client::new(dir, "B", nodes.urls(), ttl).await?;
    let key = "order:2";

    // A third party holds the name on n2 for a moment, so A wins exactly
    // {n0, n1}.
    let mut n2 = nodes.node(2).connection()?;
    redis::cmd("HSET")
        .arg(key)
        .arg("owner")
        .arg("someone-else")
        .query::<()>(&mut n2)
        .map_err(crate::TestbedError::from)?;
    redis::cmd("PEXPIRE")
        .arg(key)
        .arg(10_000)
        .query::<()>(&mut n2)
        .map_err(crate::TestbedError::from)?;
    let (guard_a, hold_a) = a
        .acquire(key, Duration::from_secs(1))
        .await
        .ok_or_else(|| schedule(c, "A did not get the lock"))?;
    if guard_a.held_nodes().count() != 2 {
        return Err(schedule(c, "A did not win exactly two nodes"));
    }
    redis::cmd("DEL")
        .arg(key)
        .query::<()>(&mut n2)
        .map_err(crate::TestbedError::from)?;
    // What a deployment would run with (one TTL), against which the
    // checker judges the votes the clients, with the quarantine off, count.
    let _ = log.log(What::Settings {
        quarantine_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    });
    fault_start(
        &log,
        1,
        "crash_restart_immediate_volatile",
        "n0",
        "SIGKILL, restart empty at once (no persistence, no delay)",
    );
    nodes.node_mut(0).restart(Restart::immediate())?;
    let _ = log.log(What::FaultEnd { fault: 1 });
    let Some(won_b) = b.acquire(key, Duration::from_secs(3)).await else {
        // Without B's win there is nothing to catch (seen once in a loaded
        // suite run: 24 attempts refused in 3 s).
        a.release(guard_a, &hold_a).await;
        return Err(schedule(c, "B did not get the lock on the restarted node"));
    };
    Ok(wind_up(&a, &b, (guard_a, hold_a), Some(won_b), &log, dir, chaos).await)
}

async fn lost_release(dir: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::LostRelease;
    let nodes = Testbed::start(3)?;
    nodes.skip_leftover_check();
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(5);
    let mut a = Client::new(dir, "A", nodes.urls(), ttl).await?;
    let b = Client::new(dir, "B", nodes.urls(), ttl).await?;
    let key = "order:4";
    let (guard_a, hold_a) = a
        .acquire(key, Duration::from_secs(1))
        .await
        .ok_or_else(|| schedule(c, "A did not get the lock"))?;
    // What n2 has of A's hold, to put back as a release that missed n2
    // would have left it.
    let mut n2 = nodes.node(2).connection()?;
    let kept: Option<Vec<u8>> = redis::cmd("DUMP")
        .arg(key)
        .query(&mut n2)
        .map_err(crate::TestbedError::from)?;
    let kept = kept.ok_or_else(|| schedule(c, "A's acquire did not reach n2"))?;
    a.release(guard_a, &hold_a).await;
    redis::cmd("RESTORE")
        .arg(key)
        .arg(ttl.as_millis() as u64)
        .arg(kept)
        .query::<()>(&mut n2)
        .map_err(crate::TestbedError::from)?;
    // The run's prober, past the bound in which a release may still be on
    // its way.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for (i, node) in nodes.nodes().iter().enumerate() {
        let mut conn = node.connection()?;
        let mut pipe = redis::pipe();
        crate::lock_key::read_owner(&mut pipe, key);
        let (owner, pttl_ms): (Option<String>, i64) = pipe
            .cmd("PTTL")
            .arg(key)
            .query(&mut conn)
            .map_err(crate::TestbedError::from)?;
        if let Some(owner) = owner {
            let _ = log.log(What::Probe {
                node: i,
                key: key.into(),
                owner,
                pttl_ms,
            });
        }
    }
    let _ = log.log(What::Final {
        fenced: Vec::new(),
        unfenced: Vec::new(),
        keys_left: Vec::new(),
    });
    drop(b);
    Ok((
        vec![Client::path(dir, "A"), Client::path(dir, "B"), chaos],
        Floors::none(),
    ))
}

async fn fast_clocks(dir: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::FastClocks;
    let nodes = Testbed::start_with(
        3,
        NodeOptions {
            fake_clock: true,
            ..NodeOptions::default()
        },
    )?;
    nodes.skip_leftover_check();
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(4);
    let mut a = Client::new(dir, "A", nodes.urls(), ttl).await?;
    let mut b = Client::new(dir, "B", nodes.urls(), ttl).await?;
    let key = "order:3";
    let (guard_a, hold_a) = a
        .acquire(key, Duration::from_secs(1))
        .await
        .ok_or_else(|| schedule(c, "A did not get the lock"))?;
    fault_start(
        &log,
        1,
        "clock_fast_beyond_drift",
        "n0,n1",
        "wall clock × 4 on a majority (allowance: 1 %)",
    );
    for i in [0, 1] {
        nodes.node(i).set_clock(ClockSkew {
            rate: 4.0,
            offset_ms: 0,
        })?;
    }
    let won_b = b.acquire(key, Duration::from_secs(3)).await;
    for i in [0, 1] {
        nodes.node(i).set_clock(ClockSkew::NORMAL)?;
    }
    let _ = log.log(What::FaultEnd { fault: 1 });
    Ok(wind_up(&a, &b, (guard_a, hold_a), won_b, &log, dir, chaos).await)
}

fn client_pause(dir: &Path, worker_bin: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::ClientPause;
    let nodes = Testbed::start(3)?;
    let resource = Testbed::start(1)?;
    nodes.skip_leftover_check();
    resource.skip_leftover_check();
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(1);
    let key = "acct";
    let template = WorkerOptions {
        id: String::new(),
        nodes: nodes.urls(),
        resource: resource.urls()[0].clone(),
        keys: vec![key.into()],
        long_key: None,
        tasks: 1,
        ttl,
        node_timeout: Duration::from_millis(100),
        drift_factor: 0.01,
        history: PathBuf::new(),
        seed: 7,
        pause_before_write: None,
        holds_per_task: Some(3),
        rw_keys: Vec::new(),
        rw_tasks: 0,
        semaphore: None,
        permit_tasks: 0,
    };
    let workers = Workers::new(worker_bin, dir, template);
    let a = workers.spawn_with(|o| {
        o.pause_before_write = Some(1);
        o.holds_per_task = Some(1);
    })?;
    if !workers.wait_state(&a, true, Duration::from_secs(10)) {
        return Err(schedule(c, format!("worker {a} never stopped itself")));
    }
    let stopped = Instant::now();
    fault_start(
        &log,
        1,
        "client_pause",
        &a,
        "stopped between its lock check and its writes",
    );
    let b = workers.spawn()?;
    workers.wait_exited(&b, Duration::from_secs(8));
    // Past A's validity for sure, whatever B did.
    while stopped.elapsed() < ttl + ttl / 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    workers.resume(&a)?;
    let _ = log.log(What::FaultEnd { fault: 1 });
    workers.wait_exited(&a, Duration::from_secs(5));
    workers.stop_all(Duration::from_secs(3));
    let (fenced, unfenced) = read_counters(&mut resource.node(0).connection()?, &[key.into()])
        .map_err(crate::TestbedError::from)?;
    let _ = log.log(What::Final {
        fenced,
        unfenced,
        keys_left: Vec::new(),
    });
    let mut inputs = workers.histories();
    inputs.push(chaos);
    let floors = Floors {
        unfenced_is_protected: true,
        ..Floors::none()
    };
    Ok((inputs, floors))
}

/// The end of a shared-primitive schedule: everyone holds a moment longer
/// (the excess shows in the timeline), then releases; the history files
/// to check, with no floors.
async fn release_all(
    held: Vec<(&Client, Held, HoldLog)>,
    log: &HistoryWriter,
    dir: &Path,
    chaos: PathBuf,
) -> (Vec<PathBuf>, Floors) {
    tokio::time::sleep(WORK).await;
    let mut inputs = Vec::new();
    for (client, guard, rec) in held {
        client.release_held(guard, &rec).await;
        inputs.push(Client::path(dir, client.name));
    }
    let _ = log.log(What::Final {
        fenced: Vec::new(),
        unfenced: Vec::new(),
        keys_left: Vec::new(),
    });
    inputs.push(chaos);
    (inputs, Floors::none())
}

async fn extra_permit(dir: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::ExtraPermit;
    const K: u32 = 2;
    let nodes = Testbed::start(3)?;
    nodes.skip_leftover_check();
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(5);
    let mut clients = Vec::new();
    for name in ["A", "B", "C"] {
        clients.push(Client::new(dir, name, nodes.urls(), ttl).await?);
    }
    let _ = log.log(What::Note {
        text: format!("A and B take permits of exports with K = {K}; C, misconfigured, with K + 1"),
    });
    let mut held = Vec::new();
    for (client, taken) in clients.iter_mut().zip([K, K, K + 1]) {
        let name = client.name;
        let (guard, rec) = client
            .permit("exports", taken, K, Duration::from_secs(1))
            .await
            .ok_or_else(|| schedule(c, format!("{name} did not get a permit")))?;
        held.push((guard, rec));
    }
    let held = clients
        .iter()
        .zip(held)
        .map(|(client, (guard, rec))| (client, guard, rec))
        .collect();
    Ok(release_all(held, &log, dir, chaos).await)
}

async fn partial_writer(dir: &Path) -> Result<(Vec<PathBuf>, Floors), ChaosError> {
    let c = Control::PartialWriter;
    let name = "settings";
    let nodes = Testbed::start(3)?;
    nodes.skip_leftover_check();
    let (log, chaos) = injector(dir)?;
    let ttl = Duration::from_secs(5);
    let mut a = Client::new(dir, "A", nodes.urls(), ttl).await?;
    let mut b = Client::new(dir, "B", nodes.urls(), ttl).await?;
    let mut w = Client::new(dir, "W", nodes.urls(), ttl).await?;
    let (read_a, rec_a) = a
        .read(name, Duration::from_secs(1))
        .await
        .ok_or_else(|| schedule(c, "A did not get the read side"))?;
    let (read_b, rec_b) = b
        .read(name, Duration::from_secs(1))
        .await
        .ok_or_else(|| schedule(c, "B did not get the read side"))?;
    // Half of the slots, none of them the readers': a writer that skips
    // slots does not see the readers on them.
    let taken = [read_a.mode(), read_b.mode()].map(|m| m.and_then(Mode::slot));
    let half: Vec<u32> = (0..MultiRwLock::READER_SLOTS)
        .filter(|i| !taken.contains(&Some(*i)))
        .take((MultiRwLock::READER_SLOTS / 2) as usize)
        .collect();
    let _ = log.log(What::Note {
        text: format!(
            "W takes reader slots {half:?} of {name} as a plain lock, while A and B read on slots {taken:?}"
        ),
    });
    let (write_w, rec_w) = w
        .partial_write(name, &half)
        .await
        .ok_or_else(|| schedule(c, "W did not get its half of the slots"))?;
    let held = vec![
        (&w, write_w, rec_w),
        (&a, read_a, rec_a),
        (&b, read_b, rec_b),
    ];
    Ok(release_all(held, &log, dir, chaos).await)
}
