//! One independent Redis master: its connection, the script calls made on
//! it, and the classification of its errors.
//!
//! Each node has **one** multiplexed connection: one FIFO queue of
//! commands into one socket. A rollback or release is only created after the
//! fan-out of its acquire has ended, so it queues behind that acquire and
//! runs after it on the node; it can never overtake it. A connection pool
//! would lose this ordering.
//!
//! A call whose future is dropped after it went out is not lost: its
//! command keeps its place in the connection's queue and its reply is
//! still awaited and recorded ([`in_flight`]), so a node is judged by what
//! its connection receives, never by whether a caller still awaited it. A
//! call dropped before it went out (still waiting for a connection or for
//! its node's turn) never goes out, unless it undoes a write: a release,
//! a rollback, a waiter leaving its queues is an [`Undo`], which is never
//! dropped ([`undo`]).
//!
//! Acquires and releases go through the node's group commit
//! ([`group_commit`]).
//!
//! Connecting runs in a spawned task shared by every caller, so a node that is
//! slow to accept (paused, far away) costs each caller at most its own
//! deadline, and the connect completes for the next caller when it can.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, Value};

use crate::background::Background;
use crate::batch::Batcher;

use crate::config::{Target, display_name};
use crate::epoch::{ServerHistory, check_epoch};
use crate::error::{NodeError, NodeErrorKind, NodeOutcome};
use crate::health::{Health, NodeState};
use crate::keys::{Entry, KeySet, Reached, Ticket};
use crate::quorum::Vote;
use crate::scripts::{self, Script};
use crate::sentinel::connect_master;
use crate::server_ids::ServerIds;
use crate::stats::{NodeCounters, bump};
use crate::telemetry;

mod group_commit;
mod in_flight;
mod undo;

use group_commit::{Batched, Pending};
use in_flight::{Drain, InFlight, Liveness, Watch};
pub(crate) use undo::Undo;

type Connect = Shared<BoxFuture<'static, Result<(MultiplexedConnection, u64), NodeError>>>;

enum Slot {
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

/// How many requests a suspect connection (a call timed out, nothing
/// answered since) is sent before it counts as stalled without waiting out
/// the connect timeout: releases do not wait for a suspect node, so calls
/// to it come fast, and each would sit in its queue until it answers.
const MAX_UNANSWERED_WHEN_SUSPECT: u32 = 64;

/// The first wait after a failed connect; it doubles with each failure in
/// a row, up to [`MAX_CONNECT_BACKOFF`], and starts over after a success.
const MIN_CONNECT_BACKOFF: Duration = Duration::from_millis(25);
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// See [`Node::readiness`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// No connection up: a call connects first.
    Disconnected,
    /// Connected, but a call timed out and nothing has answered since.
    Suspect,
    Healthy,
}

/// A node of the lock: one Redis master.
pub(crate) struct Node {
    name: Arc<str>,
    target: Target,
    connect_timeout: Duration,
    /// The quarantine sent with every vote, in ms (see `scripts/epoch.lua`).
    quarantine_ms: u64,
    /// Declared durable: no quarantine, and its epoch survives restarts.
    durable: bool,
    /// The epoch marker this node last reported settled (past the
    /// quarantine), sent with every vote so that the script can skip its
    /// clock and parse when the marker is unchanged (`scripts/epoch.lua`);
    /// empty until the first report.
    settled: Mutex<Vec<u8>>,
    /// Sends every script flagged as a write (`#!lua`): a Sentinel node,
    /// whose masters refuse writes once cut off from their replicas.
    flagged: bool,
    slot: Mutex<Slot>,
    /// The wait after the next failed connect, in µs (0: none failed).
    connect_backoff_us: AtomicU64,
    /// What the connection receives, and the task that awaits the replies
    /// nobody else awaits ([`in_flight`]).
    drain: Arc<Drain>,
    generations: AtomicU64,
    /// Which server each node of this lock service reaches (one vote per
    /// server), and this node's place among them.
    servers: Arc<ServerIds>,
    index: usize,
    /// Group commit of acquires and releases (see [`crate::batch`]).
    batcher: Batcher<Pending>,
    pub(crate) counters: NodeCounters,
    /// The lock service's count of undo work still running
    /// ([`crate::MultiLock::settle`]).
    background: Arc<Background>,
    /// Whether it counts toward the quorum, logged once per change.
    health: Health,
}

/// Lock keys per renew script call (the watchdog's group size): large
/// enough that 10,000 locks take a few dozen calls per node, small enough
/// that one call holds the server for well under a millisecond.
pub(crate) const RENEW_CHUNK: usize = 256;

/// The longest epoch marker kept from a node's reply: a real one ("<run_id>
/// <epoch id> <start ms> <origin>") is under 100 bytes; a longer one is an
/// unexpected reply, never stored.
const MAX_MARKER_LEN: usize = 256;

/// The largest fencing counter accepted from a node: below 2^53 (exact in
/// the scripts' Lua numbers) with room for the next token.
pub(crate) const MAX_COUNTER: u64 = (1 << 53) - 2;

/// One guard of a watchdog group.
#[derive(Clone)]
pub(crate) struct RenewItem {
    pub(crate) entry: Entry,
    pub(crate) ttl_ms: u64,
}

/// A node's answer to the renew script, for one guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewReply {
    /// Our token was on every key; the TTLs are reset.
    Renewed,
    /// Some key was absent and is ours again (same token, same TTL).
    Healed,
    /// Another owner (or a non-lock value) holds some key.
    NotOurs,
}

/// One name's fencing counter as a node holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The counter's value (`None`: the node has none).
    pub(crate) value: Option<u64>,
    /// Written in the node's current epoch (or absent on a node whose
    /// epoch is its whole history): not gone back or away since. See
    /// [`crate::fence`].
    pub(crate) current: bool,
}

/// What the fencing read (`scripts/read_fences.lua`) found on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FenceRead {
    /// The node's clock (`TIME`) in µs, for the time floor.
    pub(crate) time_us: u64,
    pub(crate) readings: Box<[Reading]>,
}

/// A node's answer to the acquire script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The node holds every key for us now; each key's fencing counter
    /// (`None`: the node has none).
    Won { fences: Box<[Reading]> },
    /// Another owner holds a key for `pttl` more (`None`: no expiry).
    Held { pttl: Option<Duration> },
    /// A key is free, but a waiter of another acquire call is queued ahead
    /// of this one (`scripts/queue.lua`).
    Queued,
}

/// The moment a fan-out decided, for calls it lets finish in the
/// background: a call not sent by then is never sent (nor sent again on a
/// new connection, nor followed by an `EVAL` fallback). A command already
/// queued on the connection runs, in order, before anything queued after
/// the decision, such as the release of what it takes.
#[derive(Debug, Default)]
pub(crate) struct Cutoff(AtomicBool);

impl Cutoff {
    /// Sequentially consistent with [`Reached`]'s marks: see there.
    pub(crate) fn pass(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn passed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A node's answer to an owner-checked script (extend, fencing raise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnerCheck {
    /// Every key carried our token; the script did its write.
    Ours,
    /// Some key did not; nothing was written.
    NotOurs,
}

impl OwnerCheck {
    /// How the answer counts for a quorum.
    pub(crate) fn vote(&self) -> Vote {
        match self {
            OwnerCheck::Ours => Vote::Won,
            OwnerCheck::NotOurs => Vote::Contended,
        }
    }
}

impl From<OwnerCheck> for NodeOutcome {
    fn from(check: OwnerCheck) -> NodeOutcome {
        match check {
            OwnerCheck::Ours => NodeOutcome::Won,
            OwnerCheck::NotOurs => NodeOutcome::NotHeld,
        }
    }
}

impl AcquireReply {
    /// A refusal: the script wrote no lock key (`None` for a win). The
    /// holder's remaining TTL when another owner holds a key, `Some(None)`
    /// when it set none or when waiters queue ahead.
    pub(crate) fn refused(&self) -> Option<Option<Duration>> {
        match self {
            AcquireReply::Won { .. } => None,
            AcquireReply::Held { pttl } => Some(*pttl),
            AcquireReply::Queued => Some(None),
        }
    }

    /// How the answer counts for a quorum.
    pub(crate) fn vote(&self) -> Vote {
        match self {
            AcquireReply::Won { .. } => Vote::Won,
            AcquireReply::Held { .. } | AcquireReply::Queued => Vote::Contended,
        }
    }
}

impl From<AcquireReply> for NodeOutcome {
    fn from(reply: AcquireReply) -> NodeOutcome {
        match reply {
            AcquireReply::Won { .. } => NodeOutcome::Won,
            AcquireReply::Held { pttl } => NodeOutcome::HeldByOther { pttl },
            AcquireReply::Queued => NodeOutcome::WaitersAhead,
        }
    }
}

/// A node's answer to the release script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// No key carried our token.
    NotOurs,
    /// Our entry is gone and the keys with it.
    Freed,
    /// Our entry is gone; the owner's other holds keep the keys.
    Kept,
}

impl Node {
    /// A node that votes only after `quarantine` since its data may last
    /// have been lost, unless `durable`; node `index` of `servers`.
    pub(crate) fn new(
        target: Target,
        (connect_timeout, node_timeout): (Duration, Duration),
        quarantine: Duration,
        durable: bool,
        background: Arc<Background>,
        (servers, index): (Arc<ServerIds>, usize),
    ) -> Node {
        let name: Arc<str> = match &target {
            Target::Direct(client) => display_name(client.get_connection_info()).into(),
            Target::Sentinel(group) => format!("redis+sentinel://{}", group.service).into(),
        };
        Node {
            flagged: matches!(target, Target::Sentinel(_)),
            health: Health::new(Arc::clone(&name)),
            name,
            target,
            connect_timeout,
            quarantine_ms: u64::try_from(quarantine.as_millis()).unwrap_or(u64::MAX),
            durable,
            background,
            settled: Mutex::new(Vec::new()),
            slot: Mutex::new(Slot::Idle),
            connect_backoff_us: AtomicU64::new(0),
            drain: Arc::new(Drain::new(Arc::new(Watch::new(node_timeout)))),
            generations: AtomicU64::new(0),
            servers,
            index,
            batcher: Batcher::default(),
            counters: NodeCounters::default(),
        }
    }

    /// The node's address as shown in reports (no credentials).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// What a round may expect of the node now: whether its connection is
    /// up (commands queue on first poll), and if so whether it is suspect:
    /// a call to it timed out and nothing has answered on its connection
    /// since (a paused, overloaded or cut-off server). A release sends to a
    /// suspect node but does not wait for it. A node that answers a call
    /// within the node timeout again is at once no longer suspect.
    pub(crate) fn readiness(&self) -> Readiness {
        let Some(generation) = self.ready_generation() else {
            return Readiness::Disconnected;
        };
        let liveness = self.liveness();
        if liveness.generation == generation && liveness.timed_out {
            Readiness::Suspect
        } else {
            Readiness::Healthy
        }
    }

    /// Connected and not suspect.
    pub(crate) fn is_healthy(&self) -> bool {
        self.readiness() == Readiness::Healthy
    }

    /// Records that a call to this node went unanswered for the node
    /// timeout: the node is suspect until its connection answers a call
    /// within the node timeout.
    pub(crate) fn timed_out(&self) {
        if let Some(generation) = self.ready_generation() {
            let mut liveness = self.liveness();
            liveness.on(generation);
            liveness.timed_out = true;
        }
    }

    /// The error of a call not sent because the node's connection has
    /// answered nothing for too long (see [`stalled`](Self::stalled)), if
    /// it has, counting the calls queued for the node's turn. Checked only
    /// while the turn is taken, before a call queues behind the call that
    /// holds it; a call that takes the turn meets the same check in
    /// [`send`](Self::send).
    fn silent(self: &Arc<Self>) -> Option<NodeError> {
        let queued = self.batcher.waiting()?;
        let (conn, generation) = match &*self.slot.lock().unwrap_or_else(PoisonError::into_inner) {
            Slot::Ready { conn, generation } => (conn.clone(), *generation),
            _ => return None,
        };
        let queued = u32::try_from(queued).unwrap_or(u32::MAX);
        self.stalled(&conn, generation, queued)
            .map(|silent_for| self.error(&silent_error(silent_for)))
    }

    fn ready_generation(&self) -> Option<u64> {
        match &*self.slot.lock().unwrap_or_else(PoisonError::into_inner) {
            Slot::Ready { generation, .. } => Some(*generation),
            _ => None,
        }
    }

    /// The client, for connections of other kinds (the wake-up
    /// subscriber); `None` for a Sentinel group, whose server moves.
    pub(crate) fn client(&self) -> Option<&Client> {
        self.target.direct()
    }

    /// A new connection to the node's server: the configured one, or the
    /// master its Sentinel group names now.
    async fn open(
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

    /// Runs the acquire script for every key of the entry. `waits`: the
    /// caller waits for a release notice, so a key found held is marked
    /// and its release announces itself; an entry with a ticket also takes
    /// (or keeps) a place in the names' waiter queues for `lease_ms`
    /// (`scripts/acquire.lua`, `scripts/queue.lua`). Not sent at all once
    /// `cutoff` has passed.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        entry: Entry,
        ttl_ms: u64,
        waits: bool,
        lease_ms: u64,
        cutoff: Arc<Cutoff>,
    ) -> impl Future<Output = Result<AcquireReply, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let m = entry.keys.len();
            let call = Batched::Acquire {
                entry,
                ttl_ms,
                waits,
                lease_ms,
            };
            let reply = node.batched(call, Some(cutoff)).await?;
            match reply {
                Value::Array(items) => match items.as_slice() {
                    [Value::Int(1), fences @ ..] if fences.len() == 2 * m => node
                        .readings(fences)
                        .map(|fences| AcquireReply::Won { fences }),
                    // -1: the holder set no expiry.
                    [Value::Int(0), Value::Int(ms @ -1..), Value::Int(_)] => {
                        Ok(AcquireReply::Held { pttl: pttl(*ms) })
                    }
                    [Value::Int(0), Value::Int(-2), Value::Int(_)] => Ok(AcquireReply::Queued),
                    _ => Err(node.unexpected(Value::Array(items))),
                },
                other => Err(node.unexpected(other)),
            }
        }
    }

    /// Runs the release script once: gives back this entry on every key,
    /// and publishes a release notice for each key that became free if a
    /// waiter marked it or waits in its queue. `leave`: the entry's ticket
    /// gives up its places in the queues too (a guard's release; a
    /// rollback's waiter still waits). Callers use
    /// [`release`](Self::release), which never drops it.
    async fn release_once(
        self: &Arc<Self>,
        entry: &Entry,
        leave: bool,
    ) -> Result<ReleaseReply, NodeError> {
        let call = Batched::Release {
            entry: entry.clone(),
            leave,
        };
        match self.batched(call, None).await? {
            Value::Int(0) => Ok(ReleaseReply::NotOurs),
            Value::Int(1) => Ok(ReleaseReply::Freed),
            Value::Int(2) => Ok(ReleaseReply::Kept),
            other => Err(self.unexpected(other)),
        }
    }

    /// Gives up the places of `ticket` in the waiter queues of `keys` (an
    /// acquire call that stops waiting without the lock): the release
    /// script with an entry that holds nothing, never dropped; `lives`:
    /// how long a place outlives its waiter's last attempt.
    pub(crate) fn leave_queues(
        self: &Arc<Self>,
        keys: Arc<KeySet>,
        ticket: Ticket,
        lives: Duration,
    ) -> Undo<Result<ReleaseReply, NodeError>> {
        let entry = Entry {
            keys,
            token: Arc::from(""),
            id: Arc::from(""),
            ticket: Some(ticket),
            reached: Arc::new(Reached::new(0)),
        };
        self.release(entry, true, lives)
    }

    /// Runs the handoff script: gives back `from` (one name) and takes the
    /// name for `to` where that left it free.
    pub(crate) fn handoff(
        self: &Arc<Self>,
        from: Entry,
        to: Entry,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<(ReleaseReply, Result<AcquireReply, NodeError>), NodeError>>
    + Send
    + 'static {
        let node = Arc::clone(self);
        async move {
            // Never resent: a resend on a new connection could run after the
            // waiter's rollback (sent on that connection too) and take the
            // name for a waiter that gave up. A plain release of our own entry
            // is sent instead: a release cannot be overtaken by anything.
            let how = How {
                resend: Resend::Never,
                reached: &|| to.reached.mark(node.index),
                ..How::plain()
            };
            let (young, reply) = match node
                .vote(&scripts::HANDOFF, how, |cmd| {
                    with_fences_and_queues(cmd, &from.keys);
                    cmd.arg(&*from.token)
                        .arg(&*from.id)
                        .arg(queue_id(&from, true))
                        .arg(&*to.token)
                        .arg(&*to.id)
                        .arg(queue_id(&to, true))
                        .arg(ttl_ms);
                })
                .await
            {
                Ok(reply) => reply,
                // Not sent, or not known to have run: our own entry is given
                // back by a plain release, which goes out whatever happened
                // (a second release of an entry already gone changes
                // nothing).
                Err(e) => {
                    let lives = Duration::from_millis(ttl_ms);
                    let _ = node.release(from, true, lives).await;
                    return Err(e);
                }
            };
            let Value::Array(items) = reply else {
                return Err(node.unexpected(reply));
            };
            let released = match items.first() {
                Some(Value::Int(0)) => ReleaseReply::NotOurs,
                Some(Value::Int(1)) => ReleaseReply::Freed,
                Some(Value::Int(2)) => ReleaseReply::Kept,
                _ => return Err(node.unexpected(Value::Array(items))),
            };
            let acquired = match items.get(1..) {
                Some([Value::Int(1), value, current]) => AcquireReply::Won {
                    fences: node.readings(&[value.clone(), current.clone()])?,
                },
                Some([Value::Int(0), Value::Int(ms @ -1..)]) => {
                    AcquireReply::Held { pttl: pttl(*ms) }
                }
                _ => return Err(node.unexpected(Value::Array(items))),
            };
            // A young node released and took the name all the same; only
            // its vote for the waiter does not count.
            let acquired = match young {
                Some(left) => Err(node.quarantined(left)),
                None => Ok(acquired),
            };
            Ok((released, acquired))
        }
    }

    /// Runs the compare-and-expire script; [`OwnerCheck::Ours`] when every
    /// key is ours and lives at least `ttl_ms` now.
    pub(crate) fn extend(
        self: &Arc<Self>,
        entry: Entry,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<OwnerCheck, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .voting(
                    &scripts::EXTEND,
                    &|| entry.reached.mark(node.index),
                    |cmd| {
                        with_keys(cmd, &entry.keys);
                        cmd.arg(&*entry.token).arg(&*entry.id).arg(ttl_ms);
                    },
                )
                .await?;
            node.owner_check(reply)
        }
    }

    /// Raises the fencing counters of the entry's keys to `token` if every
    /// key is still ours or absent (an absent key is re-taken first, for
    /// `heal_ms`); [`OwnerCheck::Ours`] when it did (every counter is
    /// `>= token`).
    pub(crate) fn raise_fence(
        self: &Arc<Self>,
        entry: Entry,
        token: u64,
        heal_ms: u64,
    ) -> impl Future<Output = Result<OwnerCheck, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .voting(&scripts::FENCE, &|| entry.reached.mark(node.index), |cmd| {
                    with_fences(cmd, &entry.keys);
                    cmd.arg(&*entry.token)
                        .arg(token)
                        .arg(&*entry.id)
                        .arg(heal_ms);
                })
                .await?;
            match reply {
                // Raised after re-taking an absent key: as good as ours.
                Value::Int(2) => Ok(OwnerCheck::Ours),
                other => node.owner_check(other),
            }
        }
    }

    /// Reads the fencing counters of `keys` (`None`: the node has none).
    pub(crate) fn read_fences(
        self: &Arc<Self>,
        keys: Arc<KeySet>,
    ) -> impl Future<Output = Result<FenceRead, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .voting(&scripts::READ_FENCES, NOTHING, |cmd| {
                    cmd.arg(keys.len()).arg(keys.fences());
                })
                .await?;
            let Value::Array(items) = reply else {
                return Err(node.unexpected(reply));
            };
            match items.as_slice() {
                [Value::Int(time_us), readings @ ..]
                    if readings.len() == 2 * keys.len() && *time_us >= 0 =>
                {
                    Ok(FenceRead {
                        time_us: time_us.unsigned_abs(),
                        readings: node.readings(readings)?,
                    })
                }
                _ => Err(node.unexpected(Value::Array(items))),
            }
        }
    }

    /// Runs the renew script once for every item of a watchdog group (the
    /// watchdog keeps groups to about [`RENEW_CHUNK`] keys) and returns one
    /// reply per item, in order.
    pub(crate) fn renew(
        self: &Arc<Self>,
        items: Arc<[RenewItem]>,
    ) -> impl Future<Output = Result<Vec<RenewReply>, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            bump(&node.counters.renew_calls);
            // A renewal re-takes a key a node lost: a write of each entry.
            let reached = || {
                for item in items.iter() {
                    item.entry.reached.mark(node.index);
                }
            };
            let reply = node
                .voting(&scripts::RENEW, &reached, |cmd: &mut Cmd| {
                    let keys: usize = items.iter().map(|i| i.entry.keys.len()).sum();
                    cmd.arg(keys);
                    for item in items.iter() {
                        names(cmd, &item.entry.keys);
                    }
                    for item in items.iter() {
                        cmd.arg(&*item.entry.token)
                            .arg(&*item.entry.id)
                            .arg(item.ttl_ms)
                            .arg(item.entry.keys.len());
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
        if slot.may_connect() {
            *slot = Slot::Connecting(self.spawn_connect());
        }
    }

    /// Connects now if not connected (used to warm up a lock).
    pub(crate) async fn ensure_connected(self: &Arc<Self>) -> Result<(), NodeError> {
        self.connection().await.map(|_| ())
    }

    fn owner_check(&self, reply: Value) -> Result<OwnerCheck, NodeError> {
        match reply {
            Value::Int(1) => Ok(OwnerCheck::Ours),
            Value::Int(0) => Ok(OwnerCheck::NotOurs),
            other => Err(self.unexpected(other)),
        }
    }

    /// A fencing counter as a script or `MGET` returns it: `None` when the
    /// node has none; a value outside `0..=MAX_COUNTER` (or not a number)
    /// is [`NodeErrorKind::InvalidCounter`] naming the node and the value.
    fn counter(&self, value: &Value) -> Result<Option<u64>, NodeError> {
        let parsed = match value {
            Value::Nil => return Ok(None),
            Value::BulkString(bytes) => std::str::from_utf8(bytes)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok()),
            Value::Int(c) => u64::try_from(*c).ok(),
            _ => None,
        };
        parsed
            .filter(|c| *c <= MAX_COUNTER)
            .map(Some)
            .ok_or_else(|| {
                let shown = match value {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    Value::Int(c) => c.to_string(),
                    other => format!("{other:?}"),
                };
                NodeError::new(
                    &self.name,
                    NodeErrorKind::InvalidCounter,
                    format!("fencing counter {shown} is not a whole number in 0..={MAX_COUNTER}"),
                )
            })
    }

    /// A vote script's reply, sent with the node's quarantine: the reply of
    /// a node that votes, or [`NodeErrorKind::Quarantined`] for a young
    /// node (which did the script's writes all the same).
    ///
    /// `reached` marks the entries whose write the call carries, right
    /// before it goes out ([`Reached`]).
    async fn voting(
        self: &Arc<Self>,
        script: &Script,
        reached: &(dyn Fn() + Sync),
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, NodeError> {
        let how = How {
            reached,
            ..How::plain()
        };
        match self.vote(script, how, args).await? {
            (Some(left), _) => Err(self.quarantined(left)),
            (None, reply) => Ok(reply),
        }
    }

    /// Runs a vote script with the quarantine as its last argument and
    /// unwraps a young node's answer: `(Some(time left), reply)`.
    async fn vote(
        self: &Arc<Self>,
        script: &Script,
        how: How<'_>,
        args: impl Fn(&mut Cmd),
    ) -> Result<(Option<Duration>, Value), NodeError> {
        self.may_vote().await?;
        let reply = self
            .eval_with(script, how, |cmd| {
                args(cmd);
                self.voter_args(cmd);
            })
            .await?;
        let (young, reply) = self.unwrap_vote(reply)?;
        if young.is_none() {
            // A settled node's answer: its vote counts.
            self.health.set(NodeState::Counting);
        }
        Ok((young, reply))
    }

    /// Checked before a vote is asked for: the node is connected (the
    /// connection identifies the server), and no other node of this lock
    /// service reaches the same server (one server casts one vote).
    async fn may_vote(self: &Arc<Self>) -> Result<(), NodeError> {
        if let Err(e) = self.connection().await {
            bump(&self.counters.errors);
            telemetry::node_error(self.name());
            return Err(e);
        }
        if let Some(voter) = self.servers.same_as(self.index) {
            self.health.set(NodeState::SameServer {
                voter: Arc::clone(&voter),
            });
            return Err(NodeError::new(
                &self.name,
                NodeErrorKind::SameServer,
                format!("the same Redis server (run_id) as {voter}: one server casts one vote"),
            ));
        }
        Ok(())
    }

    /// The last arguments of every vote script: the settled marker and the
    /// quarantine (`scripts/epoch.lua`).
    fn voter_args(&self, cmd: &mut Cmd) {
        cmd.arg(&self.settled.lock().unwrap_or_else(PoisonError::into_inner)[..]);
        if self.durable {
            cmd.arg(-1);
        } else {
            cmd.arg(self.quarantine_ms);
        }
    }

    /// A vote script's reply, unwrapped: `(Some(time left), reply)` for a
    /// young node; a newly settled marker is kept.
    fn unwrap_vote(&self, reply: Value) -> Result<(Option<Duration>, Value), NodeError> {
        let Value::Array(items) = reply else {
            return Ok((None, reply));
        };
        let mut items = match self.settle(items)? {
            Value::Array(items) => items,
            reply => return Ok((None, reply)),
        };
        let young = matches!(items.first(), Some(Value::BulkString(tag)) if tag == b"young");
        if !young {
            return Ok((None, Value::Array(items)));
        }
        match (items.pop(), items.pop()) {
            (Some(inner), Some(Value::Int(left))) if items.len() == 1 && left > 0 => {
                Ok((Some(Duration::from_millis(left.unsigned_abs())), inner))
            }
            _ => Err(self.unexpected(Value::Array(items))),
        }
    }

    /// Unwraps a vote reply that reports a newly settled epoch marker
    /// (`{'settled', marker, reply}`), keeping the marker for the next
    /// votes; any other reply is returned as it is.
    fn settle(&self, mut items: Vec<Value>) -> Result<Value, NodeError> {
        if !matches!(items.first(), Some(Value::BulkString(tag)) if tag == b"settled") {
            return Ok(Value::Array(items));
        }
        if let [_, Value::BulkString(marker), inner] = &mut items[..]
            && (1..=MAX_MARKER_LEN).contains(&marker.len())
        {
            *self.settled.lock().unwrap_or_else(PoisonError::into_inner) = std::mem::take(marker);
            return Ok(std::mem::replace(inner, Value::Nil));
        }
        Err(self.unexpected(Value::Array(items)))
    }

    /// The quarantine error of this node, counted (in the stats and in a
    /// debug event carrying the running count).
    fn quarantined(&self, left: Duration) -> NodeError {
        let count = self.counters.quarantined.fetch_add(1, Ordering::Relaxed) + 1;
        self.health.set(NodeState::Quarantined { left });
        tracing::debug!(node = %self.name, left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX), quarantined_votes = count, "vote not counted: the node is quarantined");
        NodeError::quarantined(&self.name, left)
    }

    /// Counter readings from `value, current` pairs (see
    /// `scripts/epoch.lua`), each value validated.
    fn readings(&self, pairs: &[Value]) -> Result<Box<[Reading]>, NodeError> {
        pairs
            .chunks(2)
            .map(|pair| match pair {
                [value, Value::Int(current)] => Ok(Reading {
                    value: self.counter(value)?,
                    current: *current == 1,
                }),
                _ => Err(self.unexpected(Value::Array(pair.to_vec()))),
            })
            .collect()
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
    /// `args` appends everything after the script reference (`numkeys`,
    /// keys, arguments).
    async fn eval(
        self: &Arc<Self>,
        script: &Script,
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, NodeError> {
        self.eval_with(script, How::plain(), args).await
    }

    /// [`eval`](Self::eval), sent as `how` says.
    async fn eval_with(
        self: &Arc<Self>,
        script: &Script,
        how: How<'_>,
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, NodeError> {
        self.counted(self.eval_uncounted(script, how, args), how.cutoff)
            .await
    }

    /// [`eval_with`](Self::eval_with) without counting a failure in the
    /// node's errors: for a caller that counts its own (a call of a batch).
    async fn eval_uncounted(
        self: &Arc<Self>,
        script: &Script,
        how: How<'_>,
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, NodeError> {
        let build = |script_ref: &str, verb: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(script_ref);
            args(&mut cmd);
            cmd
        };
        let build = &build;
        self.reconnecting(how.resend, |conn, generation| async move {
            self.send_script(&conn, generation, script, how, build)
                .await
        })
        .await
    }

    /// `EVALSHA` on `conn`, then `EVAL` if the server lost the script.
    /// `build(script reference, verb)` makes the command.
    async fn send_script(
        self: &Arc<Self>,
        conn: &MultiplexedConnection,
        generation: u64,
        script: &Script,
        how: How<'_>,
        build: impl Fn(&str, &str) -> Cmd,
    ) -> Result<Value, RedisError> {
        let sent = build(script.sha(self.flagged), "EVALSHA");
        match self.send(conn, generation, sent, how).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                let sent = build(script.body(self.flagged), "EVAL");
                self.send(conn, generation, sent, how).await
            }
            result => result,
        }
    }

    /// Deletes the lock key `name` whatever its owner, keeps any renewal
    /// from re-taking it for `marker_ms`, and announces the release
    /// (`scripts/force_release.lua`). `true` if a key was there.
    pub(crate) async fn force_release(
        self: &Arc<Self>,
        name: &str,
        marker_ms: u64,
    ) -> Result<bool, NodeError> {
        let reply = self
            .eval(&scripts::FORCE_RELEASE, |cmd| {
                cmd.arg(1).arg(name).arg(marker_ms);
            })
            .await?;
        match reply {
            Value::Int(n @ 0..=1) => Ok(n == 1),
            other => Err(self.unexpected(other)),
        }
    }

    /// Adopts this node if it is empty: its epoch starts at once
    /// ([`NodeErrorKind::NotEmpty`] otherwise).
    pub(crate) async fn adopt(self: &Arc<Self>) -> Result<(), NodeError> {
        let (mut conn, _) = self.connection().await?;
        let history = ServerHistory::read(&mut conn)
            .await
            .map_err(|e| self.error(&e))?;
        let identity = history.identity();
        let reply = self
            .query(|| {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(scripts::ADOPT.body(self.flagged))
                    .arg(0)
                    .arg(&identity)
                    .arg(u8::from(self.durable));
                cmd
            })
            .await?;
        match reply {
            Value::Int(1) => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }

    async fn query(self: &Arc<Self>, build: impl Fn() -> Cmd) -> Result<Value, NodeError> {
        let build = &build;
        self.counted(
            self.reconnecting(Resend::AfterReconnect, |conn, generation| async move {
                self.send(&conn, generation, build(), How::plain()).await
            }),
            None,
        )
        .await
    }

    /// A call's result, counted in the node's errors unless it ended after
    /// its round's `cutoff` (nobody waited for it any more).
    async fn counted(
        &self,
        call: impl Future<Output = Result<Value, NodeError>>,
        cutoff: Option<&Cutoff>,
    ) -> Result<Value, NodeError> {
        let result = call.await;
        self.count_failure(&result, cutoff);
        result
    }

    /// Counts a failed call in the node's errors, unless it ended after its
    /// round's `cutoff`.
    fn count_failure<T>(&self, result: &Result<T, NodeError>, cutoff: Option<&Cutoff>) {
        if let Err(e) = result
            && !cutoff.is_some_and(Cutoff::passed)
        {
            bump(&self.counters.errors);
            telemetry::node_error(self.name());
            // A server that refuses our scripts casts no vote; other
            // failures are judged where they are learned (the connect, the
            // connection's silence), or concern one key only.
            if matches!(
                e.kind(),
                NodeErrorKind::Auth
                    | NodeErrorKind::ReadOnly
                    | NodeErrorKind::Busy
                    | NodeErrorKind::Other
            ) {
                self.health.set(NodeState::Refused {
                    detail: e.to_string(),
                });
            }
        }
    }

    /// Runs `call` on the current connection. A connection found dead (e.g.
    /// the server restarted since it was made) is replaced and the call sent
    /// once more. That cannot reorder anything: a closed socket runs no
    /// further commands on the server, and each script is idempotent for
    /// one entry (entry id).
    async fn reconnecting<F, Fut>(
        self: &Arc<Self>,
        resend: Resend,
        call: F,
    ) -> Result<Value, NodeError>
    where
        F: Fn(MultiplexedConnection, u64) -> Fut,
        Fut: Future<Output = Result<Value, RedisError>>,
    {
        let mut reconnected = false;
        loop {
            let (conn, generation) = self.connection().await?;
            match call(conn, generation).await {
                Err(e)
                    if e.is_connection_dropped()
                        && !reconnected
                        && resend == Resend::AfterReconnect =>
                {
                    reconnected = true
                }
                result => return result.map_err(|e| self.error(&e)),
            }
        }
    }

    /// Sends `cmd` on connection `generation` as `how` says, and awaits its
    /// reply (which is recorded also if this future is dropped first, see
    /// [`in_flight`]).
    async fn send(
        self: &Arc<Self>,
        conn: &MultiplexedConnection,
        generation: u64,
        cmd: Cmd,
        how: How<'_>,
    ) -> Result<Value, RedisError> {
        // A connection that answers nothing gets nothing more (see
        // `Liveness`): its queue would only grow. Not replaced either: a
        // server that is only slow or paused would run the old queue when it
        // wakes, and a release sent on a new connection could run before the
        // acquire it undoes, still queued on the old one. An undo goes out
        // all the same: it waits there, behind what it undoes.
        if !how.undo
            && let Some(silent_for) = self.stalled(conn, generation, 0)
        {
            return Err(silent_error(silent_for));
        }
        // Marked before the cutoff is read: a call that goes out is always
        // marked when its rollback looks (see `Reached`).
        (how.reached)();
        if how.cutoff.is_some_and(Cutoff::passed) {
            return Err(not_sent_error());
        }
        self.liveness().sent(generation);
        let mut conn = conn.clone();
        let call = async move { conn.send_packed_command(&cmd).await }.boxed();
        let result = InFlight::new(&self.drain, generation, call).await;
        match result {
            Ok(Value::ServerError(e)) => {
                // A demoted master (a failover), or one that lost its
                // replicas: it refuses every script of ours before running
                // it (all are write scripts), so nothing queued behind
                // this reply can write either, and a new connection (which
                // for a Sentinel node asks the sentinels again) cannot be
                // overtaken.
                if matches!(e.code(), "READONLY" | "NOREPLICAS") {
                    self.forget(generation);
                }
                Err(e.into())
            }
            Ok(v) => Ok(v),
            Err(e) => {
                if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
                    self.forget(generation);
                }
                Err(e)
            }
        }
    }

    fn liveness(&self) -> std::sync::MutexGuard<'_, Liveness> {
        self.drain.watch().liveness()
    }

    /// How long connection `generation` has gone without any reply, if
    /// longer than the connect timeout (or, for a suspect node, once
    /// [`MAX_UNANSWERED_WHEN_SUSPECT`] requests went unanswered, counting
    /// the `queued` ones waiting for the node's turn); starts a probe
    /// (`PING`) then, at most one at a time, whose answer lets calls
    /// through again.
    fn stalled(
        self: &Arc<Self>,
        conn: &MultiplexedConnection,
        generation: u64,
        queued: u32,
    ) -> Option<Duration> {
        let silent_for = {
            let mut liveness = self.liveness();
            let silent_for = liveness.silent_for(generation)?;
            let flooded = liveness.timed_out
                && liveness.unanswered.saturating_add(queued) >= MAX_UNANSWERED_WHEN_SUSPECT;
            if silent_for < self.connect_timeout && !flooded {
                return None;
            }
            if !std::mem::replace(&mut liveness.probing, true) {
                self.probe(conn.clone(), generation);
            }
            silent_for
        };
        self.health.set(NodeState::Silent { silent_for });
        Some(silent_for)
    }

    fn probe(self: &Arc<Self>, mut conn: MultiplexedConnection, generation: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let node = Arc::clone(self);
        runtime.spawn(async move {
            let ping = redis::cmd("PING");
            let sent = tokio::time::Instant::now();
            let reply =
                tokio::time::timeout(node.connect_timeout, ping.query_async::<Value>(&mut conn))
                    .await;
            node.liveness().probing = false;
            if let Ok(reply) = reply {
                node.drain.watch().record(generation, sent, &reply);
            }
        });
    }
    /// The current connection, connecting (once, shared) if there is none.
    async fn connection(self: &Arc<Self>) -> Result<(MultiplexedConnection, u64), NodeError> {
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
    fn connected(
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
    fn next_connect_backoff(&self) -> Duration {
        let last = Duration::from_micros(self.connect_backoff_us.load(Ordering::Relaxed));
        let wait = (last * 2).clamp(MIN_CONNECT_BACKOFF, MAX_CONNECT_BACKOFF);
        self.connect_backoff_us.store(
            u64::try_from(wait.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        wait
    }

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

impl Slot {
    /// Whether a call may start a connect now: none is up or under way,
    /// and a failed one's backoff has passed.
    fn may_connect(&self) -> bool {
        match self {
            Slot::Idle => true,
            Slot::Failed { retry_at, .. } => tokio::time::Instant::now() >= *retry_at,
            Slot::Connecting(_) | Slot::Ready { .. } => false,
        }
    }
}

/// The error of a call not sent because its round was decided before.
fn not_sent_error() -> RedisError {
    RedisError::from(std::io::Error::other(
        "not sent: its round was decided before",
    ))
}

/// The error of a call not sent to a connection silent for `silent_for`.
fn silent_error(silent_for: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no reply to anything for {} ms: nothing more is sent until it answers",
            silent_for.as_millis()
        ),
    ))
}

/// Whether a call that met a dead connection is sent again on a new one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resend {
    AfterReconnect,
    Never,
}

/// A `reached` that marks nothing: the call writes no entry.
const NOTHING: &(dyn Fn() + Sync) = &|| {};

/// How a command goes out ([`Node::send`]).
#[derive(Clone, Copy)]
struct How<'a> {
    resend: Resend,
    /// Not sent once its round's cutoff has passed.
    cutoff: Option<&'a Cutoff>,
    /// An undo (a release, a rollback): sent however long the connection
    /// has been silent, behind what it undoes ([`undo`]).
    undo: bool,
    /// Marks the entries whose write the command carries, right before it
    /// goes out ([`Reached`]).
    reached: &'a (dyn Fn() + Sync),
}

impl How<'static> {
    /// Resent after a reconnect, no cutoff, not an undo, no entry written.
    fn plain() -> How<'static> {
        How {
            resend: Resend::AfterReconnect,
            cutoff: None,
            undo: false,
            reached: NOTHING,
        }
    }
}

/// `numkeys` and the lock keys of a script that touches only those.
fn with_keys(cmd: &mut Cmd, keys: &KeySet) {
    cmd.arg(keys.len());
    names(cmd, keys);
}

fn names(cmd: &mut Cmd, keys: &KeySet) {
    for name in keys.names() {
        cmd.arg(&**name);
    }
}

/// `numkeys`, the lock keys, then their fencing counters.
fn with_fences(cmd: &mut Cmd, keys: &KeySet) {
    cmd.arg(2 * keys.len());
    names(cmd, keys);
    cmd.arg(keys.fences());
}

/// `numkeys`, the lock keys, their fencing counters, their waiter queues
/// and the queues' leases.
fn with_fences_and_queues(cmd: &mut Cmd, keys: &KeySet) {
    cmd.arg(4 * keys.len());
    fences_and_queues(cmd, keys);
}

/// The lock keys, their fencing counters, their waiter queues and the
/// queues' leases (the acquire and handoff scripts' keys).
fn fences_and_queues(cmd: &mut Cmd, keys: &KeySet) {
    names(cmd, keys);
    cmd.arg(keys.fences());
    cmd.arg(keys.queues());
}

/// The lock keys, their waiter queues and the queues' leases (the release
/// script's keys).
fn queues(cmd: &mut Cmd, keys: &KeySet) {
    names(cmd, keys);
    cmd.arg(keys.queues());
}

/// The queue id whose places a script gives up: the entry's ticket's when
/// `leave`, else none ('').
fn queue_id(entry: &Entry, leave: bool) -> &str {
    match &entry.ticket {
        Some(ticket) if leave => &ticket.id,
        _ => "",
    }
}

/// Sorts a Redis error into the classes a caller can act on.
pub(crate) fn classify(e: &RedisError) -> NodeErrorKind {
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

/// A holder's remaining TTL as the scripts report it (`PTTL`): `None` for
/// -1, a key without expiry. Callers match `-1..` first: any other negative
/// value is not a TTL and is refused as an unexpected reply.
fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_outside_the_exact_range_are_refused() {
        let node = Node::new(
            Target::Direct(Client::open("redis://127.0.0.1:1").expect("url")),
            (Duration::from_secs(1), Duration::from_millis(50)),
            Duration::from_secs(1),
            false,
            Arc::default(),
            (ServerIds::new(1), 0),
        );
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(node.counter(&Value::Nil).ok(), Some(None));
        assert_eq!(node.counter(&bulk("0")).ok(), Some(Some(0)));
        assert_eq!(
            node.counter(&bulk("9007199254740990")).ok(),
            Some(Some(MAX_COUNTER))
        );
        for bad in [
            "9007199254740991",
            "18446744073709551616",
            "-1",
            "1.5",
            "",
            "abc",
            "+1",
        ] {
            let e = node.counter(&bulk(bad)).expect_err(bad);
            assert_eq!(e.kind(), NodeErrorKind::InvalidCounter, "{bad}");
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert!(node.counter(&Value::Int(-1)).is_err());
    }
}
