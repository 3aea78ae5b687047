//! One independent Redis master: its connection, the script calls made on
//! it, and the classification of its errors.
//!
//! Each node has **one** multiplexed connection: one FIFO queue of
//! commands into one socket. A rollback or release is only created after the
//! fan-out of its acquire has ended, so it queues behind that acquire and
//! runs after it on the node; it can never overtake it (DESIGN.md, safety
//! rule 5). A connection pool would lose this ordering.
//!
//! What happens to a call whose future is dropped depends on how far it got:
//! a command already written to the socket runs on the node; one still
//! queued is skipped by redis-rs (it sheds requests nobody waits for); one
//! still waiting for a connection was never queued. So a dropped acquire may
//! or may not have run, which is why its rollback goes to the node anyway,
//! and why releases are never dropped but finished in the background
//! ([`crate::fanout`]).
//!
//! Connecting runs in a spawned task shared by every caller, so a node that is
//! slow to accept (paused, far away) costs each caller at most its own
//! deadline, and the connect completes for the next caller when it can.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, RedisError, Value,
};

use crate::error::{NodeError, NodeErrorKind};
use crate::scripts::{self, Script};
use crate::stats::{NodeCounters, bump};

type Connect = Shared<BoxFuture<'static, Result<(MultiplexedConnection, u64), NodeError>>>;

enum Slot {
    Idle,
    Connecting(Connect),
    Ready {
        conn: MultiplexedConnection,
        generation: u64,
    },
}

/// A node of the lock: one Redis master.
pub(crate) struct Node {
    name: Arc<str>,
    client: Client,
    connect_timeout: Duration,
    slot: Mutex<Slot>,
    generations: AtomicU64,
    pub(crate) counters: NodeCounters,
}

/// Keys per renew script call (the watchdog's group size): large enough
/// that 10,000 locks take a few dozen calls per node, small enough that one
/// call holds the server for well under a millisecond.
pub(crate) const RENEW_CHUNK: usize = 256;

/// One lock of a watchdog group.
#[derive(Clone, Debug)]
pub(crate) struct RenewItem {
    pub(crate) key: Arc<str>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl_ms: u64,
}

/// A node's answer to the renew script, for one lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewReply {
    /// Our token was there; its TTL is reset.
    Renewed,
    /// The key was absent and is ours again (same token, same TTL).
    Healed,
    /// Another owner (or a non-lock value) holds the key.
    NotOurs,
}

/// A node's answer to the acquire script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The node holds our token now.
    Won,
    /// Another owner holds it for `pttl` more (`None`: no expiry).
    Held { pttl: Option<Duration> },
}

impl Node {
    pub(crate) fn new(client: Client, connect_timeout: Duration) -> Node {
        Node {
            name: display_name(client.get_connection_info()).into(),
            client,
            connect_timeout,
            slot: Mutex::new(Slot::Idle),
            generations: AtomicU64::new(0),
            counters: NodeCounters::default(),
        }
    }

    /// The node's address as shown in reports (no credentials).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Runs the acquire script.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        key: Arc<str>,
        token: Arc<str>,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<AcquireReply, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            match node
                .eval(&scripts::ACQUIRE, one_key(&key, &token, Some(ttl_ms)))
                .await?
            {
                Value::Okay => Ok(AcquireReply::Won),
                Value::Int(ms) if ms >= 0 => Ok(AcquireReply::Held {
                    pttl: Some(Duration::from_millis(ms as u64)),
                }),
                // -1: the holder set no expiry. (-2, "no key", cannot happen: we just read it.)
                Value::Int(_) => Ok(AcquireReply::Held { pttl: None }),
                other => Err(node.unexpected(other)),
            }
        }
    }

    /// Runs the compare-and-delete script; `true` when our key was deleted.
    pub(crate) fn release(
        self: &Arc<Self>,
        key: Arc<str>,
        token: Arc<str>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .eval(&scripts::RELEASE, one_key(&key, &token, None))
                .await?;
            node.flag(reply)
        }
    }

    /// Runs the compare-and-expire script; `true` when our key got the new TTL.
    pub(crate) fn extend(
        self: &Arc<Self>,
        key: Arc<str>,
        token: Arc<str>,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .eval(&scripts::EXTEND, one_key(&key, &token, Some(ttl_ms)))
                .await?;
            node.flag(reply)
        }
    }

    /// Runs the renew script once for every item of a watchdog group (the
    /// watchdog keeps groups to [`RENEW_CHUNK`] keys) and returns one reply
    /// per item, in order.
    pub(crate) fn renew(
        self: &Arc<Self>,
        items: Arc<[RenewItem]>,
    ) -> impl Future<Output = Result<Vec<RenewReply>, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            bump(&node.counters.renew_calls);
            let reply = node
                .eval(&scripts::RENEW, |cmd: &mut Cmd| {
                    cmd.arg(items.len());
                    for item in items.iter() {
                        cmd.arg(&*item.key);
                    }
                    for item in items.iter() {
                        cmd.arg(&*item.token).arg(item.ttl_ms);
                    }
                })
                .await?;
            match reply {
                Value::Array(codes) if codes.len() == items.len() => codes
                    .into_iter()
                    .map(|code| match code {
                        Value::Int(1) => Ok(RenewReply::Renewed),
                        Value::Int(2) => Ok(RenewReply::Healed),
                        Value::Int(0 | -1) => Ok(RenewReply::NotOurs),
                        other => Err(node.unexpected(other)),
                    })
                    .collect(),
                other => Err(node.unexpected(other)),
            }
        }
    }

    /// Starts connecting in the background if not connected (needs to run
    /// inside a Tokio runtime).
    pub(crate) fn start_connecting(self: &Arc<Self>) {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*slot, Slot::Idle) {
            *slot = Slot::Connecting(self.spawn_connect());
        }
    }

    /// Connects now if not connected (used to warm up a lock).
    pub(crate) async fn ensure_connected(self: &Arc<Self>) -> Result<(), NodeError> {
        self.connection().await.map(|_| ())
    }

    fn flag(&self, reply: Value) -> Result<bool, NodeError> {
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(self.unexpected(other)),
        }
    }

    fn unexpected(&self, reply: Value) -> NodeError {
        NodeError::new(
            &self.name,
            NodeErrorKind::UnexpectedReply,
            format!("{reply:?}"),
        )
    }

    /// `EVALSHA`, falling back to `EVAL` (which also caches the script) when
    /// the server lost its script cache (restart, `SCRIPT FLUSH`). The
    /// fallback is sent only while this future is alive, so a fan-out that
    /// has already decided and dropped it never sends a late second command.
    ///
    /// A connection found dead (e.g. the server restarted since it was made)
    /// is replaced and the call sent once more. That cannot reorder anything:
    /// a closed socket runs no further commands on the server, and each
    /// script is idempotent for one token.
    ///
    /// `args` appends everything after the script reference (`numkeys`,
    /// keys, arguments).
    async fn eval(
        self: &Arc<Self>,
        script: &Script,
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, NodeError> {
        let build = |verb: &str, script_ref: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(script_ref);
            args(&mut cmd);
            cmd
        };
        let result = self.eval_reconnecting(&build, script).await;
        if result.is_err() {
            bump(&self.counters.errors);
        }
        result
    }

    /// The body of [`eval`](Self::eval), before failures are counted.
    async fn eval_reconnecting(
        self: &Arc<Self>,
        build: &impl Fn(&str, &str) -> Cmd,
        script: &Script,
    ) -> Result<Value, NodeError> {
        let mut reconnected = false;
        loop {
            let (mut conn, generation) = self.connection().await?;
            let result = match self
                .send(&mut conn, generation, &build("EVALSHA", &script.sha))
                .await
            {
                Err(e) if e.code() == Some("NOSCRIPT") => {
                    self.send(&mut conn, generation, &build("EVAL", script.body))
                        .await
                }
                result => result,
            };
            match result {
                Err(e) if e.is_connection_dropped() && !reconnected => reconnected = true,
                result => return result.map_err(|e| self.error(&e)),
            }
        }
    }

    async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        generation: u64,
        cmd: &Cmd,
    ) -> Result<Value, RedisError> {
        match conn.send_packed_command(cmd).await {
            Ok(Value::ServerError(e)) => Err(e.into()),
            Ok(v) => Ok(v),
            Err(e) => {
                if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
                    self.forget(generation);
                }
                Err(e)
            }
        }
    }

    /// The current connection, connecting (once, shared) if there is none.
    async fn connection(self: &Arc<Self>) -> Result<(MultiplexedConnection, u64), NodeError> {
        let connect = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            match &*slot {
                Slot::Ready { conn, generation } => return Ok((conn.clone(), *generation)),
                Slot::Connecting(connect) => connect.clone(),
                Slot::Idle => {
                    let connect = self.spawn_connect();
                    *slot = Slot::Connecting(connect.clone());
                    connect
                }
            }
        };
        connect.await
    }

    fn spawn_connect(self: &Arc<Self>) -> Connect {
        let node = Arc::clone(self);
        let task = tokio::spawn(async move {
            // Our own deadlines bound every call, so the crate's response
            // timeout is off; connecting and loading the scripts are bounded
            // together here.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(node.connect_timeout))
                .set_response_timeout(None);
            let connect = async {
                let mut conn = node
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                // Load the scripts before anyone can use the connection, so
                // that EVALSHA does not meet NOSCRIPT on a fresh server: an
                // EVAL fallback still pending when a fan-out decides is never
                // sent, which would leave that node out of the guard.
                let mut load = redis::pipe();
                for script in scripts::all() {
                    load.cmd("SCRIPT").arg("LOAD").arg(script.body).ignore();
                }
                if let Err(e) = load.exec_async(&mut conn).await {
                    // Not fatal: EVALSHA falls back to EVAL per call.
                    tracing::debug!(node = %node.name, error = %e, "SCRIPT LOAD failed");
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
            let mut slot = node.slot.lock().unwrap_or_else(PoisonError::into_inner);
            match result {
                Ok(conn) => {
                    let generation = node.generations.fetch_add(1, Ordering::Relaxed) + 1;
                    *slot = Slot::Ready {
                        conn: conn.clone(),
                        generation,
                    };
                    tracing::debug!(node = %node.name, generation, "connected");
                    Ok((conn, generation))
                }
                Err(e) => {
                    *slot = Slot::Idle;
                    Err(node.error(&e))
                }
            }
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

    /// Drops a connection that failed, unless it was already replaced.
    fn forget(&self, generation: u64) {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(&*slot, Slot::Ready { generation: g, .. } if *g == generation) {
            *slot = Slot::Idle;
        }
    }

    fn error(&self, e: &RedisError) -> NodeError {
        NodeError::new(&self.name, classify(e), e.to_string())
    }
}

/// Arguments of a one-key script: `1 key token [ttl_ms]`.
fn one_key<'a>(key: &'a str, token: &'a str, ttl_ms: Option<u64>) -> impl Fn(&mut Cmd) + 'a {
    move |cmd| {
        cmd.arg(1).arg(key).arg(token);
        if let Some(ttl) = ttl_ms {
            cmd.arg(ttl);
        }
    }
}

/// Sorts a Redis error into the classes a caller can act on.
pub(crate) fn classify(e: &RedisError) -> NodeErrorKind {
    match e.code() {
        Some("WRONGTYPE") => return NodeErrorKind::WrongType,
        Some("READONLY") => return NodeErrorKind::ReadOnly,
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return NodeErrorKind::Auth,
        Some("LOADING" | "BUSY" | "MASTERDOWN") => return NodeErrorKind::Busy,
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

/// `redis://host:port[/db]`, without credentials, for reports and logs.
fn display_name(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    let db = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}{db}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}{db}"),
        other => format!("{other}{db}"),
    }
}
