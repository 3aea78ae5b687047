//! One worker process of the chaos workload.
//!
//! A worker runs a few tasks on one [`MultiLock`] (watchdog on). Each task
//! loops: pick a lock name, acquire it, get the fencing token, then under
//! the lock do a read-modify-write on that name's fenced counter (reads
//! and writes carry the token) and on its unfenced counter (`GET` then
//! `SET`), and release. Every step goes to the worker's history file.
//!
//! The worker is a separate process so that a fault can pause (`SIGSTOP`)
//! or kill one client while the others go on. It stops gracefully (tasks
//! finish their hold and release) when its standard input closes.

use std::io::{self, Read as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use quorumlock::fenced::{FencedResource, Read, Write};
use quorumlock::{
    HeldLock, Hold, LockConfig, LockGuard, MultiLock, Owner, Quorum, RetryPolicy, Stamp, Wait,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;

use super::history::{self, HistoryWriter, Target, What};

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
}

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
    let lock = MultiLock::new(config);
    let _ = lock.warm_up().await;
    let resource = redis::Client::open(options.resource.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connecting to the resource: {e}"))?;

    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin(Arc::clone(&stop));
    let seq = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(options.tasks);
    for t in 0..options.tasks {
        let task = Task {
            options: options.clone(),
            lock: lock.clone(),
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
    Ok(())
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

struct Task {
    options: WorkerOptions,
    lock: MultiLock,
    resource: MultiplexedConnection,
    log: HistoryWriter,
    stop: Arc<AtomicBool>,
    seq: Arc<AtomicU64>,
    rng: StdRng,
}

/// The indexes (configuration order) of the nodes a guard holds, for
/// [`What::Won`].
pub fn held_indexes(guard: &LockGuard) -> Vec<usize> {
    guard
        .nodes()
        .enumerate()
        .filter(|(_, (_, h))| *h == Hold::Held)
        .map(|(i, _)| i)
        .collect()
}

/// The hold's validity deadline as a `CLOCK_MONOTONIC` stamp.
pub fn deadline_of(held: &HeldLock) -> history::Nanos {
    to_monotonic(held.deadline())
}

/// A stamp on the lock's deadline clock (`CLOCK_BOOTTIME`) as a stamp on
/// `CLOCK_MONOTONIC`; the two differ only by time spent suspended, so the
/// difference is taken now. Also right for a deadline in the past (a
/// paused holder's), which `validity()` would clamp to zero.
pub fn to_monotonic(stamp: Stamp) -> history::Nanos {
    let boot = Stamp::now();
    let mono = history::now();
    let ahead = stamp.saturating_since(boot).as_nanos() as u64;
    let behind = boot.saturating_since(stamp).as_nanos() as u64;
    (mono + ahead).saturating_sub(behind)
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

    async fn one_hold(&mut self) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let hold = format!("{}-{seq}", self.options.id);
        let long = match &self.options.long_key {
            Some(name) if self.rng.random_bool(0.03) => Some(name.clone()),
            _ => None,
        };
        let key = match &long {
            Some(name) => name.clone(),
            None => {
                let i = self.rng.random_range(0..self.options.keys.len());
                self.options.keys[i].clone()
            }
        };
        // An owner per call, logged, so that a key the run's prober finds
        // on a node is traced to the call that wrote it.
        let owner = Owner::new();
        self.log(What::AcquireStart {
            key: key.clone(),
            hold: hold.clone(),
            owner: Some(owner.token().to_string()),
        });
        let guard = match self
            .lock
            .acquire_as(&owner, &key, Wait::up_to(self.options.ttl * 2))
            .await
        {
            Ok(guard) => guard,
            Err(error) => {
                self.log(What::Failed {
                    key,
                    hold,
                    error: error.to_string(),
                });
                return;
            }
        };
        let held = guard.handle();
        let nodes = held_indexes(&guard);
        self.log(What::Won {
            key: key.clone(),
            hold: hold.clone(),
            deadline: deadline_of(&held),
            nodes,
        });
        let (done_tx, watcher) = self.watch_renewals(&held, &key, &hold);

        let token = match held.fencing_token().await {
            Ok(token) => {
                self.log(What::Token {
                    key: key.clone(),
                    hold: hold.clone(),
                    token,
                });
                Some(token)
            }
            Err(error) => {
                self.log(What::TokenFailed {
                    key: key.clone(),
                    hold: hold.clone(),
                    error: error.to_string(),
                });
                None
            }
        };
        self.update_counters(&held, &key, &hold, token, seq).await;
        if long.is_some() {
            // Work for 1–3 × the TTL: the watchdog must renew under faults.
            let work = self.options.ttl.mul_f64(self.rng.random_range(1.0..3.0));
            tokio::select! {
                _ = tokio::time::sleep(work) => {}
                _ = held.lost() => {}
            }
        } else {
            // A short, varied critical section.
            let work = Duration::from_micros(self.rng.random_range(0..2_000));
            tokio::time::sleep(work).await;
        }
        self.release(guard, done_tx, watcher, &key, &hold).await;
    }

    /// Logs each renewal of the hold (its new deadline) and the loss, until
    /// the hold is released.
    fn watch_renewals(
        &self,
        held: &HeldLock,
        key: &str,
        hold: &str,
    ) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let held = held.clone();
        let log = self.log.clone();
        let key = key.to_string();
        let hold = hold.to_string();
        let poll = self.options.ttl / 12;
        let watcher = tokio::spawn(async move {
            let mut last = held.last_renewal().map(|r| r.started);
            let lost = held.lost();
            tokio::pin!(lost);
            loop {
                tokio::select! {
                    _ = &mut done_rx => return,
                    notice = &mut lost => {
                        let deadline = to_monotonic(notice.deadline);
                        let _ = log.log(What::Lost {
                            key: key.clone(),
                            hold: hold.clone(),
                            deadline,
                            reason: notice.reason.to_string(),
                        });
                        return;
                    }
                    _ = tokio::time::sleep(poll) => {
                        let now = held.last_renewal().map(|r| r.started);
                        if now != last && held.is_held() {
                            last = now;
                            let _ = log.log(What::Renew {
                                key: key.clone(),
                                hold: hold.clone(),
                                deadline: deadline_of(&held),
                            });
                        }
                    }
                }
            }
        });
        (done_tx, watcher)
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

    async fn release(
        &self,
        guard: LockGuard,
        done_tx: oneshot::Sender<()>,
        watcher: tokio::task::JoinHandle<()>,
        key: &str,
        hold: &str,
    ) {
        let held = guard.handle();
        // Stop the watcher first: `lost()` also resolves on release, which
        // is not a loss.
        let _ = done_tx.send(());
        let _ = watcher.await;
        self.log(What::Release {
            key: key.to_string(),
            hold: hold.to_string(),
            deadline: deadline_of(&held),
            held: held.is_held(),
        });
        let _ = guard.release().await;
    }
}
