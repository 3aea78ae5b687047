//! A master with an asynchronous replica that can fail over and lose the
//! writes its replica never got: the "lost lock on failover" fault.
//!
//! A [`ReplicaPair`] runs two [`RedisNode`]s on `127.0.0.1`: a master and a
//! replica of it. The replica connects to its master from `127.0.0.2`
//! (`bind-source-addr`), so [`ReplicaPair::cut_link`] can drop exactly the
//! replication traffic with `iptables` (address + port) while clients still
//! reach the master. [`ReplicaPair::fail_over`] kills the master and
//! promotes the replica (`REPLICAOF NO ONE`); whatever was written during
//! the cut is gone. [`ReplicaPair::rejoin`] brings the old master back,
//! empty, as the new master's replica, ready for the next failover.
//!
//! The `iptables` rules live in a chain of their own, `QLCHAOS-<pid>-<n>`,
//! jumped to from `OUTPUT` for loopback only. A [`LinkCutChain`] guard
//! removes the jump and the chain when dropped, also while a test panics;
//! chains left behind by a killed process are removed by
//! [`sweep_stale_chains`] (run by every [`ReplicaPair::start_in`]). No
//! global rule is ever added. Cutting needs root and the `iptables`
//! command (`apt-get install iptables` on Debian).
//!
//! ```no_run
//! use quorumlock_testbed::{NodeOptions, ReplicaPair};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut pair = ReplicaPair::start(NodeOptions::default())?;
//! pair.cut_link()?;
//! let mut con = pair.master().connection()?;
//! redis::cmd("SET").arg("lock").arg("me").query::<()>(&mut con)?;
//! let new_master = pair.fail_over()?; // the SET dies with the old master
//! let mut con = pair.master().connection()?;
//! let lock: Option<String> = redis::cmd("GET").arg("lock").query(&mut con)?;
//! assert_eq!(lock, None);
//! assert_eq!(new_master, pair.master().addr());
//! pair.rejoin()?; // ready for the next failover
//! # Ok(())
//! # }
//! ```
//!
//! The pair sets `repl-timeout 60` (the default, made explicit): a cut
//! shorter than that leaves the replica believing its link is up, which is
//! what asynchronous replication looks like from outside; after a longer
//! cut both sides drop the link and the replica reconnects once it heals.
//! `min-replicas-to-write` stays `0`, so the master accepts writes that no
//! replica has; `replica-read-only yes` until the promotion; diskless full
//! syncs start at once (`repl-diskless-sync-delay 0`).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{NodeOptions, RedisNode, Restart, TestbedError, redis_server_binary};

/// The address the replica's connection to its master comes from.
const REPLICA_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The address every node listens on.
const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How long a start or a rejoin waits for the replica to be in sync.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// Sleep between two replication-state probes.
const SYNC_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Seconds without traffic after which master and replica drop their link.
const REPL_TIMEOUT_SECS: u32 = 60;
/// Prefix of every chain this module creates; the pid and a counter follow.
const CHAIN_PREFIX: &str = "QLCHAOS-";
/// What `iptables -N` prints on stderr when the chain is there already.
const CHAIN_EXISTS: &str = "Chain already exists";
/// Bound on the jumps to one chain that removal deletes.
const MAX_JUMPS: usize = 16;
/// How long `iptables` waits for the lock of another `iptables` (seconds).
const IPTABLES_LOCK_WAIT_SECS: &str = "10";
/// Where `iptables` is looked for when it is not in `PATH`.
const IPTABLES_FALLBACKS: [&str; 3] = ["/usr/sbin/iptables", "/sbin/iptables", "/usr/bin/iptables"];

/// A master and an asynchronous replica of it, each a [`RedisNode`], with
/// a replication link that can be cut and a failover that loses what the
/// replica did not get. See the [module docs](crate::failover).
///
/// Dropping the pair kills both servers, then removes its `iptables`
/// chain, if any.
pub struct ReplicaPair {
    /// Killed in `Drop` before the chain and the directory go.
    nodes: [RedisNode; 2],
    /// Index of the current master in `nodes`.
    master: usize,
    /// The options given at start, before the replication lines.
    base: NodeOptions,
    cut: Option<LinkCutChain>,
    /// The temporary directory made by [`ReplicaPair::start`], if any.
    _root: Option<TempDir>,
}

impl fmt::Debug for ReplicaPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaPair")
            .field("master", self.master())
            .field("replica", self.replica())
            .field("cut", &self.cut)
            .finish_non_exhaustive()
    }
}

/// The replication offsets of a [`ReplicaPair`], in bytes of replication
/// stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicationOffsets {
    /// The master's `master_repl_offset`: everything it has written.
    pub master: u64,
    /// The replica's `slave_repl_offset`: everything it has received.
    pub replica: u64,
}

/// What one probe of both nodes saw.
#[derive(Debug)]
struct ReplicationState {
    master_offset: Option<u64>,
    /// Whether the master lists our replica with `state=online`.
    master_sees_replica: bool,
    /// Whether the replica reports `role:slave`.
    replica_is_replica: bool,
    replica_master_port: Option<u16>,
    replica_link_up: bool,
    replica_offset: Option<u64>,
}

impl ReplicationState {
    fn in_sync(&self, master_port: u16) -> bool {
        self.master_sees_replica
            && self.replica_is_replica
            && self.replica_master_port == Some(master_port)
            && self.replica_link_up
            && self.master_offset.is_some()
            && self.replica_offset == self.master_offset
    }
}

impl ReplicaPair {
    /// Starts a pair in a new temporary directory (deleted on drop), with
    /// the binary found by [`redis_server_binary`].
    ///
    /// # Errors
    ///
    /// [`TestbedError::RedisServerNotFound`], [`TestbedError::Io`] for the
    /// directory, and those of [`ReplicaPair::start_in`].
    pub fn start(options: NodeOptions) -> Result<Self, TestbedError> {
        let binary = redis_server_binary()?;
        let root = tempfile::Builder::new()
            .prefix("quorumlock-pair-")
            .tempdir()
            .map_err(TestbedError::io("creating the replica pair's directory"))?;
        let mut pair = Self::start_in(root.path(), binary, options)?;
        pair._root = Some(root);
        Ok(pair)
    }

    /// Starts a master, then a replica of it, in subdirectories `node-a`
    /// and `node-b` of `dir` (e.g. a [`Testbed::root`](crate::Testbed::root)
    /// subdirectory), and waits (at most 30 s) until the replica is in
    /// sync. `options` apply to both nodes; their `extra_config` lines come
    /// after the pair's replication settings, so they can override e.g.
    /// `repl-timeout`.
    ///
    /// Removes stale chains of dead processes first ([`sweep_stale_chains`],
    /// best effort: a missing `iptables` is only an error once a link is
    /// cut).
    ///
    /// # Errors
    ///
    /// [`TestbedError::StartFailed`] or [`TestbedError::Io`] if a server
    /// does not start, [`TestbedError::NotInSync`] if the replica does not
    /// catch up.
    pub fn start_in(
        dir: impl AsRef<Path>,
        binary: impl Into<PathBuf>,
        options: NodeOptions,
    ) -> Result<Self, TestbedError> {
        // Best effort: without iptables there can be no stale chain.
        let _ = sweep_stale_chains();
        let dir = dir.as_ref();
        let binary = binary.into();
        let mut master = RedisNode::new(
            dir.join("node-a"),
            binary.clone(),
            node_options(&options, None),
        )?;
        master.start()?;
        let mut replica = RedisNode::new(
            dir.join("node-b"),
            binary,
            node_options(&options, Some(master.port())),
        )?;
        replica.start()?;
        let pair = Self {
            nodes: [master, replica],
            master: 0,
            base: options,
            cut: None,
            _root: None,
        };
        pair.wait_in_sync(SYNC_TIMEOUT)?;
        Ok(pair)
    }

    /// The current master.
    pub fn master(&self) -> &RedisNode {
        &self.nodes[self.master]
    }

    /// The current master, mutably (e.g. to kill it without a failover).
    pub fn master_mut(&mut self) -> &mut RedisNode {
        &mut self.nodes[self.master]
    }

    /// The current replica (after [`fail_over`](Self::fail_over) and until
    /// [`rejoin`](Self::rejoin): the dead old master).
    pub fn replica(&self) -> &RedisNode {
        &self.nodes[1 - self.master]
    }

    /// The current replica, mutably. Its configuration names the current
    /// master, so a restart brings it back as that master's replica.
    pub fn replica_mut(&mut self) -> &mut RedisNode {
        &mut self.nodes[1 - self.master]
    }

    /// The replication offsets of master and replica right now.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`] if a node cannot be asked,
    /// [`TestbedError::NotInSync`] if a node reports no offset (e.g. the
    /// replica is not replicating).
    pub fn offsets(&self) -> Result<ReplicationOffsets, TestbedError> {
        let state = self.probe()?;
        match (state.master_offset, state.replica_offset) {
            (Some(master), Some(replica)) => Ok(ReplicationOffsets { master, replica }),
            _ => Err(self.not_in_sync(Duration::ZERO, format!("{state:?}"))),
        }
    }

    /// Waits until the replica's link to the current master is up, the
    /// master lists it online, and both report the same replication
    /// offset; polls every 5 ms, at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotInSync`] with the last state seen, e.g. while
    /// the link is cut.
    pub fn wait_in_sync(&self, timeout: Duration) -> Result<(), TestbedError> {
        let started = Instant::now();
        let master_port = self.master().port();
        loop {
            let last = match self.probe() {
                Ok(state) if state.in_sync(master_port) => return Ok(()),
                Ok(state) => format!("{state:?}"),
                Err(err) => err.to_string(),
            };
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(self.not_in_sync(waited, last));
            }
            thread::sleep(SYNC_POLL_INTERVAL.min(timeout - waited));
        }
    }

    /// Cuts the replication link: `iptables` drops every packet between the
    /// replica's source address and the master's port, both ways, in a
    /// chain of this process. Clients (from `127.0.0.1`) still reach the
    /// master, which keeps accepting writes the replica never sees. Does
    /// nothing if the link is already cut.
    ///
    /// # Errors
    ///
    /// [`TestbedError::IptablesNotFound`] if `iptables` is missing,
    /// [`TestbedError::Iptables`] if a rule cannot be added (e.g. not root).
    pub fn cut_link(&mut self) -> Result<(), TestbedError> {
        if self.cut.is_none() {
            let master = SocketAddrV4::new(HOST, self.master().port());
            self.cut = Some(LinkCutChain::cut(REPLICA_SOURCE, master)?);
        }
        Ok(())
    }

    /// Removes the cut (chain and jump), then makes the replica reconnect
    /// (`CLIENT KILL TYPE master`) so replication resumes within about a
    /// second with a partial resync, instead of after TCP's retransmission
    /// back-off, which grows to many seconds over a long cut. Does nothing
    /// if the link is not cut. Call [`wait_in_sync`](Self::wait_in_sync) to
    /// wait for the replica to catch up.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Iptables`] if the chain cannot be removed,
    /// [`TestbedError::Redis`] if the running replica cannot be told to
    /// reconnect.
    pub fn heal_link(&mut self) -> Result<(), TestbedError> {
        let Some(cut) = self.cut.take() else {
            return Ok(());
        };
        cut.remove()?;
        if self.replica().is_running() {
            let mut con = self.replica().connection()?;
            let _killed: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("master")
                .query(&mut con)?;
        }
        Ok(())
    }

    /// Whether the replication link is cut.
    pub fn is_link_cut(&self) -> bool {
        self.cut.is_some()
    }

    /// The name of the `iptables` chain of the current cut, if any.
    pub fn link_cut_chain(&self) -> Option<&str> {
        self.cut.as_ref().map(LinkCutChain::name)
    }

    /// Fails over: kills the master (`SIGKILL`), then promotes the replica
    /// with `REPLICAOF NO ONE`, and swaps the roles, so
    /// [`master`](Self::master) is the promoted node and
    /// [`replica`](Self::replica) the dead one. Writes the replica had not
    /// received are lost. A cut link is removed after the promotion (the
    /// link died with the old master; removing the rules earlier could let
    /// the dead master's kernel still deliver its unsent replication data).
    ///
    /// Returns the new master's address, e.g. for
    /// [`Proxy::set_upstream`](crate::Proxy::set_upstream).
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotRunning`] if the replica is not running (nothing
    /// is changed then), [`TestbedError::Io`] if the master cannot be
    /// killed, [`TestbedError::Redis`] if the promotion fails (the master
    /// is dead then), [`TestbedError::Iptables`] if the cut cannot be
    /// removed (the promotion has happened then).
    pub fn fail_over(&mut self) -> Result<SocketAddr, TestbedError> {
        let old = self.master;
        let new = 1 - old;
        if !self.nodes[new].is_running() {
            return Err(TestbedError::NotRunning {
                port: self.nodes[new].port(),
            });
        }
        self.nodes[old].kill()?;
        let mut con = self.nodes[new].connection()?;
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query::<()>(&mut con)?;
        self.master = new;
        let new_port = self.nodes[new].port();
        self.nodes[new].set_options(node_options(&self.base, None));
        self.nodes[old].set_options(node_options(&self.base, Some(new_port)));
        if let Some(cut) = self.cut.take() {
            cut.remove()?;
        }
        Ok(self.master().addr())
    }

    /// Restarts the dead replica (the old master after a
    /// [`fail_over`](Self::fail_over)) with its data deleted, as a replica
    /// of the current master, and waits (at most 30 s) until it is in sync:
    /// the pair is then ready for the next failover.
    ///
    /// # Errors
    ///
    /// [`TestbedError::AlreadyRunning`] if the replica is running (there
    /// was no failover, or it was restarted already), the errors of
    /// [`RedisNode::restart`], and [`TestbedError::NotInSync`].
    pub fn rejoin(&mut self) -> Result<(), TestbedError> {
        let replica = self.replica_mut();
        if let Some(pid) = replica.pid() {
            return Err(TestbedError::AlreadyRunning {
                port: replica.port(),
                pid,
            });
        }
        replica.restart(Restart::immediate().wiping())?;
        self.wait_in_sync(SYNC_TIMEOUT)
    }

    /// Asks both nodes for their replication state.
    fn probe(&self) -> Result<ReplicationState, TestbedError> {
        let master = info_replication(self.master())?;
        let replica = info_replication(self.replica())?;
        let replica_port = self.replica().port();
        let master_sees_replica = master
            .iter()
            .filter(|(key, _)| key.starts_with("slave") && key[5..].parse::<u32>().is_ok())
            .any(|(_, value)| {
                let fields = value.split(',').collect::<Vec<_>>();
                fields.contains(&format!("port={replica_port}").as_str())
                    && fields.contains(&"state=online")
            });
        let field = |info: &[(String, String)], key: &str| {
            info.iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.clone())
        };
        Ok(ReplicationState {
            master_offset: field(&master, "master_repl_offset").and_then(|o| o.parse().ok()),
            master_sees_replica,
            replica_is_replica: field(&replica, "role").as_deref() == Some("slave"),
            replica_master_port: field(&replica, "master_port").and_then(|p| p.parse().ok()),
            replica_link_up: field(&replica, "master_link_status").as_deref() == Some("up"),
            replica_offset: field(&replica, "slave_repl_offset").and_then(|o| o.parse().ok()),
        })
    }

    fn not_in_sync(&self, waited: Duration, detail: String) -> TestbedError {
        TestbedError::NotInSync {
            master_port: self.master().port(),
            replica_port: self.replica().port(),
            waited,
            detail,
        }
    }
}

impl Drop for ReplicaPair {
    fn drop(&mut self) {
        // Servers first, so no replication data flows once the chain goes;
        // a failure here is retried by each node's own drop.
        for node in &mut self.nodes {
            let _ = node.kill();
        }
    }
}

/// `INFO replication` of `node` as `(key, value)` pairs.
fn info_replication(node: &RedisNode) -> Result<Vec<(String, String)>, TestbedError> {
    let mut con = node.connection()?;
    let info: String = redis::cmd("INFO").arg("replication").query(&mut con)?;
    Ok(info
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.to_owned(), value.trim().to_owned()))
        .collect())
}

/// The options of a pair's node: the pair's replication settings, the
/// caller's extra lines, then the role (a replica names its master).
fn node_options(base: &NodeOptions, replica_of: Option<u16>) -> NodeOptions {
    let line = |key: &str, value: String| (key.to_owned(), value);
    let mut extra_config = vec![
        line("repl-timeout", REPL_TIMEOUT_SECS.to_string()),
        line("repl-diskless-sync", "yes".to_owned()),
        line("repl-diskless-sync-delay", "0".to_owned()),
        line("min-replicas-to-write", "0".to_owned()),
        line("replica-read-only", "yes".to_owned()),
        line("replica-serve-stale-data", "yes".to_owned()),
    ];
    extra_config.extend(base.extra_config.iter().cloned());
    // Outgoing connections (only a replica's to its master) come from here.
    extra_config.push(line("bind-source-addr", REPLICA_SOURCE.to_string()));
    if let Some(port) = replica_of {
        extra_config.push(line("replicaof", format!("{HOST} {port}")));
    }
    NodeOptions {
        extra_config,
        ..base.clone()
    }
}

/// An `iptables` chain that drops all TCP traffic between a source address
/// and a server, both ways, jumped to from `OUTPUT` for the loopback
/// interface only.
///
/// Dropping the guard (also while a test panics) deletes the jump, flushes
/// and deletes the chain, best effort; [`remove`](Self::remove) does the
/// same and reports errors. Chains are named `QLCHAOS-<pid>-<n>`; those of
/// dead processes are removed by [`sweep_stale_chains`].
#[derive(Debug)]
pub struct LinkCutChain {
    name: String,
    /// Cleared once removed, so `Drop` does nothing more.
    installed: bool,
}

impl LinkCutChain {
    /// Creates the chain, adds the two `DROP` rules (from `source` to
    /// `server` and back from `server`'s port to `source`) and the jump.
    ///
    /// # Errors
    ///
    /// [`TestbedError::IptablesNotFound`] if `iptables` is missing,
    /// [`TestbedError::Iptables`] if a command fails (e.g. not root);
    /// whatever was created is removed again then.
    pub fn cut(source: Ipv4Addr, server: SocketAddrV4) -> Result<Self, TestbedError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{CHAIN_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        match iptables(&["-N", &name]) {
            Ok(_) => {}
            // A chain of this name can only be left by a dead process that
            // had our pid: remove it and try once more.
            Err(TestbedError::Iptables { stderr, .. }) if stderr.contains(CHAIN_EXISTS) => {
                let _ = remove_chain(&name);
                iptables(&["-N", &name])?;
            }
            Err(err) => return Err(err),
        }
        // From here on, an error drops the guard, which removes the chain.
        let chain = Self {
            name,
            installed: true,
        };
        let (source, server_ip, port) = (
            format!("{source}/32"),
            format!("{}/32", server.ip()),
            server.port().to_string(),
        );
        #[rustfmt::skip]
        let rules: [&[&str]; 2] = [
            &["-p", "tcp", "-s", &source, "-d", &server_ip, "--dport", &port, "-j", "DROP"],
            &["-p", "tcp", "-s", &server_ip, "--sport", &port, "-d", &source, "-j", "DROP"],
        ];
        for rule in rules {
            let mut args = vec!["-A", chain.name.as_str()];
            args.extend_from_slice(rule);
            iptables(&args)?;
        }
        iptables(&["-I", "OUTPUT", "1", "-o", "lo", "-j", &chain.name])?;
        Ok(chain)
    }

    /// The chain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes every jump to the chain, flushes and deletes it.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Iptables`] (or [`TestbedError::IptablesNotFound`])
    /// if a command fails; `Drop` then tries once more.
    pub fn remove(mut self) -> Result<(), TestbedError> {
        remove_chain(&self.name)?;
        self.installed = false;
        Ok(())
    }
}

impl Drop for LinkCutChain {
    fn drop(&mut self) {
        if self.installed {
            // Nothing better to do in drop; a chain left behind is swept
            // once this process is gone.
            let _ = remove_chain(&self.name);
        }
    }
}

/// Removes every `QLCHAOS-<pid>-<n>` chain (and the jumps to it) whose
/// process is no longer alive, e.g. after a test run was killed. Chains of
/// living processes, this one included, are left alone. Best effort per
/// chain: one that cannot be removed (e.g. another process removed it at
/// the same time) is skipped.
///
/// Returns the names of the chains removed.
///
/// # Errors
///
/// [`TestbedError::IptablesNotFound`] if `iptables` is missing,
/// [`TestbedError::Iptables`] if the rules cannot be listed.
pub fn sweep_stale_chains() -> Result<Vec<String>, TestbedError> {
    let listing = iptables(&["-S"])?;
    let mut removed = Vec::new();
    for name in listing.lines().filter_map(|line| line.strip_prefix("-N ")) {
        let Some(pid) = chain_pid(name) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if remove_chain(name).is_ok() {
            removed.push(name.to_owned());
        }
    }
    Ok(removed)
}

/// The pid in a chain name of ours, `QLCHAOS-<pid>` or `QLCHAOS-<pid>-<n>`.
fn chain_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(CHAIN_PREFIX)?;
    let pid = rest.split('-').next()?;
    pid.parse().ok().filter(|&pid| pid > 0)
}

/// Deletes every rule jumping to `name`, then flushes and deletes it.
fn remove_chain(name: &str) -> Result<(), TestbedError> {
    let listing = iptables(&["-S"])?;
    let jumps = listing
        .lines()
        .filter_map(|line| line.strip_prefix("-A "))
        .map(|rule| rule.split_whitespace().collect::<Vec<_>>())
        .filter(|rule| rule.ends_with(&["-j", name]))
        .take(MAX_JUMPS);
    for rule in jumps {
        let mut args = vec!["-D"];
        args.extend(rule);
        iptables(&args)?;
    }
    iptables(&["-F", name])?;
    iptables(&["-X", name])?;
    Ok(())
}

/// Runs `iptables -w SECS ARGS` (filter table), returning its stdout.
fn iptables(args: &[&str]) -> Result<String, TestbedError> {
    let binary = iptables_binary()?;
    let output = Command::new(&binary)
        .args(["-w", IPTABLES_LOCK_WAIT_SECS])
        .args(args)
        .output()
        .map_err(TestbedError::io(format!("running {}", binary.display())))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(TestbedError::Iptables {
            command: format!("iptables -w {IPTABLES_LOCK_WAIT_SECS} {}", args.join(" ")),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `iptables` from `PATH`, else from the usual sbin directories.
fn iptables_binary() -> Result<PathBuf, TestbedError> {
    find_iptables(std::env::var_os("PATH"), &IPTABLES_FALLBACKS)
}

fn find_iptables(
    path: Option<std::ffi::OsString>,
    fallbacks: &[&str],
) -> Result<PathBuf, TestbedError> {
    let in_path = path
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("iptables"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    in_path
        .into_iter()
        .chain(fallbacks.iter().map(PathBuf::from))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| TestbedError::IptablesNotFound {
            reason: format!("no iptables in PATH nor in {}", fallbacks.join(", ")),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_carry_the_pid() {
        assert_eq!(chain_pid("QLCHAOS-1234-0"), Some(1234));
        assert_eq!(chain_pid("QLCHAOS-77"), Some(77));
        assert_eq!(chain_pid("QLCHAOS-0-1"), None);
        assert_eq!(chain_pid("QLCHAOS-x-1"), None);
        assert_eq!(chain_pid("OTHER-1234-0"), None);
        // iptables limits chain names to 28 characters; Linux pids are at
        // most 2^22.
        let longest = format!("{CHAIN_PREFIX}{}-{}", 1 << 22, u32::MAX);
        assert!(longest.len() <= 28, "{longest}");
    }

    #[test]
    fn a_missing_iptables_says_how_to_install_it() {
        let err = find_iptables(Some("/nonexistent".into()), &["/nonexistent/iptables"]);
        match err {
            Err(err @ TestbedError::IptablesNotFound { .. }) => {
                assert!(
                    err.to_string().contains("apt-get install iptables"),
                    "{err}"
                );
            }
            other => panic!("expected IptablesNotFound, got {other:?}"),
        }
    }

    #[test]
    fn replica_options_name_the_master_last() {
        let base = NodeOptions {
            extra_config: vec![("repl-timeout".into(), "5".into())],
            ..NodeOptions::default()
        };
        let options = node_options(&base, Some(6379));
        let keys: Vec<&str> = options
            .extra_config
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        let user = keys.iter().rposition(|k| *k == "repl-timeout");
        assert_eq!(user, Some(6), "the caller's line overrides the default");
        assert_eq!(
            options.extra_config.last(),
            Some(&("replicaof".to_owned(), "127.0.0.1 6379".to_owned()))
        );
        let master = node_options(&base, None);
        assert!(master.extra_config.iter().all(|(k, _)| k != "replicaof"));
    }
}
