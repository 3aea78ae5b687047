//! quorumlock against rslock and the raw fan-out floor, side by side in one
//! run, on 5 local redis-server nodes started by the bench (TTL 10 s, library
//! defaults):
//!
//! * S1: one task, acquire + release in a loop: latency p50 / p99.
//! * S2: 32 tasks on distinct names: acquire + release operations per
//!   second, and the CPU time each operation costs the client process and
//!   the five servers together.
//! * S3: 8 workers of one process on one name, ~1 ms holds: acquisitions per
//!   second and the spread between workers (max / min).
//! * s3sep: the same with 8 worker processes (this binary, re-run as a
//!   worker): acquisitions per second, and the CPU time each acquisition
//!   costs the workers and the servers together; and how the name changes
//!   hands: the p50 from a release's start to the next hold's win (the
//!   *handover*, by the system clock the processes share) and the share of
//!   holds followed by one of the same worker.
//! * S4: one of the 5 nodes paused (SIGSTOP): acquire and release p50 / p99.
//! * S5: one of the 5 nodes killed: acquire p50 / p99; and, for
//!   quorumlock, paired: a lock service whose fifth node is down against
//!   one with every node up, timed round by round in turn (before S4).
//! * S6: nodes at different distances, as across zones: each node behind
//!   a proxy that delays both directions by its own latency (0.2, 0.5, 1,
//!   5 and 20 ms one way): acquire and release p50 / p99, beside the p50
//!   `PING` round trip of the quorum-th nearest node, the least a client
//!   that decides at the quorum can take.
//!
//! The floor is the least any Redlock client does: `SET key token NX PX`
//! sent concurrently to every node, decided when all answered, then a
//! compare-and-delete script on every node (retrying after a random pause
//! of up to 1 ms when the quorum was missed), over redis-rs multiplexed
//! connections.
//!
//! Prints a table of figures and ratios, and writes
//! `target/peers/report.json` and `target/peers/latency.svg` (the S1 and
//! S4 latency distributions).
//!
//! Run: `testbed/run bench peers` (or `cargo bench --bench peers`);
//! `QL_PEERS_SECS` sets the window of the throughput scenarios (default 5);
//! `QL_PEERS_ONLY=S2,s3sep` runs only those scenarios and
//! `QL_PEERS_CLIENTS=quorumlock` only those clients (for an A/B or a
//! profile: a missing client's figures print as NaN);
//! `QL_PEERS_COMMANDSTATS=1` prints each command's calls and µs inside the
//! servers per S2 operation and per s3sep acquisition (where the server
//! CPU goes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use quorumlock::{LockConfig, MultiLock, Wait};
use quorumlock_testbed::{NetFault, Proxy, Testbed};
use redis::aio::MultiplexedConnection;

const TTL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_millis(1);
/// The end of a hold that is spun, not slept (see [`hold`]).
const HOLD_SPIN: Duration = Duration::from_micros(200);
/// The most time S4 and S5 spend per client.
const S_FAULT_BUDGET: Duration = Duration::from_secs(15);
/// S6's one-way delays, one per node: nearby, same zone, next zone, and
/// two far regions. The proxies' timer ticks in whole ms, so a delay below
/// 1 ms takes about 1 ms: the round trips S6 reports are measured through
/// the proxies, not assumed.
const S6_DELAYS: [Duration; 5] = [
    Duration::from_micros(200),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_millis(5),
    Duration::from_millis(20),
];
/// The most time S6 spends per client (a round of a client that waits for
/// the farthest node takes over 80 ms).
const S6_BUDGET: Duration = Duration::from_secs(10);
const CAD: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The three clients under test, behind one interface.
#[derive(Clone)]
enum Client {
    Quorumlock(MultiLock),
    Rslock(rslock::LockManager),
    Floor(Arc<Vec<MultiplexedConnection>>),
}

/// What a client holds between acquire and release.
enum Held {
    Quorumlock(quorumlock::LockGuard),
    Rslock(rslock::Lock),
    Floor(String, String),
}

impl Client {
    async fn connect(kind: &str, urls: &[String]) -> Client {
        match kind {
            "quorumlock" => {
                let lock = MultiLock::new(
                    LockConfig::builder()
                        .nodes(urls.iter().cloned())
                        .ttl(TTL)
                        // QL_PEERS_WAKEUPS=0: without release notices, for an A/B.
                        .wake_ups(std::env::var("QL_PEERS_WAKEUPS").as_deref() != Ok("0"))
                        // QL_PEERS_FAIR=1: waiters queue across processes.
                        .fair(std::env::var("QL_PEERS_FAIR").as_deref() == Ok("1"))
                        .build()
                        .expect("valid"),
                );
                lock.warm_up().await;
                Client::Quorumlock(lock)
            }
            "rslock" => Client::Rslock(rslock::LockManager::new(urls.to_vec())),
            _ => {
                let conns = join_all(urls.iter().map(|u| connect(u))).await;
                Client::Floor(Arc::new(conns))
            }
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Client::Quorumlock(_) => "quorumlock",
            Client::Rslock(_) => "rslock",
            Client::Floor(_) => "floor",
        }
    }

    /// Acquires `name`, waiting (retrying) until it is won; `None` if it
    /// is not won within 5 s.
    async fn acquire(&self, name: &str) -> Option<Held> {
        match self {
            Client::Quorumlock(lock) => lock
                .acquire(name, Wait::up_to(Duration::from_secs(5)))
                .await
                .ok()
                .map(Held::Quorumlock),
            Client::Rslock(manager) => {
                let began = Instant::now();
                while began.elapsed() < Duration::from_secs(5) {
                    if let Ok(lock) = manager.lock(name.as_bytes(), TTL).await {
                        return Some(Held::Rslock(lock));
                    }
                }
                None
            }
            Client::Floor(conns) => {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let began = Instant::now();
                while began.elapsed() < Duration::from_secs(5) {
                    let won = join_all(conns.iter().map(|c| {
                        let mut c = c.clone();
                        let (name, token) = (name.to_owned(), token.clone());
                        async move {
                            redis::cmd("SET")
                                .arg(&name)
                                .arg(&token)
                                .arg("NX")
                                .arg("PX")
                                .arg(TTL.as_millis() as u64)
                                .query_async::<Option<String>>(&mut c)
                                .await
                                .ok()
                                .flatten()
                                .is_some()
                        }
                    }))
                    .await;
                    if won.iter().filter(|w| **w).count() > conns.len() / 2 {
                        return Some(Held::Floor(name.to_owned(), token));
                    }
                    floor_release(conns, name, &token).await;
                    let pause = rand::random::<u64>() % 1000;
                    tokio::time::sleep(Duration::from_micros(pause)).await;
                }
                None
            }
        }
    }

    async fn release(&self, held: Held) {
        match (self, held) {
            (_, Held::Quorumlock(guard)) => {
                guard.release().await;
            }
            (Client::Rslock(manager), Held::Rslock(lock)) => manager.unlock(&lock).await,
            (Client::Floor(conns), Held::Floor(name, token)) => {
                floor_release(conns, &name, &token).await
            }
            _ => unreachable!("held by another client"),
        }
    }
}

async fn floor_release(conns: &[MultiplexedConnection], name: &str, token: &str) {
    join_all(conns.iter().map(|c| {
        let mut c = c.clone();
        async move {
            let _ = redis::cmd("EVAL")
                .arg(CAD)
                .arg(1)
                .arg(name)
                .arg(token)
                .query_async::<i64>(&mut c)
                .await;
        }
    }))
    .await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Sequential acquire + release, `rounds` times: (acquire, release) latencies.
async fn latencies(client: &Client, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    latencies_within(client, rounds, Duration::MAX).await
}

/// [`latencies`], stopping early once `budget` has passed (a client that
/// waits out a paused node on every call would take minutes otherwise).
async fn latencies_within(
    client: &Client,
    rounds: usize,
    budget: Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut acquire, mut release) = (Vec::new(), Vec::new());
    let began = Instant::now();
    for i in 0..rounds {
        if began.elapsed() > budget {
            break;
        }
        let name = format!("s1:{}:{}", client.name(), i % 64);
        if let Some((took, gave_back)) = timed_round(client, &name).await {
            acquire.push(took);
            release.push(gave_back);
        }
    }
    acquire.sort_unstable();
    release.sort_unstable();
    (acquire, release)
}

/// One acquire and release of `name`: how long each took, or `None` if the
/// name was not won.
async fn timed_round(client: &Client, name: &str) -> Option<(Duration, Duration)> {
    let began = Instant::now();
    let held = client.acquire(name).await?;
    let won = Instant::now();
    client.release(held).await;
    Some((won - began, won.elapsed()))
}

/// S2: `tasks` tasks on distinct names for `window`: operations per second.
async fn throughput(client: &Client, tasks: usize, window: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (client, stop, done) = (client.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let name = format!("s2:{}:{t}", client.name());
                while !stop.load(Ordering::Relaxed) {
                    if let Some(held) = client.acquire(&name).await {
                        client.release(held).await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let began = Instant::now();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = began.elapsed();
    join_all(handles).await;
    done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}

/// One hold of a contention scenario: when it was won and when its
/// release began, in µs of the system clock (which every worker process
/// shares).
#[derive(Clone, Copy)]
struct Span {
    won: u64,
    releasing: u64,
}

/// µs since the Unix epoch.
fn wall_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// S3: `workers` workers of this process on one name, ~1 ms holds: (per
/// second, each worker's holds).
async fn contention(client: &Client, workers: usize, window: Duration) -> (f64, Vec<Vec<Span>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let name = format!("s3:{}", client.name());
                let mut spans = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(held) = client.acquire(&name).await {
                        let won = wall_micros();
                        hold().await;
                        let releasing = wall_micros();
                        client.release(held).await;
                        spans.push(Span { won, releasing });
                    }
                }
                spans
            })
        })
        .collect();
    let began = Instant::now();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = began.elapsed();
    let holds: Vec<Vec<Span>> = join_all(handles)
        .await
        .into_iter()
        .map(|r| r.expect("worker"))
        .collect();
    let total: usize = holds.iter().map(Vec::len).sum();
    (total as f64 / elapsed.as_secs_f64(), holds)
}

/// Each worker's count of holds.
fn counts(holds: &[Vec<Span>]) -> Vec<u64> {
    holds.iter().map(|h| h.len() as u64).collect()
}

/// How the name changed hands: the p50 µs from a release's start to the
/// next hold's win (the handover: what a hold costs beyond itself), and
/// the share of holds whose next one was won by the same worker.
fn handover(holds: &[Vec<Span>]) -> (f64, f64) {
    let mut all: Vec<(Span, usize)> = holds
        .iter()
        .enumerate()
        .flat_map(|(w, spans)| spans.iter().map(move |s| (*s, w)))
        .collect();
    all.sort_unstable_by_key(|(s, _)| s.won);
    let mut gaps: Vec<u64> = Vec::with_capacity(all.len());
    let mut same = 0usize;
    for pair in all.windows(2) {
        let ((before, w0), (after, w1)) = (pair[0], pair[1]);
        gaps.push(after.won.saturating_sub(before.releasing));
        same += usize::from(w0 == w1);
    }
    if gaps.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    gaps.sort_unstable();
    let p50 = gaps[gaps.len() / 2] as f64;
    (p50, 100.0 * same as f64 / gaps.len() as f64)
}

/// A ~1 ms hold, like work that waits on I/O: slept on a blocking-pool
/// thread, which burns no CPU (a hold that spins the whole time takes a
/// core from the nodes and the other workers, and its CPU counts as the
/// lock's), then spun for its last [`HOLD_SPIN`], as a thread's sleep
/// overshoots by tens of µs and the timer wheel ticks in whole ms.
async fn hold() {
    let until = Instant::now() + HOLD;
    tokio::task::spawn_blocking(|| std::thread::sleep(HOLD - HOLD_SPIN))
        .await
        .expect("hold thread");
    while Instant::now() < until {
        tokio::task::yield_now().await;
    }
}

/// The most acquisitions of one worker over the fewest (a worker with none
/// counts as one).
fn max_over_min(counts: &[u64]) -> f64 {
    let max = counts.iter().max().copied().unwrap_or(0);
    let min = counts.iter().min().copied().unwrap_or(0);
    max as f64 / min.max(1) as f64
}

/// s3sep: 8 processes of this binary, each a worker: acquisitions per second,
/// and each worker's holds.
fn contention_separate(kind: &str, urls: &[String], window: Duration) -> (f64, Vec<Vec<Span>>) {
    let exe = std::env::current_exe().expect("own path");
    let children: Vec<_> = (0..8)
        .map(|_| {
            std::process::Command::new(&exe)
                .env("QL_PEERS_WORKER", kind)
                .env("QL_PEERS_URLS", urls.join(","))
                .env("QL_PEERS_WINDOW_MS", window.as_millis().to_string())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("worker process")
        })
        .collect();
    // A worker prints one line per hold: when it was won and when its
    // release began.
    let holds: Vec<Vec<Span>> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("worker output");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| {
                    let (won, releasing) = line.split_once(' ')?;
                    Some(Span {
                        won: won.parse().ok()?,
                        releasing: releasing.parse().ok()?,
                    })
                })
                .collect()
        })
        .collect();
    let total: usize = holds.iter().map(Vec::len).sum();
    (total as f64 / window.as_secs_f64(), holds)
}

/// The body of a worker process: one worker on one name for the window.
fn worker(kind: &str) {
    let urls: Vec<String> = std::env::var("QL_PEERS_URLS")
        .expect("urls")
        .split(',')
        .map(str::to_owned)
        .collect();
    let window = Duration::from_millis(
        std::env::var("QL_PEERS_WINDOW_MS")
            .expect("window")
            .parse()
            .expect("ms"),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let holds = runtime.block_on(async {
        let client = Client::connect(kind, &urls).await;
        let (_, mut holds) = contention(&client, 1, window).await;
        holds.pop().unwrap_or_default()
    });
    for span in holds {
        println!("{} {}", span.won, span.releasing);
    }
}

#[derive(Default)]
struct Row {
    figures: BTreeMap<String, f64>,
}

impl Row {
    fn set(&mut self, name: &str, value: f64) {
        self.figures.insert(name.to_owned(), value);
    }

    /// p50 and p99 of sorted acquire and release latencies, in µs, as
    /// `"<scenario> acquire p50 µs"` and so on.
    fn record_latencies(
        &mut self,
        scenario: &'static str,
        acquire: &[Duration],
        release: &[Duration],
    ) {
        for (what, samples) in [("acquire", acquire), ("release", release)] {
            for (label, p) in [("p50", 0.5), ("p99", 0.99)] {
                self.set(
                    &format!("{scenario} {what} {label} µs"),
                    micros(percentile(samples, p)),
                );
            }
        }
    }
}

fn main() {
    if let Ok(kind) = std::env::var("QL_PEERS_WORKER") {
        worker(&kind);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` and the like
    }
    let window = Duration::from_secs(
        std::env::var("QL_PEERS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5),
    );
    let mut testbed = Testbed::start(5).expect("5 nodes");
    // A bench judges its own figures, not what its nodes keep.
    testbed.skip_leftover_check();
    let urls = testbed.urls();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // QL_PEERS_CLIENTS=quorumlock (say) runs only those clients, for a profile.
    let clients_wanted = std::env::var("QL_PEERS_CLIENTS").ok();
    let kinds: Vec<&str> = ["quorumlock", "rslock", "floor"]
        .into_iter()
        .filter(|kind| {
            clients_wanted
                .as_deref()
                .is_none_or(|list| list.split(',').any(|k| k == *kind))
        })
        .collect();
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    let mut s1_samples: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut s4_samples: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();

    let server_pids: Vec<u32> = testbed.nodes().iter().filter_map(|n| n.pid()).collect();
    let clients: Vec<Client> = runtime.block_on(async {
        let mut clients = Vec::new();
        for kind in &kinds {
            clients.push(Client::connect(kind, &urls).await);
        }
        clients
    });
    // QL_PEERS_ONLY=S2,s3sep (say) runs only those scenarios, for an A/B.
    let only = std::env::var("QL_PEERS_ONLY").ok();
    let want = |scenario: &str| {
        only.as_deref()
            .is_none_or(|list| list.split(',').any(|s| s == scenario))
    };
    for client in clients
        .iter()
        .filter(|_| want("S1") || want("S2") || want("S3"))
    {
        eprintln!("{}: S1, S2, S3", client.name());
        let row = rows.entry(client.name()).or_default();
        runtime.block_on(async {
            latencies(client, 200).await; // warm-up
            let (acquire, release) = latencies(client, 2000).await;
            row.record_latencies("S1", &acquire, &release);
            s1_samples.insert(client.name(), acquire);
            let cpu_before = (cpu_time("self"), server_cpu(&server_pids));
            let breakdown = std::env::var("QL_PEERS_COMMANDSTATS").is_ok();
            if breakdown {
                reset_command_stats(&urls).await;
            }
            let rate = throughput(client, 32, window).await;
            let ops = rate * window.as_secs_f64();
            if breakdown {
                print_command_stats(client.name(), "S2", &urls, ops).await;
            }
            row.set("S2 ops/s", rate);
            row.set(
                "S2 client CPU µs/op",
                micros(cpu_time("self") - cpu_before.0) / ops,
            );
            row.set(
                "S2 server CPU µs/op",
                micros(server_cpu(&server_pids) - cpu_before.1) / ops,
            );
            let (rate, holds) = contention(client, 8, window).await;
            row.set("S3 acq/s", rate);
            row.set("S3 max/min", max_over_min(&counts(&holds)));
        });
    }
    for kind in kinds.iter().filter(|_| want("s3sep")) {
        eprintln!("{kind}: s3sep");
        let breakdown = std::env::var("QL_PEERS_COMMANDSTATS").is_ok();
        if breakdown {
            runtime.block_on(reset_command_stats(&urls));
        }
        let before = (children_cpu(), server_cpu(&server_pids));
        let (rate, holds) = contention_separate(kind, &urls, window);
        let workers = children_cpu() - before.0;
        let servers = server_cpu(&server_pids) - before.1;
        let acquisitions = rate * window.as_secs_f64();
        if breakdown {
            runtime.block_on(print_command_stats(kind, "s3sep", &urls, acquisitions));
        }
        let row = rows.entry(kind).or_default();
        row.set("s3sep acq/s", rate);
        row.set("s3sep max/min", max_over_min(&counts(&holds)));
        let (gap, same) = handover(&holds);
        row.set("s3sep handover p50 µs", gap);
        row.set("s3sep same worker next %", same);
        row.set("s3sep CPU µs/acq", micros(workers + servers) / acquisitions);
        row.set("s3sep server CPU µs/acq", micros(servers) / acquisitions);
    }
    if want("S6") {
        s6(&runtime, &testbed, &kinds, &mut rows);
    }
    if !(want("S4") || want("S5")) {
        report(&rows, &s1_samples, &s4_samples);
        return;
    }
    // S5, paired: before any fault, while every node is up.
    if want("S5") && kinds.contains(&"quorumlock") {
        eprintln!("quorumlock: S5 paired");
        let [up, down] = runtime.block_on(dead_node_paired(&urls, 1000));
        let row = rows.entry("quorumlock").or_default();
        row.record_latencies("S5 paired all up", &up.0, &up.1);
        row.record_latencies("S5 paired one down", &down.0, &down.1);
    }
    // S4: node 4 paused.
    testbed.node_mut(4).pause().expect("pause node 4");
    for client in &clients {
        eprintln!("{}: S4", client.name());
        let row = rows.entry(client.name()).or_default();
        runtime.block_on(async {
            let (acquire, release) = latencies_within(client, 300, S_FAULT_BUDGET).await;
            row.set("S4 rounds", acquire.len() as f64);
            row.record_latencies("S4", &acquire, &release);
            s4_samples.insert(client.name(), acquire);
        });
    }
    testbed.node_mut(4).resume().expect("resume node 4");
    // S5: node 4 killed.
    testbed.node_mut(4).kill().expect("kill node 4");
    for client in &clients {
        eprintln!("{}: S5", client.name());
        let row = rows.entry(client.name()).or_default();
        runtime.block_on(async {
            let (acquire, _) = latencies_within(client, 300, S_FAULT_BUDGET).await;
            row.set("S5 acquire p50 µs", micros(percentile(&acquire, 0.5)));
            row.set("S5 acquire p99 µs", micros(percentile(&acquire, 0.99)));
        });
    }
    report(&rows, &s1_samples, &s4_samples);
}

/// S5, paired: quorumlock with every node up, and a second lock service of
/// the same process whose fifth node is down (a closed port, which refuses
/// connections as a killed node's does), timed round by round in turn,
/// each side first in every other round, on the same servers in the same
/// seconds: the machine's drift between scenarios (±15 % over a day here)
/// cancels out of the ratio. Each side warms up first, the down node's
/// failed connects included. Returns each side's sorted (acquire,
/// release) latencies, all up first.
async fn dead_node_paired(urls: &[String], rounds: usize) -> [(Vec<Duration>, Vec<Duration>); 2] {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let dead = format!("redis://{}", closed.local_addr().expect("its address"));
    drop(closed);
    let mut down = urls.to_vec();
    *down.last_mut().expect("5 nodes") = dead;
    let sides = [
        ("up", Client::connect("quorumlock", urls).await),
        ("down", Client::connect("quorumlock", &down).await),
    ];
    for (_, side) in &sides {
        latencies(side, 200).await;
    }
    let mut samples: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for i in 0..rounds {
        for k in [i % 2, 1 - i % 2] {
            let (label, side) = &sides[k];
            let name = format!("s5p:{label}:{}", i % 64);
            if let Some((took, gave_back)) = timed_round(side, &name).await {
                samples[k].0.push(took);
                samples[k].1.push(gave_back);
            }
        }
    }
    for (acquire, release) in &mut samples {
        acquire.sort_unstable();
        release.sort_unstable();
    }
    samples
}

/// S6: every node behind a delaying proxy ([`S6_DELAYS`]); each client
/// connects through them, warms up, and is timed as in S1.
fn s6<'a>(
    runtime: &tokio::runtime::Runtime,
    testbed: &Testbed,
    kinds: &[&'a str],
    rows: &mut BTreeMap<&'a str, Row>,
) {
    let proxies: Vec<Proxy> = testbed
        .nodes()
        .iter()
        .zip(S6_DELAYS)
        .map(|(node, latency)| {
            let proxy = Proxy::start(node.addr()).expect("proxy");
            proxy
                .set_fault(NetFault::Delay {
                    latency,
                    jitter: Duration::ZERO,
                })
                .expect("delay");
            proxy
        })
        .collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let trips = runtime.block_on(round_trips(&urls));
    // The quorum-th nearest node: no client that needs a majority can
    // have it sooner.
    let quorum_trip = micros(trips[urls.len() / 2]);
    eprintln!(
        "S6 round trips p50 (µs): {:?}",
        trips.iter().map(|t| micros(*t).round()).collect::<Vec<_>>()
    );
    for kind in kinds {
        eprintln!("{kind}: S6");
        let row = rows.entry(*kind).or_default();
        runtime.block_on(async {
            let client = Client::connect(kind, &urls).await;
            latencies_within(&client, 20, S6_BUDGET).await; // warm-up
            let (acquire, release) = latencies_within(&client, 300, S6_BUDGET).await;
            row.set("S6 rounds", acquire.len() as f64);
            row.record_latencies("S6", &acquire, &release);
            row.set("S6 quorum RTT p50 µs", quorum_trip);
        });
    }
}

/// A connection of the bench's own to `url` (a node, or a proxy before it).
async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The p50 `PING` round trip through each of `urls`, sorted, nearest first.
async fn round_trips(urls: &[String]) -> Vec<Duration> {
    let mut trips = Vec::new();
    for url in urls {
        let mut conn = connect(url).await;
        let mut samples = Vec::new();
        for _ in 0..30 {
            let began = Instant::now();
            let _: String = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .expect("PING through the proxy");
            samples.push(began.elapsed());
        }
        samples.sort_unstable();
        trips.push(percentile(&samples, 0.5));
    }
    trips.sort_unstable();
    trips
}

/// User + system CPU time of process `pid` ("self" for this one), from
/// `/proc/<pid>/stat` (clock ticks of 10 ms: read over seconds).
fn cpu_time(pid: &str) -> Duration {
    stat_ticks(pid, [11, 12])
}

/// CPU time of this process's children that have ended (the s3sep
/// workers, once reaped).
fn children_cpu() -> Duration {
    stat_ticks("self", [13, 14])
}

/// The sum of two tick fields of `/proc/<pid>/stat`, counted from the
/// field after the command name (which is in parentheses).
fn stat_ticks(pid: &str, fields: [usize; 2]) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let values: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .iter()
        .filter_map(|&i| values.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}

/// `QL_PEERS_COMMANDSTATS=1`: zeroes every node's `INFO commandstats`
/// before S2 and s3sep, so that [`print_command_stats`] shows where their
/// server time goes.
async fn reset_command_stats(urls: &[String]) {
    for url in urls {
        let mut c = connect(url).await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .expect("resetstat");
    }
}

/// Prints, summed over the nodes, each command's calls and µs inside
/// Redis per S2 operation (acquire + release): what the servers' CPU time
/// beyond the commands' own is (reading, parsing, replying) shows beside
/// the S2 server CPU figure.
async fn print_command_stats(client: &str, scenario: &str, urls: &[String], ops: f64) {
    let mut totals: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for url in urls {
        let mut c = connect(url).await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await
            .expect("info");
        for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
            let (name, rest) = line["cmdstat_".len()..].split_once(':').unwrap_or(("", ""));
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let entry = totals.entry(name.to_owned()).or_default();
            entry.0 += field("calls=");
            entry.1 += field("usec=");
        }
    }
    for (name, (calls, usec)) in totals {
        eprintln!(
            "{client} {scenario} {name}: {:.2} calls/op, {:.2} µs/op",
            calls / ops,
            usec / ops
        );
    }
}

fn server_cpu(pids: &[u32]) -> Duration {
    pids.iter().map(|p| cpu_time(&p.to_string())).sum()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Figure `name` of client `kind`, NaN when it was not measured.
fn figure(rows: &BTreeMap<&str, Row>, kind: &str, name: &str) -> f64 {
    rows.get(kind)
        .and_then(|row| row.figures.get(name))
        .copied()
        .unwrap_or(f64::NAN)
}

fn report(
    rows: &BTreeMap<&str, Row>,
    s1: &BTreeMap<&str, Vec<Duration>>,
    s4: &BTreeMap<&str, Vec<Duration>>,
) {
    let q = |name: &str| figure(rows, "quorumlock", name);
    let names: Vec<&str> = rows
        .get("quorumlock")
        .map(|row| row.figures.keys().map(String::as_str).collect())
        .unwrap_or_default();
    println!(
        "\n{:<22} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "scenario", "quorumlock", "rslock", "floor", "q/rslock", "q/floor"
    );
    for name in &names {
        let get = |kind: &str| figure(rows, kind, name);
        let (qv, rv, fv) = (get("quorumlock"), get("rslock"), get("floor"));
        println!(
            "{:<22} {:>12.1} {:>12.1} {:>12.1} {:>10.3} {:>10.3}",
            name,
            qv,
            rv,
            fv,
            qv / rv,
            qv / fv
        );
    }
    let q1 = q("S1 acquire p50 µs");
    println!(
        "\nquorumlock S4 / S1 (acquire p50, p99; release p50, p99): {:.2} {:.2} {:.2} {:.2}; S5 / S1 acquire (p50, p99): {:.2} {:.2}",
        q("S4 acquire p50 µs") / q1,
        q("S4 acquire p99 µs") / q("S1 acquire p99 µs"),
        q("S4 release p50 µs") / q("S1 release p50 µs"),
        q("S4 release p99 µs") / q("S1 release p99 µs"),
        q("S5 acquire p50 µs") / q1,
        q("S5 acquire p99 µs") / q("S1 acquire p99 µs"),
    );
    println!(
        "S5 paired, one node down ÷ all up, round by round in one window (acquire p50, p99): {:.2} {:.2}",
        q("S5 paired one down acquire p50 µs") / q("S5 paired all up acquire p50 µs"),
        q("S5 paired one down acquire p99 µs") / q("S5 paired all up acquire p99 µs"),
    );
    let s6 = |kind: &str| {
        figure(rows, kind, "S6 acquire p50 µs") / figure(rows, kind, "S6 quorum RTT p50 µs")
    };
    println!(
        "S6 acquire p50 / the quorum-th nearest node's round trip: quorumlock {:.2}, rslock {:.2}, floor {:.2}",
        s6("quorumlock"),
        s6("rslock"),
        s6("floor"),
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/peers");
    let _ = std::fs::create_dir_all(&dir);
    let json: serde_json::Map<String, serde_json::Value> = rows
        .iter()
        .map(|(kind, row)| {
            (
                kind.to_string(),
                serde_json::Value::Object(
                    row.figures
                        .iter()
                        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
                        .collect(),
                ),
            )
        })
        .collect();
    let _ = std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    );
    let _ = std::fs::write(dir.join("latency.svg"), svg(s1, s4));
    println!("wrote {}/report.json and latency.svg", dir.display());
}

/// Cumulative distributions of the acquire latencies, S1 and S4, one line
/// per client, on a log time axis.
fn svg(s1: &BTreeMap<&str, Vec<Duration>>, s4: &BTreeMap<&str, Vec<Duration>>) -> String {
    let (w, h, pad) = (720.0, 360.0, 50.0);
    let (lo, hi) = (50f64.ln(), 1_000_000f64.ln()); // 50 µs .. 1 s
    let x = |us: f64| pad + (us.max(50.0).ln() - lo) / (hi - lo) * (w - 2.0 * pad);
    let y = |p: f64| h - pad - p * (h - 2.0 * pad);
    let colour = |kind: &str| match kind {
        "quorumlock" => "#1f77b4",
        "rslock" => "#d62728",
        _ => "#7f7f7f",
    };
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    for us in [100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0] {
        out += &format!(
            "<line x1='{0}' x2='{0}' y1='{1}' y2='{2}' stroke='#ddd'/><text x='{0}' y='{3}' text-anchor='middle'>{4}</text>\n",
            x(us),
            y(0.0),
            y(1.0),
            h - pad + 15.0,
            if us < 1000.0 {
                format!("{us} µs")
            } else {
                format!("{} ms", us / 1000.0)
            }
        );
    }
    for (set, dash) in [(s1, ""), (s4, "stroke-dasharray='4 3'")] {
        for (kind, samples) in set {
            if samples.is_empty() {
                continue;
            }
            let points: Vec<String> = samples
                .iter()
                .enumerate()
                .step_by((samples.len() / 200).max(1))
                .map(|(i, d)| {
                    format!(
                        "{:.1},{:.1}",
                        x(micros(*d)),
                        y(i as f64 / samples.len() as f64)
                    )
                })
                .collect();
            out += &format!(
                "<polyline fill='none' stroke='{}' {dash} points='{}'/>\n",
                colour(kind),
                points.join(" ")
            );
        }
    }
    out += &format!(
        "<text x='{pad}' y='20'>acquire latency CDF, 5 nodes: solid S1 (all up), dashed S4 (one paused); blue quorumlock, red rslock, grey floor</text>\n</svg>\n"
    );
    out
}
