//! A node's one connection: connecting once, shared by every caller, with
//! a backoff after failures; dropping a connection that failed; and the
//! classification of Redis errors.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::Node;
use crate::config::Target;
use crate::epoch::check_epoch;
use crate::error::{NodeError, NodeErrorKind};
use crate::health::NodeState;
use crate::scripts;
use crate::sentinel::connect_master;

pub(super) type Connect =
    Shared<BoxFuture<'static, Result<(MultiplexedConnection, u64), NodeError>>>;

pub(super) enum Slot {
    Idle,
    Connecting(Connect),
    Ready {
        conn: MultiplexedConnection,
        generation: u64,
    },
    /// The last connect failed: calls fail at once with its error until
    /// `retry_at`, so a node that refuses or drops every connection is not
    /// reconnected on every call (a storm of connects on the server).
    Failed {
        error: NodeError,
        retry_at: tokio::time::Instant,
    },
}

/// The first wait after a failed connect; it doubles with each failure in
/// a row, up to [`MAX_CONNECT_BACKOFF`], and starts over after a success.
pub(super) const MIN_CONNECT_BACKOFF: Duration = Duration::from_millis(25);
pub(super) const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(1);

impl Node {
    /// A new connection to the node's server: the configured one, or the
    /// master its Sentinel group names now.
    pub(super) async fn open(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<MultiplexedConnection, RedisError> {
        match &self.target {
            Target::Direct(client) => {
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
            }
            Target::Sentinel(group) => connect_master(group, config).await,
        }
    }

    /// Starts connecting in the background if not connected (needs to run
    /// inside a Tokio runtime).
    pub(crate) fn start_connecting(self: &Arc<Self>) {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.may_connect() {
            *slot = Slot::Connecting(self.spawn_connect());
        }
    }

    /// Connects now if not connected (used to warm up a lock).
    pub(crate) async fn ensure_connected(self: &Arc<Self>) -> Result<(), NodeError> {
        self.connection().await.map(|_| ())
    }

    /// The current connection, connecting (once, shared) if there is none.
    pub(super) async fn connection(
        self: &Arc<Self>,
    ) -> Result<(MultiplexedConnection, u64), NodeError> {
        let connect = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            match &*slot {
                Slot::Ready { conn, generation } => return Ok((conn.clone(), *generation)),
                Slot::Connecting(connect) => connect.clone(),
                Slot::Failed { error, .. } if !slot.may_connect() => return Err(error.clone()),
                Slot::Idle | Slot::Failed { .. } => {
                    let connect = self.spawn_connect();
                    *slot = Slot::Connecting(connect.clone());
                    connect
                }
            }
        };
        connect.await
    }

    pub(super) fn spawn_connect(self: &Arc<Self>) -> Connect {
        let node = Arc::clone(self);
        let task = tokio::spawn(async move {
            // Our own deadlines bound every call, so the crate's response
            // timeout is off; connecting and loading the scripts are bounded
            // together here.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(node.connect_timeout))
                .set_response_timeout(None);
            let connect = async {
                let mut conn = node.open(&config).await?;
                // Load the scripts before anyone can use the connection, so
                // that EVALSHA does not meet NOSCRIPT on a fresh server: an
                // EVAL fallback still pending when a fan-out decides is never
                // sent, which would leave that node out of the guard.
                let mut load = redis::pipe();
                for script in scripts::all() {
                    load.cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(script.body(node.flagged))
                        .ignore();
                }
                if let Err(e) = load.exec_async(&mut conn).await {
                    // Not fatal: EVALSHA falls back to EVAL per call.
                    tracing::debug!(node = %node.name, error = %e, "SCRIPT LOAD failed");
                }
                // Before any vote on this connection: the epoch marker must
                // belong to this server process (fatal: a node that cannot
                // be dated must not vote).
                let run_id = check_epoch(&mut conn, node.durable, node.flagged).await?;
                if let Some(voter) = node.servers.identify(node.index, &node.name, &run_id) {
                    node.health.set(NodeState::SameServer { voter });
                }
                Ok::<_, RedisError>(conn)
            };
            let result = match tokio::time::timeout(node.connect_timeout, connect).await {
                Ok(result) => result,
                Err(_) => Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect and script load timed out",
                ))),
            };
            node.connected(result)
        });
        let name = Arc::clone(&self.name);
        async move {
            task.await.unwrap_or_else(|e| {
                Err(NodeError::new(
                    &name,
                    NodeErrorKind::Unreachable,
                    format!("connect task ended: {e}"),
                ))
            })
        }
        .boxed()
        .shared()
    }

    /// Records how a connect ended in the slot: the connection with its
    /// generation, or the error and when the next connect may start.
    pub(super) fn connected(
        &self,
        result: Result<MultiplexedConnection, RedisError>,
    ) -> Result<(MultiplexedConnection, u64), NodeError> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(conn) => {
                self.connect_backoff_us.store(0, Ordering::Relaxed);
                let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
                *slot = Slot::Ready {
                    conn: conn.clone(),
                    generation,
                };
                tracing::debug!(node = %self.name, generation, "connected");
                Ok((conn, generation))
            }
            Err(e) => {
                let error = self.error(&e);
                self.health.set(NodeState::Unreachable {
                    detail: error.to_string(),
                });
                let wait = self.next_connect_backoff();
                tracing::debug!(node = %self.name, %error, wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "connect failed; calls fail fast until the next try");
                *slot = Slot::Failed {
                    error: error.clone(),
                    retry_at: tokio::time::Instant::now() + wait,
                };
                Err(error)
            }
        }
    }

    /// Drops a connection that failed, unless it was already replaced.
    /// The wait before the next connect after one more failure in a row.
    pub(super) fn next_connect_backoff(&self) -> Duration {
        let last = Duration::from_micros(self.connect_backoff_us.load(Ordering::Relaxed));
        let wait = (last * 2).clamp(MIN_CONNECT_BACKOFF, MAX_CONNECT_BACKOFF);
        self.connect_backoff_us.store(
            u64::try_from(wait.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        wait
    }

    pub(super) fn forget(&self, generation: u64) {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(&*slot, Slot::Ready { generation: g, .. } if *g == generation) {
            *slot = Slot::Idle;
        }
    }

    pub(super) fn error(&self, e: &RedisError) -> NodeError {
        NodeError::new(&self.name, classify(e), e.to_string())
    }
}

impl Slot {
    /// Whether a call may start a connect now: none is up or under way,
    /// and a failed one's backoff has passed.
    pub(super) fn may_connect(&self) -> bool {
        match self {
            Slot::Idle => true,
            Slot::Failed { retry_at, .. } => tokio::time::Instant::now() >= *retry_at,
            Slot::Connecting(_) | Slot::Ready { .. } => false,
        }
    }
}

/// Sorts a Redis error into the classes a caller can act on.
pub(super) fn classify(e: &RedisError) -> NodeErrorKind {
    match e.code() {
        Some("WRONGTYPE") => return NodeErrorKind::WrongType,
        Some("READONLY") => return NodeErrorKind::ReadOnly,
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return NodeErrorKind::Auth,
        Some("LOADING" | "BUSY" | "MASTERDOWN") => return NodeErrorKind::Busy,
        // The fencing script's own error for a bad counter.
        Some("QLCOUNTER") => return NodeErrorKind::InvalidCounter,
        Some("QLNOTEMPTY") => return NodeErrorKind::NotEmpty,
        _ => {}
    }
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        NodeErrorKind::Auth
    } else if e.is_timeout() {
        NodeErrorKind::Timeout
    } else if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        NodeErrorKind::Unreachable
    } else {
        NodeErrorKind::Other
    }
}
