//! Local multi-node Redis testbed with fault injection, for testing
//! [`quorumlock`](https://docs.rs/quorumlock).
//!
//! A [`Testbed`] runs `n` independent `redis-server` masters on `127.0.0.1`,
//! each with its own port, directory, generated `redis.conf` and log. Every
//! [`RedisNode`] can be killed (`SIGKILL`), restarted on the same port (with
//! or without its data, after a delay), paused (`SIGSTOP`) and resumed
//! (`SIGCONT`). All processes are killed and reaped when the testbed is
//! dropped, also when a test panics.
//!
//! Nodes started with [`NodeOptions::fake_clock`] get a fake wall clock
//! that [`RedisNode::set_clock`] can speed up, slow down or step (see
//! [`fakeclock`]).
//!
//! The `redis-server` binary is taken from the `QUORUMLOCK_REDIS_SERVER`
//! environment variable, or else searched in `PATH` (see
//! [`redis_server_binary`]).
//!
//! ```
//! use quorumlock_testbed::{Restart, Testbed};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut testbed = Testbed::start(3)?;
//! assert_eq!(testbed.urls().len(), 3);
//!
//! let port = testbed.node(1).port();
//! testbed.node_mut(1).kill()?;
//! assert!(!testbed.node(1).is_running());
//!
//! testbed.node_mut(1).restart(Restart::immediate())?;
//! assert_eq!(testbed.node(1).port(), port);
//!
//! for node in testbed.nodes() {
//!     let mut con = node.connection()?;
//!     let pong: String = redis::cmd("PING").query(&mut con)?;
//!     assert_eq!(pong, "PONG");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Processes are only killed from `Drop`; if the test process itself is
//! killed (e.g. `SIGKILL`), the servers are left running.
//!
//! Network faults between a client and a node come from a [`Proxy`] in
//! front of the node: delay, loss, partition ([`NetFault::Blackhole`]) and
//! reset, all without dropping or reordering bytes of a live connection,
//! plus an upstream switch for failovers. A [`ReplicaPair`] is a master
//! with an asynchronous replica whose replication link can be cut with
//! `iptables`, so a failover loses the writes the replica never got.
//!
//! The [`docker`] module runs the same kind of nodes as containers of
//! `testbed/docker-compose.yml` (an image built from the machine's own
//! redis binaries by `testbed/run docker-image`), for real partitions and
//! frozen hosts.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod binary;
pub mod chaos;
pub mod docker;
mod error;
pub mod failover;
pub mod fakeclock;
pub mod hostile;
mod leftovers;
pub mod lock_key;
mod node;
mod options;
pub mod pki;
pub mod proxy;
pub mod sentinel;
pub mod table;
mod testbed;

pub use binary::{REDIS_SERVER_ENV, redis_server_binary, redis_server_binary_from};
pub use error::TestbedError;
pub use failover::{LinkCutChain, ReplicaPair, ReplicationOffsets, sweep_stale_chains};
pub use fakeclock::ClockSkew;
pub use node::RedisNode;
pub use options::{NodeOptions, Persistence, Restart};
pub use proxy::{NetFault, Proxy};
pub use sentinel::SentinelGroup;
pub use testbed::Testbed;

/// The `redis` crate this testbed is built against, so tests can use
/// [`RedisNode::connection`] without matching versions themselves.
pub use redis;
