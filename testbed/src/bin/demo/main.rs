//! The quorumlock showcase: eight workers increment one counter under one
//! lock held on a majority of five independent Redis masters, while the demo
//! kills and restarts lock nodes underneath them.
//!
//! The counter lives on a sixth server and is incremented with a deliberately
//! non-atomic `GET` + `SET`, so any break of mutual exclusion shows up as a
//! counter below the number of acquisitions.
//!
//! Phases:
//! 1. all 5 nodes up: the lock works;
//! 2. 2 of 5 nodes killed: the remaining 3 still form a quorum;
//! 3. a third node killed: every acquire is refused, naming each node's failure;
//! 4. the 3 nodes restarted (empty, no persistence) once the TTL has passed
//!    since they died: the lock works again.
//!
//! Then the watchdog, on fresh keys, once all 5 nodes run:
//! 5. long job: a holder with the watchdog works for 5 × the TTL while a
//!    contender (another client, no watchdog) calls `try_acquire` the whole
//!    time and never wins. A node is killed under the job and rejoins empty
//!    after the TTL; the watchdog re-takes the key there with the holder's
//!    token. Right after the release the contender wins;
//! 6. lost before the deadline: 3 of 5 nodes killed under a `run_exclusive`
//!    job; `lost()` resolves before the validity deadline, naming each
//!    node, and the work is cancelled with `Error::Lost`.
//!
//! Then fencing, re-entry and several names at once (fencing.rs):
//! 7. a paused holder is fenced off: A (no watchdog, TTL 1 s) writes to a
//!    `FencedResource` with its fencing token, pauses past its validity,
//!    and B takes the lock with a larger token and writes; A's late write
//!    is rejected. Then a node dies and comes back without its fencing
//!    counters, and the tokens of the holders after it still increase;
//! 8. re-entry to depth 3 counted on the nodes, then transfers that lock
//!    two accounts at once with `acquire_all` while other workers lock
//!    overlapping pairs: the balances stay consistent and no node ever
//!    holds one name of a pair without the other.
//!
//! Exits with 1 if the counter does not match the acquisitions, if a phase
//! that should have a quorum had no acquisition, if an acquisition
//! succeeded while only 2 of 5 nodes were up, if the contender won while the
//! long job held the lock (or not right after it), if no node was healed,
//! if the loss did not come before the deadline with the work cancelled,
//! if the paused holder's stale write was accepted or a fencing token did
//! not increase, or if re-entry counts, transfer balances or partial holds
//! came out wrong.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlock::{
    ConfigError, Error, LockConfig, MultiLock, NodeErrorKind, NodeReports, Quorum, RetryPolicy,
    Wait,
};
use quorumlock_testbed::docker::{Compose, Deployment, LOCAL_IMAGE};
use quorumlock_testbed::redis::{self, aio::MultiplexedConnection};
use quorumlock_testbed::table::{Align, Table};
use quorumlock_testbed::{Testbed, TestbedError};

mod fencing;
mod nodes;
mod watchdog;
use fencing::{fencing_demo, fencing_summary};
use nodes::LockNodes;
use watchdog::{watchdog_demo, watchdog_summary};

/// Lock nodes.
const NODES: usize = 5;
/// Concurrent workers contending for the lock.
const WORKERS: usize = 8;
/// The one lock every worker takes.
const KEY: &str = "demo:counter-lock";
/// The protected resource: a counter on the resource server.
const COUNTER: &str = "demo:counter";
/// Lock TTL, short so that the delayed restart is quick.
const TTL: Duration = Duration::from_secs(2);
/// Wait budget of each `acquire` call.
const WAIT: Duration = Duration::from_millis(300);
/// Interval of the progress lines.
const TICK: Duration = Duration::from_millis(500);

/// Nodes killed in phase 2, then the one killed in phase 3.
const FIRST_KILLED: [usize; 2] = [0, 1];
const THIRD_KILLED: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    AllUp,
    TwoDown,
    ThreeDown,
    Restarted,
}

impl Phase {
    const ALL: [Phase; 4] = [
        Phase::AllUp,
        Phase::TwoDown,
        Phase::ThreeDown,
        Phase::Restarted,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn from_index(i: usize) -> Phase {
        Phase::ALL[i.min(Phase::ALL.len() - 1)]
    }

    fn name(self) -> &'static str {
        match self {
            Phase::AllUp => "all 5 nodes up",
            Phase::TwoDown => "2 of 5 nodes down",
            Phase::ThreeDown => "3 of 5 nodes down",
            Phase::Restarted => "restarted",
        }
    }

    /// How long the phase runs once it has begun.
    fn duration(self) -> Duration {
        match self {
            Phase::AllUp | Phase::TwoDown | Phase::Restarted => Duration::from_secs(3),
            Phase::ThreeDown => Duration::from_secs(2),
        }
    }

    /// Whether a quorum (3 of 5) is up in this phase.
    fn has_quorum(self) -> bool {
        self != Phase::ThreeDown
    }
}

/// Outcomes of the `acquire` calls that ended in one phase.
#[derive(Default)]
struct PhaseStats {
    /// Won, and the counter was incremented under the lock.
    acquired: AtomicU64,
    /// Gave up because other owners held the lock ([`Error::Contended`]).
    contended: AtomicU64,
    /// Gave up because too few nodes answered ([`Error::QuorumNotReached`]).
    refused: AtomicU64,
    /// Any other error.
    other: AtomicU64,
}

/// Counters shared by the workers, the progress printer and the controller.
struct Stats {
    started: Instant,
    phase: AtomicUsize,
    stop: AtomicBool,
    phases: [PhaseStats; 4],
    /// (calls, attempts) per "error kind / last attempt's kind".
    errors: Mutex<BTreeMap<String, (u64, u64)>>,
    /// Node failures in the reports of those errors, per kind.
    node_errors: Mutex<BTreeMap<&'static str, (u64, String)>>,
    /// The first refusal seen in phase 3, in full, with its node reports.
    example_refusal: Mutex<Option<(String, NodeReports)>>,
    /// Guards whose validity was over before the counter was touched.
    expired_before_write: AtomicU64,
    /// Releases that found the validity already over.
    released_late: AtomicU64,
    /// Failed GET/SET on the resource server (first message kept).
    resource_errors: AtomicU64,
    first_resource_error: Mutex<Option<String>>,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            started: Instant::now(),
            phase: AtomicUsize::new(Phase::AllUp.index()),
            stop: AtomicBool::new(false),
            phases: Default::default(),
            errors: Mutex::default(),
            node_errors: Mutex::default(),
            example_refusal: Mutex::default(),
            expired_before_write: AtomicU64::new(0),
            released_late: AtomicU64::new(0),
            resource_errors: AtomicU64::new(0),
            first_resource_error: Mutex::default(),
        }
    }

    fn phase(&self) -> Phase {
        Phase::from_index(self.phase.load(Ordering::SeqCst))
    }

    fn set_phase(&self, phase: Phase) {
        self.phase.store(phase.index(), Ordering::SeqCst);
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn sum(&self, field: impl Fn(&PhaseStats) -> &AtomicU64) -> u64 {
        self.phases
            .iter()
            .map(|p| field(p).load(Ordering::Relaxed))
            .sum()
    }

    fn record_error(&self, began: Phase, ended: Phase, error: &Error) {
        let last = last_attempt(error);
        let phase = &self.phases[attribute_error(began, ended, last).index()];
        match last {
            Error::Contended { .. } => {
                phase.contended.fetch_add(1, Ordering::Relaxed);
            }
            Error::QuorumNotReached { .. } => {
                phase.refused.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                phase.other.fetch_add(1, Ordering::Relaxed);
            }
        }

        let (label, attempts) = match error {
            Error::WaitBudgetExhausted { attempts, last, .. } => (
                format!("{} (last attempt: {})", kind_name(error), kind_name(last)),
                u64::from(*attempts),
            ),
            _ => (kind_name(error).to_string(), 1),
        };
        {
            let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = errors.entry(label).or_default();
            entry.0 += 1;
            entry.1 += attempts;
        }
        if let Some(reports) = error.node_reports() {
            let mut node_errors = self
                .node_errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for e in reports.errors() {
                let entry = node_errors
                    .entry(node_kind_name(e.kind()))
                    .or_insert_with(|| (0, e.kind().to_string()));
                entry.0 += 1;
            }
        }

        // The example refusal must come from a call made entirely while
        // 3 of 5 nodes were down.
        if began == Phase::ThreeDown
            && ended == Phase::ThreeDown
            && matches!(last, Error::QuorumNotReached { .. })
        {
            let mut example = self
                .example_refusal
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if example.is_none() {
                let reports = error.node_reports().cloned().unwrap_or_default();
                *example = Some((error.to_string(), reports));
            }
        }
    }

    fn record_resource_error(&self, error: &redis::RedisError) {
        self.resource_errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_resource_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if first.is_none() {
            *first = Some(error.to_string());
        }
    }
}

/// The error of the last attempt, looking through `WaitBudgetExhausted`.
fn last_attempt(error: &Error) -> &Error {
    match error {
        Error::WaitBudgetExhausted { last, .. } => last_attempt(last),
        other => other,
    }
}

fn kind_name(error: &Error) -> &'static str {
    match error {
        Error::Config(_) => "Config",
        Error::Contended { .. } => "Contended",
        Error::QuorumNotReached { .. } => "QuorumNotReached",
        Error::ValidityUsedUp { .. } => "ValidityUsedUp",
        Error::WaitBudgetExhausted { .. } => "WaitBudgetExhausted",
        Error::Lost { .. } => "Lost",
        _ => "(other)",
    }
}

fn node_kind_name(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Unreachable => "Unreachable",
        NodeErrorKind::Timeout => "Timeout",
        NodeErrorKind::Auth => "Auth",
        NodeErrorKind::WrongType => "WrongType",
        NodeErrorKind::ReadOnly => "ReadOnly",
        NodeErrorKind::Busy => "Busy",
        NodeErrorKind::UnexpectedReply => "UnexpectedReply",
        NodeErrorKind::Other => "Other",
        _ => "(other)",
    }
}

/// The phase an acquisition counts for. A call that began before the third
/// node was killed may still win with an attempt that was under way when it
/// died; it counts for the phase it began in. Every other call counts for
/// the phase it ended in (the restart phase begins before the nodes start).
fn attribute(began: Phase, ended: Phase) -> Phase {
    if ended == Phase::ThreeDown && began != Phase::ThreeDown {
        began
    } else {
        ended
    }
}

/// The phase a failed call counts for. Contention, like a win, needs a
/// quorum of live nodes, so it is attributed as a win is. A refusal counts
/// for the phase it ended in, except that a call made while 3 of 5 nodes
/// were down and ending just after the restart counts for the phase without
/// a quorum, where its attempts ran.
fn attribute_error(began: Phase, ended: Phase, last: &Error) -> Phase {
    if matches!(last, Error::Contended { .. }) {
        attribute(began, ended)
    } else if began == Phase::ThreeDown {
        began
    } else {
        ended
    }
}

/// The deliberately non-atomic read-modify-write that the lock protects.
async fn increment(resource: &mut MultiplexedConnection) -> redis::RedisResult<i64> {
    let value: Option<i64> = redis::cmd("GET").arg(COUNTER).query_async(resource).await?;
    let next = value.unwrap_or(0) + 1;
    redis::cmd("SET")
        .arg(COUNTER)
        .arg(next)
        .exec_async(resource)
        .await?;
    Ok(next)
}

async fn read_counter(resource: &mut MultiplexedConnection) -> redis::RedisResult<i64> {
    let value: Option<i64> = redis::cmd("GET").arg(COUNTER).query_async(resource).await?;
    Ok(value.unwrap_or(0))
}

async fn worker(lock: MultiLock, mut resource: MultiplexedConnection, stats: Arc<Stats>) {
    while !stats.stop.load(Ordering::SeqCst) {
        let began = stats.phase();
        match lock.acquire(KEY, Wait::up_to(WAIT)).await {
            Ok(guard) => {
                let phase = attribute(began, stats.phase());
                if guard.is_held() {
                    match increment(&mut resource).await {
                        Ok(_) => {
                            stats.phases[phase.index()]
                                .acquired
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => stats.record_resource_error(&e),
                    }
                } else {
                    stats.expired_before_write.fetch_add(1, Ordering::Relaxed);
                }
                let report = guard.release().await;
                if !report.was_held {
                    stats.released_late.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(error) => stats.record_error(began, stats.phase(), &error),
        }
    }
}

fn stamp(elapsed: Duration) -> String {
    format!("{:>6.1}s", elapsed.as_secs_f64())
}

fn event(stats: &Stats, text: &str) {
    println!("{}  >> {text}", stamp(stats.elapsed()));
}

const HEADER: &str = "   time  phase                acquired  contended  refused   counter";

async fn progress(mut resource: MultiplexedConnection, stats: Arc<Stats>) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if stats.stop.load(Ordering::SeqCst) {
            return;
        }
        let counter =
            match tokio::time::timeout(Duration::from_millis(200), read_counter(&mut resource))
                .await
            {
                Ok(Ok(value)) => value.to_string(),
                _ => "?".to_string(),
            };
        println!(
            "{}  {:<19} {:>9} {:>10} {:>8} {:>9}",
            stamp(stats.elapsed()),
            stats.phase().name(),
            stats.sum(|p| &p.acquired),
            stats.sum(|p| &p.contended),
            stats.sum(|p| &p.refused),
            counter,
        );
    }
}

/// Kills the given lock nodes with SIGKILL (blocking: waits until reaped).
fn kill_nodes(testbed: &mut LockNodes, nodes: &[usize]) -> Result<(), TestbedError> {
    tokio::task::block_in_place(|| nodes.iter().try_for_each(|&i| testbed.kill(i)))
}

/// Starts the given lock nodes again on their ports (blocking: waits for PING).
fn start_nodes(testbed: &mut LockNodes, nodes: &[usize]) -> Result<(), TestbedError> {
    tokio::task::block_in_place(|| nodes.iter().try_for_each(|&i| testbed.start_empty(i)))
}

fn node_list(testbed: &LockNodes, nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(|&i| testbed.label(i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The demo's lock settings over `urls`, with or without the watchdog.
fn lock_config(urls: Vec<String>, watchdog: bool) -> Result<LockConfig, ConfigError> {
    LockConfig::builder()
        .nodes(urls)
        .ttl(TTL)
        .quorum(Quorum::Majority)
        .retry(
            RetryPolicy::default()
                .with_base_delay(Duration::from_millis(2))
                .with_max_delay(Duration::from_millis(50)),
        )
        .watchdog(watchdog)
        .build()
}

/// Waits until nodes without persistence that went down at `down_since` may
/// rejoin: they come back empty, so they stay out until the TTL has passed
/// (delayed restart rule).
/// Waits out the quarantine of nodes just restarted: they cast no vote
/// until it has passed (the library's default quarantine: the TTL).
async fn wait_out_quarantine(stats: &Stats, testbed: &LockNodes, nodes: &[usize]) {
    event(
        stats,
        &format!(
            "{} cast no vote for their quarantine ({:.1}s: their data may be incomplete); waiting it out",
            node_list(testbed, nodes),
            TTL.as_secs_f64()
        ),
    );
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
}

async fn wait_out_ttl(stats: &Stats, down_since: Instant) {
    let rejoin_at = down_since + TTL;
    let now = Instant::now();
    if rejoin_at > now {
        let wait = rejoin_at - now;
        event(
            stats,
            &format!(
                "waiting {:.1}s more before restarting (delayed restart rule)",
                wait.as_secs_f64()
            ),
        );
        tokio::time::sleep(wait).await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut docker = false;
    let mut keep_up = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--docker" => docker = true,
            "--keep-up" => keep_up = true,
            _ => {
                eprintln!("usage: demo [--docker [--keep-up]]");
                return ExitCode::from(2);
            }
        }
    }
    let result = if docker {
        run_docker(keep_up).await
    } else {
        run_local().await
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("demo: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The demo on five local nodes it starts (and stops).
async fn run_local() -> Result<bool, Box<dyn std::error::Error>> {
    let local = Testbed::start(NODES)?;
    let resource_server = Testbed::start(1)?;
    // The demo's nodes end with what its killed workers left, on purpose.
    local.skip_leftover_check();
    resource_server.skip_leftover_check();
    let lock_nodes = LockNodes::Local(local);
    run(lock_nodes, resource_server.node(0).url(), false).await
}

/// The demo on the docker testbed: brought up if it is not (with the
/// locally built image unless QUORUMLOCK_REDIS_IMAGE names another), and
/// down again afterwards unless `keep_up`.
async fn run_docker(keep_up: bool) -> Result<bool, Box<dyn std::error::Error>> {
    let deployment = tokio::task::block_in_place(|| {
        let compose = Compose::testbed()?;
        println!(
            "docker testbed: {} (healthy, or brought up)",
            compose.shown()
        );
        Deployment::up(compose, LOCAL_IMAGE, Duration::from_secs(180))
    })?;
    let result = run(
        LockNodes::docker(&deployment),
        deployment.resource.url(),
        true,
    )
    .await;
    if deployment.started_here() && !keep_up {
        println!("docker testbed: taking the deployment down");
        tokio::task::block_in_place(|| deployment.down())?;
    }
    result
}

/// Adopts the nodes that are brand new and empty (a deployment just
/// brought up), so that they vote at once; the others keep the epoch they
/// have, and a node met with no history waits out its quarantine.
async fn adopt_nodes(lock: &MultiLock, nodes: &LockNodes) {
    let adopted: Vec<bool> = lock
        .adopt_empty_nodes()
        .await
        .iter()
        .map(Result::is_ok)
        .collect();
    let fresh: Vec<usize> = (0..adopted.len()).filter(|&i| adopted[i]).collect();
    println!(
        "  adopted as brand-new, empty nodes (adopt_empty_nodes): {}",
        if fresh.is_empty() {
            "none (they have data: their epochs stand)".to_string()
        } else {
            node_list(nodes, &fresh)
        }
    );
    if fresh.len() < adopted.len() {
        // A node met with no history, not adopted, is quarantined.
        tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    }
}

/// Runs the demo; `Ok(false)` when a check failed.
/// Connects `lock` to every node, or says which ones cannot be reached.
async fn connect(lock: &MultiLock) -> Result<(), Box<dyn std::error::Error>> {
    let failed: Vec<String> = lock
        .warm_up()
        .await
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("cannot reach the lock nodes: {}", failed.join("; ")).into())
    }
}

async fn run(
    mut lock_nodes: LockNodes,
    resource_url: String,
    adopt: bool,
) -> Result<bool, Box<dyn std::error::Error>> {
    let config = lock_config(lock_nodes.urls(), false)?;
    let required = config.required_nodes();
    let node_timeout = config.node_timeout();

    println!("quorumlock demo");
    println!(
        "  {WORKERS} workers increment one counter with a non-atomic GET + SET, each time under the lock {KEY:?}."
    );
    println!(
        "  The lock needs a majority ({required} of {NODES}) of independent Redis masters; TTL {TTL:?}, node timeout {node_timeout:?}, wait budget per acquire {WAIT:?}."
    );
    println!();
    println!("  lock nodes ({}):", lock_nodes.kind());
    for (i, url) in lock_nodes.urls().iter().enumerate() {
        println!("    node {i}  {url}");
    }
    println!("  resource server (holds {COUNTER:?}):");
    println!("            {resource_url}");
    println!();

    let lock = MultiLock::new(config);
    connect(&lock).await?;
    if adopt {
        adopt_nodes(&lock, &lock_nodes).await;
    }

    let client = redis::Client::open(resource_url.as_str())?;
    let mut resource = client.get_multiplexed_async_connection().await?;
    redis::cmd("SET")
        .arg(COUNTER)
        .arg(0)
        .exec_async(&mut resource)
        .await?;

    println!("{HEADER}");
    let stats = Arc::new(Stats::new());
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| tokio::spawn(worker(lock.clone(), resource.clone(), Arc::clone(&stats))))
        .collect();
    let printer = tokio::spawn(progress(resource.clone(), Arc::clone(&stats)));

    // Phase 1: all nodes up.
    event(
        &stats,
        &format!("phase \"{}\": {WORKERS} workers start", Phase::AllUp.name()),
    );
    tokio::time::sleep(Phase::AllUp.duration()).await;

    // Phase 2: two nodes down, three left: still a quorum.
    kill_nodes(&mut lock_nodes, &FIRST_KILLED)?;
    let first_killed_at = Instant::now();
    stats.set_phase(Phase::TwoDown);
    event(
        &stats,
        &format!(
            "SIGKILL {}: 3 of 5 nodes left, quorum {required} still possible",
            node_list(&lock_nodes, &FIRST_KILLED)
        ),
    );
    tokio::time::sleep(Phase::TwoDown.duration()).await;

    // Phase 3: a third node down: no quorum, every acquire is refused.
    kill_nodes(&mut lock_nodes, &[THIRD_KILLED])?;
    let third_killed_at = Instant::now();
    stats.set_phase(Phase::ThreeDown);
    event(
        &stats,
        &format!(
            "SIGKILL {}: 2 of 5 nodes left, below the quorum of {required}: acquires must be refused",
            node_list(&lock_nodes, &[THIRD_KILLED])
        ),
    );
    tokio::time::sleep(Phase::ThreeDown.duration()).await;

    let example = stats
        .example_refusal
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    match example {
        Some((message, reports)) => {
            println!();
            println!(
                "  Example refusal in phase \"{}\":",
                Phase::ThreeDown.name()
            );
            println!("    {message}");
            println!("  that is, per node in the last attempt:");
            for report in &reports {
                println!("    {report}");
            }
            println!();
        }
        None => event(
            &stats,
            "no acquire was refused while 3 of 5 nodes were down",
        ),
    }

    // Phase 4: delayed restart. The nodes come back empty; a lock taken on
    // them before they died could still be valid for up to the TTL, so they
    // stay out until the TTL has passed since the last of them died.
    let all_killed = [FIRST_KILLED[0], FIRST_KILLED[1], THIRD_KILLED];
    wait_out_ttl(&stats, third_killed_at.max(first_killed_at)).await;
    event(
        &stats,
        &format!(
            "delayed restart of nodes 0, 1, 2 (down for {:.1}s, {:.1}s, {:.1}s):",
            first_killed_at.elapsed().as_secs_f64(),
            first_killed_at.elapsed().as_secs_f64(),
            third_killed_at.elapsed().as_secs_f64()
        ),
    );
    println!(
        "            they run without persistence and come back empty, so each one stays down for"
    );
    println!(
        "            at least the lock TTL ({:.1}s): by then every lock granted with its help has expired",
        TTL.as_secs_f64()
    );
    println!("            and an empty node cannot help a second owner to a quorum.");
    stats.set_phase(Phase::Restarted);
    start_nodes(&mut lock_nodes, &all_killed)?;
    event(
        &stats,
        &format!(
            "{} are back: 5 of 5 nodes up",
            node_list(&lock_nodes, &all_killed)
        ),
    );
    tokio::time::sleep(Phase::Restarted.duration()).await;

    // Stop the workers and wait for them, then read the final counter.
    stats.stop.store(true, Ordering::SeqCst);
    event(&stats, "stopping the workers");
    let mut worker_panics = 0;
    for handle in workers {
        if handle.await.is_err() {
            worker_panics += 1;
        }
    }
    let _ = printer.await;
    let counter = read_counter(&mut resource).await?;
    let total_run = stats.elapsed();

    let phases_ok = summary(&stats, counter, worker_panics, total_run);

    // Phases 5 and 6: the watchdog, on fresh keys.
    let watchdog = watchdog_demo(&mut lock_nodes, &stats).await?;
    let watchdog_ok = watchdog_summary(&watchdog);

    // Parts 7 and 8: fencing tokens, re-entry and several names at once.
    let fencing = fencing_demo(&mut lock_nodes, &stats, &resource_url).await;
    let fencing_ok = fencing_summary(&fencing);

    let ok = phases_ok && watchdog_ok && fencing_ok;
    println!();
    println!("verdict: {}", if ok { "OK" } else { "FAILED" });
    Ok(ok)
}

/// Prints the summary of phases 1 to 4 and returns whether every check passed.
fn summary(stats: &Stats, counter: i64, worker_panics: usize, total_run: Duration) -> bool {
    println!();
    println!("Summary ({:.1}s)", total_run.as_secs_f64());
    println!();
    print!("{}", phase_table(stats));
    println!("  (contended / refused / other: acquire calls that gave up, by their last attempt)");
    println!();
    print!("{}", error_table(stats));
    let acquisitions = stats.sum(|p| &p.acquired);
    let resource_errors = stats.resource_errors.load(Ordering::Relaxed);
    println!();
    print!(
        "{}",
        outcome_table(stats, counter, acquisitions, worker_panics)
    );
    println!();

    let mut ok = true;
    let counter_ok = u64::try_from(counter).is_ok_and(|c| c == acquisitions);
    if counter_ok {
        println!("counter == acquisitions: OK");
    } else {
        println!("counter == acquisitions: FAILED ({counter} != {acquisitions})");
        ok = false;
    }
    for phase in Phase::ALL {
        let acquired = stats.phases[phase.index()].acquired.load(Ordering::Relaxed);
        if phase.has_quorum() {
            if acquired > 0 {
                println!("lock worked in phase \"{}\": OK", phase.name());
            } else {
                println!(
                    "lock worked in phase \"{}\": FAILED (no acquisition)",
                    phase.name()
                );
                ok = false;
            }
        } else if acquired == 0 {
            println!("no acquisition in phase \"{}\": OK", phase.name());
        } else {
            println!(
                "no acquisition in phase \"{}\": FAILED ({acquired} succeeded without a quorum)",
                phase.name()
            );
            ok = false;
        }
    }
    if resource_errors > 0 || worker_panics > 0 {
        println!("worker errors: FAILED");
        ok = false;
    }
    ok
}

/// The acquire calls of each phase and in total, by how they ended.
fn phase_table(stats: &Stats) -> Table {
    let right = Align::Right;
    let mut table = Table::new([Align::Left, right, right, right, right])
        .indent(2)
        .header(["phase", "acquired", "contended", "refused", "other"]);
    let load = |n: &AtomicU64| n.load(Ordering::Relaxed).to_string();
    for phase in Phase::ALL {
        let p = &stats.phases[phase.index()];
        table.row([
            phase.name().to_string(),
            load(&p.acquired),
            load(&p.contended),
            load(&p.refused),
            load(&p.other),
        ]);
    }
    table.row([
        "total".to_string(),
        stats.sum(|p| &p.acquired).to_string(),
        stats.sum(|p| &p.contended).to_string(),
        stats.sum(|p| &p.refused).to_string(),
        stats.sum(|p| &p.other).to_string(),
    ]);
    table
}

/// The failed acquire calls by error kind, with their attempts, then the
/// node failures in their last attempts, by kind.
fn error_table(stats: &Stats) -> Table {
    let mut table = Table::new([Align::Left, Align::Right, Align::Right])
        .indent(2)
        .header(["Errors by kind", "calls", "attempts"]);
    let errors = stats.errors.lock().unwrap_or_else(PoisonError::into_inner);
    if errors.is_empty() {
        table.text("    none");
    }
    for (label, (calls, attempts)) in errors.iter() {
        table.row([
            format!("  {label}"),
            calls.to_string(),
            attempts.to_string(),
        ]);
    }
    drop(errors);

    table
        .text("")
        .text("  Node errors in the last attempts of those calls, by kind");
    let node_errors = stats
        .node_errors
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if node_errors.is_empty() {
        table.text("    none");
    }
    for (kind, (count, text)) in node_errors.iter() {
        table.row([format!("  {kind} (\"{text}\")"), count.to_string()]);
    }
    table
}

/// What went wrong around the lock (guards expired before the write, late
/// releases, resource server errors, panics), then the counter against the
/// acquisitions.
fn outcome_table(stats: &Stats, counter: i64, acquisitions: u64, worker_panics: usize) -> Table {
    let mut table = Table::new([Align::Left, Align::Right]).indent(2);
    let load = |n: &AtomicU64| n.load(Ordering::Relaxed).to_string();
    table
        .row([
            "guards expired before the write".to_string(),
            load(&stats.expired_before_write),
        ])
        .row([
            "releases after the validity ended".to_string(),
            load(&stats.released_late),
        ])
        .row([
            "errors on the resource server".to_string(),
            load(&stats.resource_errors),
        ]);
    if let Some(first) = stats
        .first_resource_error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_deref()
    {
        table.text(format!("    first: {first}"));
    }
    if worker_panics > 0 {
        table.row([
            "workers that panicked".to_string(),
            worker_panics.to_string(),
        ]);
    }
    table
        .text("")
        .row([
            "counter on the resource server".to_string(),
            counter.to_string(),
        ])
        .row([
            "acquisitions (all phases)".to_string(),
            acquisitions.to_string(),
        ]);
    table
}
