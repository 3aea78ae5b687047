//! A Sentinel-managed master: a [`ReplicaPair`] watched by `redis-sentinel`
//! processes, so that tests can name it as one node by its Sentinel group
//! and fail it over with `SENTINEL FAILOVER`.
//!
//! The sentinels run the same binary as the nodes (`redis-server
//! <config> --sentinel`, what Debian's `redis-sentinel` is) on free ports
//! of `127.0.0.1`, each in a directory of its own (Sentinel rewrites its
//! configuration file), and are stopped by pid when the group drops. The
//! pair's nodes announce `127.0.0.1` as their replica address, so the
//! sentinels reach the replica on the address it listens on (its
//! replication connection comes from `127.0.0.2`, for
//! [`ReplicaPair::cut_link`]).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{NodeOptions, ReplicaPair, TestbedError, redis_server_binary};

/// How long a sentinel may take to answer `PING` after it starts, to see
/// the replica, or to finish a failover.
const WAIT: Duration = Duration::from_secs(20);

/// The `min-replicas-max-lag` of the group's servers (they also have
/// `min-replicas-to-write 1`): a master cut off from its replica refuses
/// writes after this long.
pub const REPLICA_LAG: Duration = Duration::from_secs(2);

/// A master, its replica and the sentinels that watch them.
pub struct SentinelGroup {
    service: String,
    pair: ReplicaPair,
    sentinels: Vec<Sentinel>,
}

struct Sentinel {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        // Our own child, by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SentinelGroup {
    /// Starts a pair (with `options` for both nodes) and `sentinels`
    /// sentinels monitoring it as `service` (quorum: a majority of them,
    /// down after 1 s), and waits until every sentinel knows the replica.
    ///
    /// # Errors
    ///
    /// Those of [`ReplicaPair::start`], [`TestbedError::Io`] for a
    /// sentinel that cannot start, [`TestbedError::StartFailed`] for one
    /// that does not come up or does not see the replica in time.
    pub fn start(
        service: &str,
        sentinels: usize,
        mut options: NodeOptions,
    ) -> Result<SentinelGroup, TestbedError> {
        options
            .extra_config
            .push(("replica-announce-ip".into(), "127.0.0.1".into()));
        let pair = ReplicaPair::start(options)?;
        // What quorumlock asks of a Sentinel-managed master: no writes once
        // cut off from its replica for more than REPLICA_LAG. Set once the
        // replica is attached (the master is adopted before it has one),
        // on both servers (the replica may be promoted).
        pair.wait_in_sync(WAIT)?;
        for node in [pair.master(), pair.replica()] {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("min-replicas-to-write")
                .arg(1)
                .arg("min-replicas-max-lag")
                .arg(REPLICA_LAG.as_secs())
                .query(&mut node.connection()?)?;
        }
        let master = pair.master().port();
        let sentinels = (0..sentinels.max(1))
            .map(|_| Sentinel::start(service, master, sentinels / 2 + 1))
            .collect::<Result<Vec<_>, _>>()?;
        let group = SentinelGroup {
            service: service.to_owned(),
            pair,
            sentinels,
        };
        for sentinel in &group.sentinels {
            wait_until(sentinel.port, "to see the replica", || {
                let replicas: Vec<redis::Value> =
                    sentinel.query(|c| c.arg("REPLICAS").arg(service))?;
                Ok(!replicas.is_empty())
            })?;
        }
        Ok(group)
    }

    /// The master group's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// `redis://127.0.0.1:<port>` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The master and its replica (after a failover, the pair's own idea
    /// of which is which is stale; ask [`master_addr`](Self::master_addr)).
    pub fn pair(&self) -> &ReplicaPair {
        &self.pair
    }

    /// The same, to cut or heal the replication link.
    pub fn pair_mut(&mut self) -> &mut ReplicaPair {
        &mut self.pair
    }

    /// The master's address as the first sentinel names it.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`] if the sentinel does not answer.
    pub fn master_addr(&self) -> Result<SocketAddr, TestbedError> {
        let (host, port): (String, u16) =
            self.sentinels[0].query(|c| c.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.service))?;
        format!("{host}:{port}")
            .parse()
            .map_err(|e| TestbedError::Io {
                context: format!("parsing the master address {host}:{port}"),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
    }

    /// `SENTINEL FAILOVER` on the first sentinel, then waits until every
    /// sentinel names another master and that server says it is one.
    /// Returns the new master's address.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`], or [`TestbedError::StartFailed`] if the
    /// failover does not finish in time.
    pub fn fail_over(&self) -> Result<SocketAddr, TestbedError> {
        let old = self.master_addr()?;
        let () = self.sentinels[0].query(|c| c.arg("FAILOVER").arg(&self.service))?;
        let port = self.sentinels[0].port;
        wait_until(port, "to finish the failover", || {
            let new = self.master_addr()?;
            if new == old {
                return Ok(false);
            }
            let client = redis::Client::open(format!("redis://{new}"))?;
            let mut conn = client.get_connection()?;
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
            Ok(matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master"))
        })?;
        self.master_addr()
    }
}

impl Sentinel {
    fn start(service: &str, master: u16, quorum: usize) -> Result<Sentinel, TestbedError> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-sentinel-")
            .tempdir()
            .map_err(TestbedError::io("creating a sentinel's directory"))?;
        let port = free_port()?;
        let mut text = String::new();
        let _ = writeln!(text, "port {port}\nbind 127.0.0.1\ndaemonize no");
        let _ = writeln!(text, "dir {}", dir.path().display());
        let _ = writeln!(
            text,
            "logfile \"{}\"",
            dir.path().join("sentinel.log").display()
        );
        let _ = writeln!(
            text,
            "sentinel monitor {service} 127.0.0.1 {master} {quorum}"
        );
        let _ = writeln!(text, "sentinel down-after-milliseconds {service} 1000");
        let _ = writeln!(text, "sentinel failover-timeout {service} 10000");
        let config = dir.path().join("sentinel.conf");
        std::fs::write(&config, text).map_err(TestbedError::io("writing sentinel.conf"))?;
        let child = Command::new(redis_server_binary()?)
            .arg(&config)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(TestbedError::io("starting redis-server --sentinel"))?;
        let sentinel = Sentinel {
            child,
            port,
            _dir: dir,
        };
        wait_until(port, "to answer PING", || {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
            let pong: String = redis::cmd("PING").query(&mut client.get_connection()?)?;
            Ok(pong == "PONG")
        })?;
        Ok(sentinel)
    }

    /// `SENTINEL <args>` on this sentinel.
    fn query<T: redis::FromRedisValue>(
        &self,
        args: impl FnOnce(&mut redis::Cmd) -> &mut redis::Cmd,
    ) -> Result<T, TestbedError> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        let mut conn = client.get_connection()?;
        let mut cmd = redis::cmd("SENTINEL");
        args(&mut cmd);
        Ok(cmd.query(&mut conn)?)
    }
}

fn free_port() -> Result<u16, TestbedError> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(TestbedError::io("finding a free port for a sentinel"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(TestbedError::io("reading the free port"))
}

/// Polls `done` (errors count as "not yet") until it holds, at most
/// [`WAIT`]; then fails naming the sentinel's port and `what`.
fn wait_until(
    port: u16,
    what: &str,
    mut done: impl FnMut() -> Result<bool, TestbedError>,
) -> Result<(), TestbedError> {
    let give_up = Instant::now() + WAIT;
    let mut last = String::new();
    while Instant::now() < give_up {
        match done() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err(TestbedError::StartFailed {
        port,
        reason: format!("sentinel did not get {what} within {WAIT:?}"),
        log_tail: last,
    })
}
