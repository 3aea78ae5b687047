//! The error type of the testbed.

use std::io;
use std::time::Duration;

use crate::{ClockSkew, NetFault};

/// Everything that can go wrong while starting, stopping or inspecting
/// local `redis-server` processes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestbedError {
    /// The `redis-server` binary could not be located.
    #[error(
        "redis-server binary not found: {reason}; install with `apt-get install redis-server` \
         (Debian) or set QUORUMLOCK_REDIS_SERVER to the binary path"
    )]
    RedisServerNotFound {
        /// Why the lookup failed (which variable or search path was used).
        reason: String,
    },

    /// A file-system or process operation failed.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the testbed was doing when the error happened.
        context: String,
        /// The underlying operating-system error.
        #[source]
        source: io::Error,
    },

    /// A `redis-server` process did not come up (it exited, or it did not
    /// answer `PING` in time).
    #[error("redis-server on port {port} failed to start: {reason}\n--- log tail ---\n{log_tail}")]
    StartFailed {
        /// The port the server was supposed to listen on.
        port: u16,
        /// A short description of what went wrong.
        reason: String,
        /// The last lines of the node's log (and captured stderr), for diagnosis.
        log_tail: String,
    },

    /// The operation needs a running server, but the node is stopped.
    #[error("redis-server on port {port} is not running")]
    NotRunning {
        /// The node's port.
        port: u16,
    },

    /// The operation needs a stopped server, but the node is running.
    #[error("redis-server on port {port} is already running (pid {pid})")]
    AlreadyRunning {
        /// The node's port.
        port: u16,
        /// The pid of the running server.
        pid: u32,
    },

    /// A fake clock operation was asked of a node that was not started with
    /// [`NodeOptions::fake_clock`](crate::NodeOptions::fake_clock).
    #[error(
        "redis-server on port {port} has no fake clock (start it with NodeOptions::fake_clock)"
    )]
    FakeClockDisabled {
        /// The node's port.
        port: u16,
    },

    /// A [`ClockSkew`] the fake clock cannot run (see
    /// [`ClockSkew::validate`]).
    #[error("invalid clock skew ({skew}): {reason}")]
    InvalidClockSkew {
        /// The rejected skew.
        skew: ClockSkew,
        /// Which value is bad, and why.
        reason: String,
    },

    /// A Redis client operation failed.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),

    /// A [`NetFault`] with parameters out of range was given to a
    /// [`Proxy`](crate::Proxy).
    #[error("invalid network fault {fault:?}: {reason}")]
    InvalidNetFault {
        /// The rejected fault.
        fault: NetFault,
        /// Which parameter is wrong and why.
        reason: String,
    },

    /// The `iptables` command, needed to cut a replication link, is missing.
    #[error(
        "iptables not found: {reason}; install it with `apt-get install iptables` (Debian), \
         and run as root"
    )]
    IptablesNotFound {
        /// Why running it failed.
        reason: String,
    },

    /// An `iptables` command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Iptables {
        /// The command line that was run.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },

    /// A `docker` (or `docker compose`, `nsenter`) command of the docker
    /// testbed failed or did not answer in time.
    #[error("`{command}` failed ({status}): {stderr}")]
    Docker {
        /// The command line that was run.
        command: String,
        /// Its exit status, or why it has none.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },

    /// An `openssl` command that makes test certificates failed.
    #[error("`{command}` failed: {stderr}")]
    Openssl {
        /// The command line that was run.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },

    /// A replica did not catch up with its master in time.
    #[error(
        "replica on port {replica_port} not in sync with master on port {master_port} after {waited:?}: {detail}"
    )]
    NotInSync {
        /// The master's port.
        master_port: u16,
        /// The replica's port.
        replica_port: u16,
        /// How long was waited.
        waited: Duration,
        /// The last replication state seen (link status, offsets) or the
        /// last error.
        detail: String,
    },
}

impl TestbedError {
    /// Builds a closure wrapping an [`io::Error`] into [`TestbedError::Io`]
    /// with the given context, for use with `map_err`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}
