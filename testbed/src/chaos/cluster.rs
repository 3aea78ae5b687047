//! The servers of a chaos run: N lock nodes, each behind its own proxy,
//! and one resource server for the protected counters (never faulted).
//!
//! The nodes differ in how they can fail, so every crash kind has a node
//! where it is safe by the algorithm's rules:
//! - the first ⌊(N−1)/2⌋ nodes persist with `appendfsync always` (crash and
//!   restart at once);
//! - the last node is a master with an async replica (failover);
//! - the others keep nothing (crash, then restart empty after the TTL).
//!
//! Every lock node runs with the fake wall clock, so its clock can run fast
//! or step. Clients reach node `i` only through `proxies[i]`, so a failover
//! moves the node's address by pointing the proxy at the promoted replica.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use crate::{
    NetFault, NodeOptions, Persistence, Proxy, RedisNode, ReplicaPair, TestbedError,
    redis_server_binary,
};

/// How a lock node persists, which decides the crash it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `appendfsync always`: crash and restart at once.
    Aof,
    /// No persistence: crash, then restart empty after the TTL.
    Volatile,
    /// Master with an async replica: failover.
    Replicated,
    /// A server the run did not start (`--external`): only its link (the
    /// proxy) can be faulted.
    External,
}

/// The process(es) behind one lock node.
#[derive(Debug)]
pub enum Backing {
    /// One server.
    Single(RedisNode),
    /// A master and its replica.
    Pair(Box<ReplicaPair>),
    /// A server someone else runs.
    External(SocketAddr),
}

impl Backing {
    /// The local server clients reach now (the master of a pair); `None`
    /// for an external server.
    pub fn serving(&self) -> Option<&RedisNode> {
        match self {
            Backing::Single(node) => Some(node),
            Backing::Pair(pair) => Some(pair.master()),
            Backing::External(_) => None,
        }
    }

    /// See [`serving`](Self::serving).
    pub fn serving_mut(&mut self) -> Option<&mut RedisNode> {
        match self {
            Backing::Single(node) => Some(node),
            Backing::Pair(pair) => Some(pair.master_mut()),
            Backing::External(_) => None,
        }
    }

    /// The address clients reach now (through the proxy).
    pub fn addr(&self) -> SocketAddr {
        match self {
            Backing::External(addr) => *addr,
            Backing::Single(node) => node.addr(),
            Backing::Pair(pair) => pair.master().addr(),
        }
    }

    /// A direct connection to the serving server, for inspection.
    pub fn connection(&self) -> Result<redis::Connection, TestbedError> {
        match self.serving() {
            Some(node) => node.connection(),
            None => connect(&format!("redis://{}", self.addr())),
        }
    }
}

/// The server of the protected counters.
#[derive(Debug)]
pub struct Resource {
    url: String,
    /// Set when the run started it.
    node: Option<RedisNode>,
}

impl Resource {
    /// Its URL.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// A direct connection, for inspection.
    pub fn connection(&self) -> Result<redis::Connection, TestbedError> {
        match &self.node {
            Some(node) => node.connection(),
            None => connect(&self.url),
        }
    }
}

/// A synchronous connection with 2 s timeouts.
fn connect(url: &str) -> Result<redis::Connection, TestbedError> {
    let client = redis::Client::open(url)?;
    Ok(client.get_connection_with_timeout(Duration::from_secs(2))?)
}

/// One lock node: its role and its servers. Locked by the fault lane that
/// is hitting it, so two lanes never fault one node at once.
#[derive(Debug)]
pub struct Slot {
    /// Its index in the lock configuration.
    pub index: usize,
    /// How it persists.
    pub role: Role,
    /// Its servers.
    pub backing: Backing,
}

/// The servers of a run. Dropping it stops every process and proxy.
#[derive(Debug)]
pub struct Cluster {
    /// Per lock node, the proxy clients connect through.
    pub proxies: Vec<Proxy>,
    /// Per lock node, its servers.
    pub slots: Vec<Mutex<Slot>>,
    /// The server of the protected counters.
    pub resource: Resource,
    // Declared last: dropped after the servers that live in it.
    _root: Option<tempfile::TempDir>,
}

/// The role of node `i` of `n` (see the module docs).
pub fn role_of(i: usize, n: usize) -> Role {
    if i + 1 == n {
        Role::Replicated
    } else if i < (n - 1) / 2 {
        Role::Aof
    } else {
        Role::Volatile
    }
}

/// The address of a `redis://host:port` URL.
fn resolve(url: &str) -> Result<SocketAddr, TestbedError> {
    use std::net::ToSocketAddrs as _;
    let info = redis::IntoConnectionInfo::into_connection_info(url)?;
    let (host, port) = match info.addr().clone() {
        redis::ConnectionAddr::Tcp(host, port) => (host, port),
        _ => {
            return Err(TestbedError::Io {
                context: format!("external node {url:?}"),
                source: std::io::Error::other("only redis://host:port URLs can be proxied"),
            });
        }
    };
    (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| TestbedError::Io {
            context: format!("resolving external node {url:?}"),
            source: std::io::Error::other("no address"),
        })
}

impl Cluster {
    /// Starts `n` lock nodes (n ≥ 3) with their proxies, and the resource
    /// server.
    pub fn start(n: usize) -> Result<Cluster, TestbedError> {
        let binary = redis_server_binary()?;
        let root = tempfile::Builder::new()
            .prefix("quorumlock-chaos-")
            .tempdir()
            .map_err(TestbedError::io("creating the chaos temporary directory"))?;
        let mut resource = RedisNode::new(
            root.path().join("resource"),
            binary.clone(),
            NodeOptions::default(),
        )?;
        resource.start()?;
        let resource = Resource {
            url: resource.url(),
            node: Some(resource),
        };
        let started: Vec<Result<Backing, TestbedError>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let binary = binary.clone();
                    let dir = root.path().join(format!("n{i}"));
                    let role = role_of(i, n);
                    let persistence = if role == Role::Aof {
                        Persistence::AofAlways
                    } else {
                        Persistence::None
                    };
                    let replicated = role == Role::Replicated;
                    scope.spawn(move || start_backing(&dir, binary, persistence, replicated))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut slots = Vec::with_capacity(n);
        let mut proxies = Vec::with_capacity(n);
        for (i, backing) in started.into_iter().enumerate() {
            let backing = backing?;
            proxies.push(Proxy::start(backing.addr())?);
            slots.push(Mutex::new(Slot {
                index: i,
                role: role_of(i, n),
                backing,
            }));
        }
        Ok(Cluster {
            proxies,
            slots,
            resource,
            _root: Some(root),
        })
    }

    /// Puts a proxy in front of each of `nodes` (URLs of servers the run
    /// did not start, e.g. the docker compose stack's) and uses `resource`
    /// for the counters. Only link faults and client faults apply.
    pub fn external(nodes: &[String], resource: &str) -> Result<Cluster, TestbedError> {
        let mut slots = Vec::with_capacity(nodes.len());
        let mut proxies = Vec::with_capacity(nodes.len());
        for (i, url) in nodes.iter().enumerate() {
            let addr = resolve(url)?;
            proxies.push(Proxy::start(addr)?);
            slots.push(Mutex::new(Slot {
                index: i,
                role: Role::External,
                backing: Backing::External(addr),
            }));
        }
        connect(resource)?;
        Ok(Cluster {
            proxies,
            slots,
            resource: Resource {
                url: resource.to_string(),
                node: None,
            },
            _root: None,
        })
    }

    /// The URLs clients use: the proxies.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(Proxy::url).collect()
    }

    /// Locks slot `i` (waiting for the lane that holds it).
    pub fn slot(&self, i: usize) -> MutexGuard<'_, Slot> {
        self.slots[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks slot `i` if no lane holds it.
    pub fn try_slot(&self, i: usize) -> Option<MutexGuard<'_, Slot>> {
        match self.slots[i].try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Puts every node back to normal: running, resumed, clock normal,
    /// proxy passing traffic to the serving server.
    pub fn heal_all(&self) -> Result<(), TestbedError> {
        for (i, proxy) in self.proxies.iter().enumerate() {
            let mut slot = self.slot(i);
            if let Some(node) = slot.backing.serving_mut() {
                if node.is_paused() {
                    node.resume()?;
                }
                if !node.is_running() {
                    node.start()?;
                }
                node.set_clock(crate::ClockSkew::NORMAL)?;
            }
            proxy.set_fault(NetFault::None)?;
            proxy.set_upstream(slot.backing.addr());
        }
        Ok(())
    }

    /// The lock keys on every node (fencing counters and the node's epoch
    /// marker excluded: they are meant to stay), as `n<i>:<key>`, read from
    /// the serving servers directly.
    pub fn lock_keys(&self) -> Result<Vec<String>, TestbedError> {
        let mut found = Vec::new();
        for i in 0..self.slots.len() {
            let slot = self.slot(i);
            found.extend(lock_keys_on(&mut slot.backing.connection()?, i)?);
        }
        found.sort();
        Ok(found)
    }
}

/// The lock keys on node `i` (fencing counters and the node's epoch
/// marker excluded: they are meant to stay), as `n<i>:<key>`.
pub(crate) fn lock_keys_on(
    con: &mut redis::Connection,
    i: usize,
) -> Result<Vec<String>, TestbedError> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con)?;
    Ok(keys
        .into_iter()
        .filter(|k| !k.starts_with("quorumlock:fence:") && k != "quorumlock:epoch")
        .map(|k| format!("n{i}:{k}"))
        .collect())
}

/// Starts the local server(s) of a node: one server, or a master and its
/// replica.
fn start_backing(
    dir: &Path,
    binary: PathBuf,
    persistence: Persistence,
    replicated: bool,
) -> Result<Backing, TestbedError> {
    let options = NodeOptions {
        persistence,
        fake_clock: true,
        ..NodeOptions::default()
    };
    if replicated {
        return Ok(Backing::Pair(Box::new(ReplicaPair::start_in(
            dir, binary, options,
        )?)));
    }
    let mut node = RedisNode::new(dir.to_path_buf(), binary, options)?;
    node.start()?;
    Ok(Backing::Single(node))
}
