//! Node configuration and restart options.

use std::time::Duration;

/// How a node persists its data across restarts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Persistence {
    /// No persistence at all (`save ""`, `appendonly no`): a killed node
    /// comes back empty.
    #[default]
    None,
    /// `appendonly yes` + `appendfsync always`: every acknowledged write is
    /// on disk before the reply, so it survives a `SIGKILL`.
    AofAlways,
}

/// Options applied to every node of a [`Testbed`](crate::Testbed).
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// Persistence mode; defaults to [`Persistence::None`].
    pub persistence: Persistence,
    /// Extra `directive value` lines appended to the generated `redis.conf`
    /// (later lines override earlier ones, so these win over the defaults).
    /// The value is written verbatim, so quote it yourself if it contains
    /// spaces (e.g. `("save".into(), "\"\"".into())`).
    pub extra_config: Vec<(String, String)>,
    /// Run `redis-server` under the fake wall clock shim (`LD_PRELOAD`), so
    /// that [`RedisNode::set_clock`](crate::RedisNode::set_clock) can make
    /// its clock run fast or slow or step it; see [`crate::fakeclock`].
    /// Restarts keep the shim. Defaults to `false` (the real clock).
    pub fake_clock: bool,
    /// Leave a freshly started node unadopted, so that quarantine applies
    /// to it as to any server quorumlock meets with no history. By default
    /// (`false`) the first start of a node adopts it
    /// ([`quorumlock::MultiLock::adopt_empty_nodes`]): it is brand new and
    /// empty, and tests that are not about the quarantine need not wait it
    /// out. Restarts are never adopted.
    pub skip_adoption: bool,
}

/// How [`RedisNode::restart`](crate::RedisNode::restart) brings a node back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restart {
    /// How long the node stays down (blocking sleep) before it is started again.
    pub delay: Duration,
    /// Whether the node's data files (AOF directory/files, RDB dump) are
    /// deleted while it is down, simulating a server that lost its disk.
    pub wipe_data: bool,
}

impl Restart {
    /// Restart right away, keeping the data files.
    #[must_use]
    pub fn immediate() -> Self {
        Self {
            delay: Duration::ZERO,
            wipe_data: false,
        }
    }

    /// Restart after staying down for `delay`, keeping the data files.
    #[must_use]
    pub fn after(delay: Duration) -> Self {
        Self {
            delay,
            wipe_data: false,
        }
    }

    /// The same restart, but deleting the data files while the node is down.
    #[must_use]
    pub fn wiping(self) -> Self {
        Self {
            wipe_data: true,
            ..self
        }
    }
}
