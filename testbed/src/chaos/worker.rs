//! One worker process of the chaos workload.
//!
//! A worker runs a few tasks of each workload, every task a loop of holds:
//!
//! * **mutex** tasks on one [`MultiLock`] (watchdog on): pick a lock name,
//!   acquire it, get the fencing token, then under the lock do a
//!   read-modify-write on that name's fenced counter (reads and writes
//!   carry the token) and on its unfenced counter (`GET` then `SET`), and
//!   release;
//! * **read-write** tasks on a [`MultiRwLock`]: pick one of its names, read
//!   it (most holds) or write it; a writer does the same read-modify-writes
//!   as a mutex holder, on the name's counters;
//! * **permit** tasks on a [`MultiSemaphore`]: take one of the name's K
//!   permits.
//!
//! A few holds of each are long (1–3 × the TTL, the watchdog renewing
//! them); the read-write and permit holds take the watchdog on some short
//! holds too. Every step goes to the worker's history file
//! ([`HoldLog`]).
//!
//! The worker is a separate process so that a fault can pause (`SIGSTOP`)
//! or kill one client while the others go on. It stops gracefully (tasks
//! finish their hold and release) when its standard input closes.

use std::io::{self, Read as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quorumlock::fenced::{FencedResource, Read, Write};
use quorumlock::{
    Error, GuardOptions, HeldLock, LockConfig, MultiLock, MultiRwLock, MultiSemaphore, Owner,
    Quorum, RetryPolicy, Wait,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;

use super::history::{HistoryWriter, Target, What};
use super::hold_log::{Held, HoldLog};

/// Everything a worker needs; passed on its command line by the run.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The worker's id, e.g. `w3`; hold ids are `<id>-<seq>`.
    pub id: String,
    /// The lock nodes' URLs (the proxies in front of them).
    pub nodes: Vec<String>,
    /// The URL of the server holding the protected counters.
    pub resource: String,
    /// Lock names with short holds.
    pub keys: Vec<String>,
    /// A lock name held for 1–3 × the TTL (renewed by the watchdog), taken
    /// now and then instead of a short one.
    pub long_key: Option<String>,
    /// Tasks (concurrent holders) in this process.
    pub tasks: usize,
    /// The locks' TTL.
    pub ttl: Duration,
    /// The per-node call timeout.
    pub node_timeout: Duration,
    /// The clock-drift allowance (fraction of the TTL).
    pub drift_factor: f64,
    /// The history file to append to.
    pub history: PathBuf,
    /// Seed of the worker's choices.
    pub seed: u64,
    /// For the client-pause control: after the `n`-th hold's unfenced read
    /// and lock check, the worker stops itself (`SIGSTOP`) right before
    /// writing, so the write lands after the run resumes it.
    pub pause_before_write: Option<u64>,
    /// How many holds each task makes before it stops (None: until stdin
    /// closes).
    pub holds_per_task: Option<u64>,
    /// Read-write lock names ([`MultiRwLock`]); each hold of them reads
    /// or (now and then) writes one.
    pub rw_keys: Vec<String>,
    /// Tasks on the read-write lock names in this process (none without
    /// names).
    pub rw_tasks: usize,
    /// A semaphore name ([`MultiSemaphore`]) and its number of permits K.
    pub semaphore: Option<(String, u32)>,
    /// Tasks taking permits in this process (none without a semaphore).
    pub permit_tasks: usize,
}

/// The read-write lock names of a run (`rw0`, `rw1`, …).
pub fn rw_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("rw{i}")).collect()
}

/// The semaphore name of a run.
pub const SEMAPHORE: &str = "sem";

/// The share of read-write holds that write.
const WRITE_SHARE: f64 = 0.15;

/// The protected counters of one lock name: `chaos:fenced:<name>` (a
/// [`FencedResource`]) and `chaos:unfenced:<name>` (a plain string).
pub fn fenced_key(name: &str) -> String {
    format!("chaos:fenced:{name}")
}

/// See [`fenced_key`].
pub fn unfenced_key(name: &str) -> String {
    format!("chaos:unfenced:{name}")
}

/// Per lock name, a counter's final value.
pub type Counts = Vec<(String, u64)>;

/// The fenced and the unfenced counter of every name in `names`, read from
/// the resource server (a counter never written reads 0).
pub fn read_counters(
    con: &mut redis::Connection,
    names: &[String],
) -> redis::RedisResult<(Counts, Counts)> {
    let mut fenced = Vec::with_capacity(names.len());
    let mut unfenced = Vec::with_capacity(names.len());
    for name in names {
        let f: Option<u64> = redis::cmd("HGET")
            .arg(fenced_key(name))
            .arg("value")
            .query(con)?;
        let u: Option<u64> = redis::cmd("GET").arg(unfenced_key(name)).query(con)?;
        fenced.push((name.clone(), f.unwrap_or(0)));
        unfenced.push((name.clone(), u.unwrap_or(0)));
    }
    Ok((fenced, unfenced))
}

/// Runs the worker until its standard input closes (or its holds are
/// done), then releases what it holds and returns.
pub async fn run(options: WorkerOptions) -> Result<(), String> {
    let log = HistoryWriter::create(&options.history, &options.id)
        .map_err(|e| format!("opening {}: {e}", options.history.display()))?;
    log.log(What::WorkerStart {
        pid: std::process::id(),
    })
    .map_err(|e| e.to_string())?;
    // A node may be a Sentinel group (the docker run's), see `node_spec`.
    let config = super::node_spec::add_nodes(LockConfig::builder(), &options.nodes)?
        .quorum(Quorum::Majority)
        .ttl(options.ttl)
        .node_timeout(options.node_timeout)
        .drift_factor(options.drift_factor)
        .watchdog(true)
        .retry(RetryPolicy::default())
        .build()
        .map_err(|e| e.to_string())?;
    let lock = MultiLock::new(config.clone());
    let _ = lock.warm_up().await;
    // The read-write lock has a lock service of its own (fair, with
    // wake-ups); the semaphore shares the mutex's connections and watchdog.
    let rw =
        (!options.rw_keys.is_empty() && options.rw_tasks > 0).then(|| MultiRwLock::new(config));
    if let Some(rw) = &rw {
        let _ = rw.lock().warm_up().await;
    }
    // Every lock service of the worker, for its counters.
    let counters = Arc::new(Mutex::new(ServiceCounters {
        services: std::iter::once(lock.clone())
            .chain(rw.as_ref().map(|rw| rw.lock().clone()))
            .collect(),
        logged: ServiceCounts::default(),
    }));
    let reporting = report_services(Arc::clone(&counters), log.clone());
    let semaphore = options
        .semaphore
        .clone()
        .filter(|_| options.permit_tasks > 0)
        .map(|(name, permits)| (MultiSemaphore::over(&lock), name, permits));
    let resource = redis::Client::open(options.resource.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connecting to the resource: {e}"))?;

    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin(Arc::clone(&stop));
    let seq = Arc::new(AtomicU64::new(0));
    let mut workloads = vec![Workload::Mutex; options.tasks];
    if let Some(rw) = rw {
        workloads.extend(std::iter::repeat_n(
            Workload::ReadWrite(rw),
            options.rw_tasks,
        ));
    }
    if let Some((semaphore, name, permits)) = semaphore {
        let permits = Workload::Permits(semaphore, name, permits);
        workloads.extend(std::iter::repeat_n(permits, options.permit_tasks));
    }
    let mut tasks = Vec::with_capacity(workloads.len());
    for (t, workload) in workloads.into_iter().enumerate() {
        let task = Task {
            options: options.clone(),
            lock: lock.clone(),
            workload,
            resource: resource.clone(),
            log: log.clone(),
            stop: Arc::clone(&stop),
            seq: Arc::clone(&seq),
            rng: StdRng::seed_from_u64(options.seed ^ (t as u64 + 1).wrapping_mul(0x9E37)),
        };
        tasks.push(tokio::spawn(task.run()));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?;
    }
    reporting.abort();
    counters
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .log_news(&log);
    Ok(())
}

/// What a worker's lock services counted up to its last [`What::Services`]
/// event, each of which logs what is new since the one before: a worker
/// killed in a fault loses at most [`SERVICES_EVERY`] of them.
struct ServiceCounters {
    services: Vec<MultiLock>,
    logged: ServiceCounts,
}

/// The counters a [`What::Services`] event carries, summed over a worker's
/// lock services.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct ServiceCounts {
    acquired: u64,
    granted: u64,
    handoffs: u64,
}

/// How often a worker logs what its lock services counted.
const SERVICES_EVERY: Duration = Duration::from_secs(2);

impl ServiceCounters {
    /// Logs the counts since the last event, if any.
    fn log_news(&mut self, log: &HistoryWriter) {
        let mut now = ServiceCounts::default();
        for stats in self.services.iter().map(MultiLock::stats) {
            now.acquired += stats.acquired;
            now.granted += stats.granted;
            now.handoffs += stats.handoffs;
        }
        if now == self.logged {
            return;
        }
        let _ = log.log(What::Services {
            acquired: now.acquired.saturating_sub(self.logged.acquired),
            granted: now.granted.saturating_sub(self.logged.granted),
            handoffs: now.handoffs.saturating_sub(self.logged.handoffs),
        });
        self.logged = now;
    }
}

/// Logs the worker's service counters every [`SERVICES_EVERY`] until
/// aborted.
fn report_services(
    counters: Arc<Mutex<ServiceCounters>>,
    log: HistoryWriter,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SERVICES_EVERY).await;
            counters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .log_news(&log);
        }
    })
}

/// Sets `stop` when standard input reaches its end (the run closed it, or
/// died).
fn watch_stdin(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = io::stdin();
        // Bounded by the pipe: read returns 0 at EOF or fails once the
        // writer is gone.
        while let Ok(n) = stdin.read(&mut sink) {
            if n == 0 {
                break;
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
}

/// What a task does with each hold.
#[derive(Clone)]
enum Workload {
    /// Mutex holds of `keys` (now and then of the long key).
    Mutex,
    /// Reads (most) and writes of the read-write lock names.
    ReadWrite(MultiRwLock),
    /// Permits of the semaphore: its service, name and K.
    Permits(MultiSemaphore, String, u32),
}

/// One hold's plan: what to take, how, and for how long.
struct Plan {
    key: String,
    how: How,
    /// A long hold: 1–3 × the TTL, the watchdog renewing it.
    long: bool,
    /// The watchdog on (mutex holds always have it, from the lock's
    /// settings).
    watched: bool,
}

enum How {
    Mutex,
    Read,
    Write,
    Permit,
}

struct Task {
    options: WorkerOptions,
    lock: MultiLock,
    workload: Workload,
    resource: MultiplexedConnection,
    log: HistoryWriter,
    stop: Arc<AtomicBool>,
    seq: Arc<AtomicU64>,
    rng: StdRng,
}

impl Task {
    async fn run(mut self) {
        let mut done = 0u64;
        while !self.stop.load(Ordering::SeqCst)
            && self.options.holds_per_task.is_none_or(|n| done < n)
        {
            done += 1;
            self.one_hold().await;
        }
    }

    fn log(&self, what: What) {
        // A full disk would make the history useless; the run notices the
        // missing lines, so the worker goes on.
        let _ = self.log.log(what);
    }

    /// What the next hold takes, drawn from the task's random choices (a
    /// mutex task draws as it always has: long or not, then the name).
    fn plan(&mut self) -> Plan {
        let rng = &mut self.rng;
        match &self.workload {
            Workload::Mutex => {
                let long = match &self.options.long_key {
                    Some(name) if rng.random_bool(0.03) => Some(name.clone()),
                    _ => None,
                };
                let key = match &long {
                    Some(name) => name.clone(),
                    None => {
                        let i = rng.random_range(0..self.options.keys.len());
                        self.options.keys[i].clone()
                    }
                };
                Plan {
                    key,
                    how: How::Mutex,
                    long: long.is_some(),
                    watched: true,
                }
            }
            Workload::ReadWrite(_) => {
                let keys = &self.options.rw_keys;
                let key = keys[rng.random_range(0..keys.len())].clone();
                let how = if rng.random_bool(WRITE_SHARE) {
                    How::Write
                } else {
                    How::Read
                };
                let long = rng.random_bool(0.04);
                let watched = long || rng.random_bool(0.5);
                Plan {
                    key,
                    how,
                    long,
                    watched,
                }
            }
            Workload::Permits(_, name, _) => {
                let long = rng.random_bool(0.04);
                let watched = long || rng.random_bool(0.5);
                Plan {
                    key: name.clone(),
                    how: How::Permit,
                    long,
                    watched,
                }
            }
        }
    }

    /// The acquire call of `plan`, as `owner` for a mutex (whose every
    /// attempt writes it).
    async fn acquire(&self, plan: &Plan, owner: &Owner) -> Result<Held, Error> {
        let wait = Wait::up_to(self.options.ttl * 2);
        let options = GuardOptions::default().watchdog(plan.watched);
        let key = plan.key.as_str();
        match (&plan.how, &self.workload) {
            (How::Read, Workload::ReadWrite(rw)) => {
                rw.read_with(key, wait, &options).await.map(Held::Read)
            }
            (How::Write, Workload::ReadWrite(rw)) => {
                rw.write_with(key, wait, &options).await.map(Held::Write)
            }
            (How::Permit, Workload::Permits(semaphore, _, permits)) => semaphore
                .acquire_with(key, *permits, wait, &options)
                .await
                .map(|permit| Held::Permit(permit, *permits)),
            _ => self.lock.acquire_as(owner, key, wait).await.map(Held::Lock),
        }
    }

    async fn one_hold(&mut self) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let hold = format!("{}-{seq}", self.options.id);
        let plan = self.plan();
        // A mutex call acquires as one owner, logged at its start, so that
        // a key the run's prober finds on a node is traced to the call that
        // wrote it (a read-write lock's or a semaphore's call takes no
        // owner: its winning attempt's is logged with the win).
        let owner = Owner::new();
        let named = matches!(plan.how, How::Mutex).then_some(&owner);
        let rec = HoldLog::attempt(&self.log, &plan.key, &hold, named);
        let guard = match self.acquire(&plan, &owner).await {
            Ok(guard) => guard,
            Err(error) => {
                rec.failed(&error);
                return;
            }
        };
        rec.won(&guard, guard.mode());
        let held = guard.handle();
        let watcher = rec.watch(&held, self.options.ttl / 12);
        let token = rec.token(&held).await;
        if matches!(plan.how, How::Mutex | How::Write) {
            self.update_counters(&held, &plan.key, &hold, token, seq)
                .await;
        }
        if plan.long {
            // Work for 1–3 × the TTL: the watchdog must renew under faults.
            let work = self.options.ttl.mul_f64(self.rng.random_range(1.0..3.0));
            tokio::select! {
                _ = tokio::time::sleep(work) => {}
                _ = held.lost() => {}
            }
        } else {
            // A short, varied critical section; readers and permits hold a
            // little longer, so that they overlap one another.
            let micros = match plan.how {
                How::Mutex | How::Write => self.rng.random_range(0..2_000),
                How::Read | How::Permit => self.rng.random_range(1_000..25_000),
            };
            tokio::time::sleep(Duration::from_micros(micros)).await;
        }
        rec.release(guard, Some(watcher)).await;
    }

    /// The read-modify-write under the lock: read both counters (the
    /// fenced one with the token), check the lock, write both.
    async fn update_counters(
        &mut self,
        held: &HeldLock,
        key: &str,
        hold: &str,
        token: Option<u64>,
        seq: u64,
    ) {
        if !held.is_held() {
            return;
        }
        let fenced = FencedResource::with_connection(self.resource.clone(), &fenced_key(key));
        let mut fenced_read = None;
        if let Some(token) = token {
            match fenced.read_fenced(token).await {
                Ok(Read::Value(value)) => {
                    fenced_read = Some(value.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0));
                }
                Ok(Read::Rejected { last }) => self.log(What::Write {
                    key: key.to_string(),
                    hold: hold.to_string(),
                    target: Target::Fenced,
                    token: Some(token),
                    read: None,
                    wrote: None,
                    accepted: false,
                    last: Some(last),
                }),
                Ok(_) | Err(_) => {}
            }
        }
        let name = unfenced_key(key);
        let mut conn = self.resource.clone();
        let unfenced_read: Option<u64> =
            match redis::cmd("GET").arg(&name).query_async(&mut conn).await {
                Ok(v) => v,
                Err(_) => return,
            };
        let unfenced_read = unfenced_read.unwrap_or(0);
        if !held.is_held() {
            return;
        }
        if self.options.pause_before_write == Some(seq) {
            // The client-pause control: stop right between the lock check
            // and the writes, as a GC pause or a descheduled VM would.
            self.log(What::Note {
                text: format!("{hold}: pausing before its writes"),
            });
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::STOP,
            );
        }
        if let (Some(token), Some(read)) = (token, fenced_read) {
            let wrote = read + 1;
            let outcome = match fenced.write(token, &wrote.to_string()).await {
                Ok(Write::Accepted) => Some((true, None)),
                Ok(Write::Rejected { last }) => Some((false, Some(last))),
                Ok(_) | Err(_) => None,
            };
            if let Some((accepted, last)) = outcome {
                self.log(What::Write {
                    key: key.to_string(),
                    hold: hold.to_string(),
                    target: Target::Fenced,
                    token: Some(token),
                    read: Some(read),
                    wrote: Some(wrote),
                    accepted,
                    last,
                });
            }
        }
        let wrote = unfenced_read + 1;
        let result: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&name)
            .arg(wrote)
            .query_async(&mut conn)
            .await;
        if result.is_ok() {
            self.log(What::Write {
                key: key.to_string(),
                hold: hold.to_string(),
                target: Target::Unfenced,
                token: None,
                read: Some(unfenced_read),
                wrote: Some(wrote),
                accepted: true,
                last: None,
            });
        }
    }
}
