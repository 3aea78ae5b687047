//! The faults of the docker chaos run: what happens to hosts and networks
//! in production, done to the containers of `testbed/docker-compose.yml`.
//!
//! | kind | how | in production |
//! |---|---|---|
//! | `container_pause` | `docker pause` 0.5–2 s, `unpause` | a frozen host or VM (live migration, a stalled hypervisor): connections stay open, nothing answers |
//! | `container_kill_aof` | `docker kill`, `start` at once (AOF, `appendfsync always`) | a crashed server that restarts with every acknowledged write |
//! | `container_kill_empty` | `docker kill`, `start` at once (no persistence) | a crash that loses the node's locks; the quarantine keeps it out of every quorum for the TTL |
//! | `restart_at_second` | `docker kill`, `start` timed so the server starts just before a wall-clock second boundary (up to 3 crashes and starts until one lands in the last 40 % of a second) | the same crash, with the node's age (whole-second uptime) at its most misleading |
//! | `sentinel_failover` | cut the group's replication link (iptables in the replica's namespace), 0.3–0.8 s of writes on the master alone, `SENTINEL FAILOVER`, heal | a failover to a replica that missed recent locks |
//! | `net_disconnect` | `docker network disconnect` 0.5–2 s, `connect` on the same address | a partition: packets go nowhere, both ways |
//! | `net_drop_requests` | iptables in the node's namespace drops what arrives for its port, 0.5–2 s | a one-way partition: requests lost |
//! | `net_drop_replies` | iptables drops what leaves its port, 0.5–2 s | the other way: requests carried out, replies lost (the client cannot know it holds a key) |
//! | `client_pause` | `SIGSTOP` a worker for 1.5–2.5 × TTL | a GC pause or descheduled client |
//! | `client_crash` | `SIGKILL` a worker, start another | a crashed client |
//!
//! Three lanes inject side by side (node: the first five; link: the
//! `net_*`; client), and no two lanes fault one lock node at once.

use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::ChaosError;
use super::book::FaultBook;
use super::cluster::lock_keys_on;
use super::faults::Lane;
use super::node_spec::sentinel_spec;
use super::workers::Workers;
use crate::docker::{Container, Deployment, Drops, Rule, group};
use crate::{Persistence, TestbedError};

/// One kind of container-level fault. Every kind is one the lock must
/// survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DockerFault {
    /// `docker pause`, then `unpause`.
    ContainerPause,
    /// `docker kill` and `start` of a node with an AOF.
    ContainerKillAof,
    /// `docker kill` and `start` of a node without persistence.
    ContainerKillEmpty,
    /// The same, started just before a wall-clock second boundary.
    RestartAtSecond,
    /// A Sentinel failover to a replica whose link was cut first.
    SentinelFailover,
    /// `docker network disconnect`, then `connect`.
    NetDisconnect,
    /// Requests to the node dropped (iptables, in its namespace).
    NetDropRequests,
    /// Replies from the node dropped.
    NetDropReplies,
    /// A worker stopped past its validity.
    ClientPause,
    /// A worker killed and replaced.
    ClientCrash,
}

impl DockerFault {
    /// Every kind, in a fixed order.
    pub const ALL: [DockerFault; 10] = [
        DockerFault::ContainerPause,
        DockerFault::ContainerKillAof,
        DockerFault::ContainerKillEmpty,
        DockerFault::RestartAtSecond,
        DockerFault::SentinelFailover,
        DockerFault::NetDisconnect,
        DockerFault::NetDropRequests,
        DockerFault::NetDropReplies,
        DockerFault::ClientPause,
        DockerFault::ClientCrash,
    ];

    /// The name used in the history, the report and `--faults` (the client
    /// kinds share the native run's names, which the checker knows).
    pub fn name(self) -> &'static str {
        match self {
            DockerFault::ContainerPause => "container_pause",
            DockerFault::ContainerKillAof => "container_kill_aof",
            DockerFault::ContainerKillEmpty => "container_kill_empty",
            DockerFault::RestartAtSecond => "restart_at_second",
            DockerFault::SentinelFailover => "sentinel_failover",
            DockerFault::NetDisconnect => "net_disconnect",
            DockerFault::NetDropRequests => "net_drop_requests",
            DockerFault::NetDropReplies => "net_drop_replies",
            DockerFault::ClientPause => "client_pause",
            DockerFault::ClientCrash => "client_crash",
        }
    }

    /// Which lane injects it.
    pub fn lane(self) -> Lane {
        match self {
            DockerFault::ContainerPause
            | DockerFault::ContainerKillAof
            | DockerFault::ContainerKillEmpty
            | DockerFault::RestartAtSecond
            | DockerFault::SentinelFailover => Lane::Node,
            DockerFault::NetDisconnect
            | DockerFault::NetDropRequests
            | DockerFault::NetDropReplies => Lane::Link,
            DockerFault::ClientPause | DockerFault::ClientCrash => Lane::Client,
        }
    }

    /// Whether it can hit a lock node of `role`.
    fn fits(self, role: Role) -> bool {
        match self {
            DockerFault::ContainerKillAof => role == Role::Aof,
            DockerFault::ContainerKillEmpty | DockerFault::RestartAtSecond => {
                role == Role::Volatile
            }
            DockerFault::SentinelFailover => role == Role::Group,
            _ => true,
        }
    }
}

impl fmt::Display for DockerFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DockerFault {
    type Err = ChaosError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DockerFault::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                ChaosError::Options(format!(
                    "unknown docker fault kind {s:?}; the kinds are: {}",
                    DockerFault::ALL.map(DockerFault::name).join(", ")
                ))
            })
    }
}

/// Parses a comma-separated list of docker fault names (`all` for every
/// kind).
///
/// # Errors
///
/// [`ChaosError::Options`] naming an unknown kind.
pub fn parse_list(list: &str) -> Result<Vec<DockerFault>, ChaosError> {
    if list.trim() == "all" {
        return Ok(DockerFault::ALL.to_vec());
    }
    let mut kinds = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(DockerFault::from_str)
        .collect::<Result<Vec<_>, _>>()?;
    kinds.sort();
    kinds.dedup();
    Ok(kinds)
}

/// How a lock node of the run can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An independent node with an AOF (`appendfsync always`).
    Aof,
    /// An independent node without persistence.
    Volatile,
    /// The Sentinel group.
    Group,
}

/// The lock nodes of a docker run: the first `n − 1` independent nodes and
/// the Sentinel group, each behind a slot that the lane faulting it holds.
pub struct Stage<'a> {
    /// The deployment.
    pub deployment: &'a Deployment,
    /// Per lock node: `Some(i)` for `deployment.nodes[i]`, `None` for the
    /// group.
    members: Vec<Option<usize>>,
    slots: Vec<Mutex<()>>,
    /// How long `docker start` takes lately (for `restart_at_second`).
    start_latency: Mutex<Duration>,
}

/// How long `docker start` takes to start the process, before the first
/// start was measured (each start then adjusts it).
const FIRST_START_GUESS: Duration = Duration::from_millis(500);
/// How long before a wall-clock second boundary `restart_at_second` aims
/// the server's start: late in the second, so that clients that connect
/// after the boundary find an uptime of 1 s in a server that ran for a
/// fraction of it (the start time varies with the machine's load by a
/// good part of this).
const BEFORE_BOUNDARY: Duration = Duration::from_millis(150);
/// A start this far into its second (or later) is just before the
/// boundary; an earlier one is tried again.
const LATE_IN_SECOND: f64 = 0.6;
/// How many kills and starts one `restart_at_second` makes at most to land
/// one just before a boundary.
const START_TRIES: u32 = 3;
/// How long a failover (or the resync before one) may take.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

impl<'a> Stage<'a> {
    /// `n` lock nodes (3 to 6): `node1`… then the group.
    ///
    /// # Errors
    ///
    /// [`ChaosError::Options`] for another `n`.
    pub fn new(deployment: &'a Deployment, n: usize) -> Result<Stage<'a>, ChaosError> {
        if !(3..=deployment.nodes.len() + 1).contains(&n) {
            return Err(ChaosError::Options(format!(
                "--nodes {n}: the docker run has 3 to {} lock nodes (node1… and the Sentinel group)",
                deployment.nodes.len() + 1
            )));
        }
        let members: Vec<Option<usize>> = (0..n - 1).map(Some).chain([None]).collect();
        Ok(Stage {
            deployment,
            slots: members.iter().map(|_| Mutex::new(())).collect(),
            members,
            start_latency: Mutex::new(FIRST_START_GUESS),
        })
    }

    /// The lock nodes as workers name them: the independent nodes' URLs,
    /// then the group's Sentinel word.
    pub fn urls(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| match m {
                Some(i) => self.deployment.nodes[*i].container.url(),
                None => sentinel_spec(
                    group::SERVICE,
                    group::REPLICA_LAG,
                    &self.deployment.group.sentinel_urls(),
                ),
            })
            .collect()
    }

    /// How lock node `i` can fail.
    pub fn role(&self, i: usize) -> Role {
        match self.members[i] {
            None => Role::Group,
            Some(k) if self.deployment.nodes[k].persistence == Persistence::AofAlways => Role::Aof,
            Some(_) => Role::Volatile,
        }
    }

    /// The container clients of lock node `i` reach now (the group's
    /// current master).
    ///
    /// # Errors
    ///
    /// When the sentinels do not answer.
    pub fn serving(&self, i: usize) -> Result<&Container, TestbedError> {
        match self.members[i] {
            Some(k) => Ok(&self.deployment.nodes[k].container),
            None => self.deployment.group.master(),
        }
    }

    /// `n<i>` and the service, for the history.
    fn target(&self, i: usize) -> String {
        match self.members[i] {
            Some(k) => format!("n{i} ({})", self.deployment.nodes[k].container.service),
            None => format!("n{i} (group)"),
        }
    }

    /// Locks a free lock node whose role `fits`, trying for a bounded while.
    fn free_slot(
        &self,
        rng: &mut StdRng,
        fits: impl Fn(Role) -> bool,
        running: &dyn Fn() -> bool,
    ) -> Option<(usize, MutexGuard<'_, ()>)> {
        let mut candidates: Vec<usize> = (0..self.members.len())
            .filter(|&i| fits(self.role(i)))
            .collect();
        for _ in 0..100 {
            candidates.shuffle(rng);
            for &i in &candidates {
                if let Ok(guard) = self.slots[i].try_lock() {
                    return Some((i, guard));
                }
            }
            if !running() {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `docker start` and the wait for `PING`. Returns when the process
    /// started (`StartedAt`, epoch seconds); the time from the call to
    /// that start adjusts [`Injector::restart_at_second`]'s aim.
    fn start(&self, c: &Container) -> Result<f64, TestbedError> {
        let invoked = wall_secs(SystemTime::now());
        c.start_only()?;
        let started = c.started_at()?;
        let took = Duration::from_secs_f64((started - invoked).clamp(0.0, 5.0));
        let mut latency = self
            .start_latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *latency = (*latency + took) / 2;
        drop(latency);
        c.wait_ready(crate::docker::container::READY_LIMIT)?;
        Ok(started)
    }

    /// Puts every lock node back to normal: running, unpaused, on its
    /// network; the group's replica in sync.
    ///
    /// # Errors
    ///
    /// The first step that failed.
    pub fn heal_all(&self) -> Result<(), TestbedError> {
        let d = self.deployment;
        for c in d.nodes.iter().map(|n| &n.container).chain(&d.group.servers) {
            if !c.is_running()? {
                self.start(c)?;
            }
            if c.is_paused()? {
                c.unpause()?;
            }
            if !c.is_connected()? {
                c.connect()?;
            }
        }
        d.group.wait_in_sync(FAILOVER_LIMIT)
    }

    /// The lock keys on every lock node (fencing counters and epoch
    /// markers excluded: they are meant to stay), as `n<i>:<key>`.
    ///
    /// # Errors
    ///
    /// When a node does not answer.
    pub fn lock_keys(&self) -> Result<Vec<String>, TestbedError> {
        let mut found = Vec::new();
        for i in 0..self.members.len() {
            found.extend(lock_keys_on(&mut self.serving(i)?.connection()?, i)?);
        }
        found.sort();
        Ok(found)
    }
}

/// What a lane needs to inject.
pub struct Injector<'a> {
    /// The lock nodes.
    pub stage: &'a Stage<'a>,
    /// The fault book.
    pub book: &'a FaultBook,
    /// The workers (client faults).
    pub workers: &'a Workers,
    /// The locks' TTL.
    pub ttl: Duration,
    /// Whether faults are still being injected.
    pub running: &'a (dyn Fn() -> bool + Sync),
}

fn millis(rng: &mut StdRng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..=hi))
}

impl Injector<'_> {
    /// Runs one lane: the `kinds` in shuffled rounds, with a short gap after
    /// each, until the run's faults end. A fault that could not be
    /// injected is a problem noted in the history.
    pub fn run_lane(&self, kinds: &[DockerFault], mut rng: StdRng) {
        let mut cycle: Vec<DockerFault> = Vec::new();
        while (self.running)() {
            if cycle.is_empty() {
                cycle = kinds.to_vec();
                cycle.shuffle(&mut rng);
            }
            let Some(kind) = cycle.pop() else { break };
            if let Err(e) = self.inject(kind, &mut rng) {
                self.book.problem(format!("{kind}: {e}"));
            }
            let gap = match kind.lane() {
                Lane::Client => millis(&mut rng, 800, 2_000),
                Lane::Node | Lane::Link => millis(&mut rng, 200, 700),
            };
            thread::sleep(gap);
        }
    }

    /// Injects one fault of `kind`.
    ///
    /// # Errors
    ///
    /// The step that failed (the fault's end is logged all the same).
    pub fn inject(&self, kind: DockerFault, rng: &mut StdRng) -> Result<(), ChaosError> {
        match kind {
            DockerFault::ClientPause => return self.client_pause(rng),
            DockerFault::ClientCrash => return self.client_crash(rng),
            _ => {}
        }
        let Some((i, _slot)) = self.stage.free_slot(rng, |r| kind.fits(r), self.running) else {
            return Ok(());
        };
        let target = self.stage.target(i);
        match kind {
            DockerFault::SentinelFailover => self.failover(&target, rng),
            DockerFault::RestartAtSecond => self.restart_at_second(self.stage.serving(i)?, &target),
            _ => self.container_fault(kind, self.stage.serving(i)?, &target, rng),
        }
    }

    /// The faults of one container that hold for a while or restart it.
    fn container_fault(
        &self,
        kind: DockerFault,
        c: &Container,
        target: &str,
        rng: &mut StdRng,
    ) -> Result<(), ChaosError> {
        let d = millis(rng, 500, 2_000);
        let (detail, result) = match kind {
            DockerFault::ContainerKillAof => {
                let fault = self.book.start(
                    kind.name(),
                    target,
                    "docker kill, start at once with its AOF (appendfsync always)".into(),
                );
                let result = c.kill().and_then(|()| self.stage.start(c));
                self.book.end(fault);
                return Ok(result.map(drop)?);
            }
            DockerFault::ContainerKillEmpty => {
                let fault = self.book.start(
                    kind.name(),
                    target,
                    "docker kill, start at once, empty (quarantined for the TTL)".into(),
                );
                let result = c.kill().and_then(|()| self.stage.start(c));
                self.book.end(fault);
                self.note_epoch(kind, c, target, result?);
                return Ok(());
            }
            DockerFault::ContainerPause => (format!("docker pause for {d:?}"), Held::Pause),
            DockerFault::NetDisconnect => (
                format!(
                    "docker network disconnect for {d:?}, then connect on {}",
                    c.ip
                ),
                Held::Disconnect,
            ),
            DockerFault::NetDropRequests => (
                format!(
                    "iptables in its namespace drops what arrives for port {} for {d:?}",
                    c.port
                ),
                Held::Drop(Rule::requests_in(c.port)),
            ),
            DockerFault::NetDropReplies => (
                format!(
                    "iptables in its namespace drops what leaves port {} for {d:?}",
                    c.port
                ),
                Held::Drop(Rule::replies_out(c.port)),
            ),
            _ => return Ok(()),
        };
        let fault = self.book.start(kind.name(), target, detail);
        let result = result.hold(c, d);
        self.book.end(fault);
        Ok(result?)
    }

    /// `restart_at_second`: kill, then start so that the server starts
    /// [`BEFORE_BOUNDARY`] before a wall-clock second boundary; notes in the
    /// history where the start landed.
    fn restart_at_second(&self, c: &Container, target: &str) -> Result<(), ChaosError> {
        let kind = DockerFault::RestartAtSecond;
        let fault = self.book.start(
            kind.name(),
            target,
            format!("docker kill, start timed to begin {BEFORE_BOUNDARY:?} before a wall-clock second boundary, empty (quarantined for the TTL)"),
        );
        // A start that missed the window (docker start's time varies with
        // the machine's load) is followed by another crash and start.
        let result = (|| {
            let mut tries = 0;
            loop {
                tries += 1;
                c.kill()?;
                let lead = *self
                    .stage
                    .start_latency
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                thread::sleep(wait_for_aim(SystemTime::now(), lead, BEFORE_BOUNDARY));
                let started = self.stage.start(c)?;
                let ready = wall_secs(SystemTime::now());
                let uptime = uptime_secs(c)?;
                if started.fract() >= LATE_IN_SECOND || tries == START_TRIES {
                    return Ok::<_, TestbedError>((started, ready, uptime, tries));
                }
            }
        })();
        self.book.end(fault);
        let (started, ready, uptime, tries) = result?;
        let into = started.fract();
        self.book.note(format!(
            "restart_at_second {target}: the server started {:.0} ms into a second ({}; aimed at {:.0} ms; \
             start {tries} of at most {START_TRIES}), answered {:.0} ms later with uptime_in_seconds {uptime}",
            into * 1e3,
            if into >= LATE_IN_SECOND { "just before the boundary" } else { "missed the aim" },
            1e3 - BEFORE_BOUNDARY.as_secs_f64() * 1e3,
            (ready - started) * 1e3,
        ));
        self.note_epoch(DockerFault::RestartAtSecond, c, target, started);
        Ok(())
    }

    /// Notes how the epoch the clients gave a node that restarted empty
    /// (at `started`, epoch seconds) is dated against that start: the
    /// first client to connect writes it (`quorumlock:epoch`, its start in
    /// ms on the server's clock, which is the host's). Dated before the
    /// start, the quarantine ends that much early (DESIGN.md, rule 13).
    /// Waits a bounded while for a client to connect; notes nothing when
    /// none did.
    fn note_epoch(&self, kind: DockerFault, c: &Container, target: &str, started: f64) {
        let end = std::time::Instant::now() + EPOCH_WAIT;
        while std::time::Instant::now() < end {
            if let Ok(Some(epoch_ms)) = epoch_start_ms(c) {
                let early = started * 1e3 - epoch_ms as f64;
                self.book.note(format!(
                    "{kind} {target}: its new epoch is dated {:.0} ms {} the server started{}",
                    early.abs(),
                    if early > 0.0 { "before" } else { "after" },
                    if early > 0.0 {
                        " (its quarantine ends that much early)"
                    } else {
                        ""
                    }
                ));
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `sentinel_failover`: the replica in sync first (outside the fault),
    /// then cut, writes on the master alone, `SENTINEL FAILOVER`, heal.
    fn failover(&self, target: &str, rng: &mut StdRng) -> Result<(), ChaosError> {
        let group = &self.stage.deployment.group;
        group.wait_ready_for_failover(FAILOVER_LIMIT)?;
        let lag = millis(rng, 300, 800);
        let old = group.master()?.service.clone();
        // Started once the link is cut (see the local mix's failover): a
        // write sent while the rule goes in still reaches the replica.
        let cut = group.cut_link()?;
        let fault = self.book.start(
            DockerFault::SentinelFailover.name(),
            target,
            format!("replication link cut (iptables in the replica's namespace), {lag:?} of writes on {old} alone, SENTINEL FAILOVER"),
        );
        let result = (|| {
            thread::sleep(lag);
            let promoted = group.fail_over(FAILOVER_LIMIT);
            // The old master must reach the new one to become its replica.
            let healed = cut.remove();
            let new = promoted?.service.clone();
            healed?;
            Ok::<_, TestbedError>(new)
        })();
        self.book.end(fault);
        let new = result?;
        self.book
            .note(format!("sentinel_failover {target}: {old} → {new}"));
        Ok(())
    }

    fn client_pause(&self, rng: &mut StdRng) -> Result<(), ChaosError> {
        let Some(id) = self.workers.pick(rng) else {
            return Ok(());
        };
        let pause = self.ttl.mul_f64(rng.random_range(1.5..2.5));
        let fault = self.book.start(
            DockerFault::ClientPause.name(),
            &id,
            format!("SIGSTOP for {pause:?}"),
        );
        let result = self.workers.pause(&id);
        thread::sleep(pause);
        let resumed = self.workers.resume(&id);
        self.book.end(fault);
        result.and(resumed)
    }

    fn client_crash(&self, rng: &mut StdRng) -> Result<(), ChaosError> {
        let Some(id) = self.workers.pick(rng) else {
            return Ok(());
        };
        let fault = self.book.start(
            DockerFault::ClientCrash.name(),
            &id,
            "SIGKILL, a new worker started".into(),
        );
        let killed = self.workers.kill(&id);
        let spawned = self.workers.spawn();
        self.book.end(fault);
        killed.and(spawned.map(drop))
    }
}

/// A fault that holds for a while and is then lifted.
enum Held {
    Pause,
    Disconnect,
    Drop(Rule),
}

impl Held {
    /// Applies the fault to `c`, holds it for `d`, lifts it (also when
    /// applying failed part-way).
    fn hold(self, c: &Container, d: Duration) -> Result<(), TestbedError> {
        match self {
            Held::Pause => {
                let applied = c.pause();
                if applied.is_ok() {
                    thread::sleep(d);
                }
                applied.and(c.unpause())
            }
            Held::Disconnect => {
                let applied = c.disconnect();
                if applied.is_ok() {
                    thread::sleep(d);
                }
                applied.and(c.connect())
            }
            Held::Drop(rule) => {
                let drops = Drops::install(c, vec![rule])?;
                thread::sleep(d);
                drops.remove()
            }
        }
    }
}

/// Seconds since the epoch, as a float.
fn wall_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How long to wait from `now` before a start that takes `lead` should be
/// asked for, so that it ends `before` a wall-clock second boundary (the
/// next boundary at least 100 ms away).
fn wait_for_aim(now: SystemTime, lead: Duration, before: Duration) -> Duration {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let into = Duration::from_nanos(u64::from(since.subsec_nanos()));
    let second = Duration::from_secs(1);
    let mut boundary = second - into;
    while boundary < lead + before + Duration::from_millis(100) {
        boundary += second;
    }
    boundary - lead - before
}

/// How long [`Injector::note_epoch`] waits for a client to date a
/// restarted node.
const EPOCH_WAIT: Duration = Duration::from_secs(3);

/// The start (ms since the epoch, server clock) of the epoch a client
/// wrote for this server process, if one did: the marker names the
/// server's `run_id` (`<run_id>:<replid> <time> <start ms> <flag>`).
fn epoch_start_ms(c: &Container) -> Result<Option<u64>, TestbedError> {
    let mut con = c.connection()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con)?;
    let run_id = info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let marker: Option<String> = redis::cmd("GET").arg("quorumlock:epoch").query(&mut con)?;
    Ok(marker.and_then(|m| {
        let mut fields = m.split(' ');
        let identity = fields.next()?;
        let start = fields.nth(1)?.parse().ok()?;
        (!run_id.is_empty() && identity.starts_with(&format!("{run_id}:"))).then_some(start)
    }))
}

/// The server's `uptime_in_seconds` (whole seconds, as Redis rounds it).
fn uptime_secs(c: &Container) -> Result<u64, TestbedError> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut c.connection()?)?;
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| TestbedError::Docker {
            command: format!("INFO server on {}", c.service),
            status: "no uptime_in_seconds".into(),
            stderr: String::new(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_lanes_hold_the_issue_s_kinds() {
        for kind in DockerFault::ALL {
            assert_eq!(kind.name().parse::<DockerFault>().unwrap(), kind);
        }
        assert_eq!(parse_list("all").unwrap().len(), DockerFault::ALL.len());
        assert!(parse_list("container_pause,meteor").is_err());
        assert_eq!(
            DockerFault::ClientCrash.name(),
            crate::chaos::checker::CLIENT_CRASH
        );
    }

    #[test]
    fn the_aim_ends_the_start_just_before_a_boundary() {
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(1_000_000 + ms);
        let lead = Duration::from_millis(300);
        let before = Duration::from_millis(40);
        // 100 ms into a second: asked for at 660 ms, started at 960 ms.
        let wait = wait_for_aim(at(100), lead, before);
        assert_eq!(wait, Duration::from_millis(560));
        // Too close to the next boundary: the one after.
        let wait = wait_for_aim(at(800), lead, before);
        assert_eq!(wait, Duration::from_millis(860));
    }
}
