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

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{Client, Value};

use crate::background::Background;
use crate::batch::Batcher;
use crate::config::{Target, display_name};
use crate::error::{NodeError, NodeErrorKind};
use crate::health::Health;
use crate::scripts::reply::{BadReply, MAX_COUNTER};
use crate::server_ids::ServerIds;
use crate::stats::NodeCounters;

mod calls;
mod connection;
mod group_commit;
mod in_flight;
mod send;
mod undo;
mod vote;

use connection::Slot;
use group_commit::Pending;
use in_flight::{Drain, Watch};
pub(crate) use send::Cutoff;
pub(crate) use undo::Undo;

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

    /// The error of a reply its script cannot have given, naming the node.
    pub(crate) fn bad(&self, reply: BadReply) -> NodeError {
        match reply {
            BadReply::Unexpected(reply) => self.unexpected(reply),
            BadReply::Counter(shown) => NodeError::new(
                &self.name,
                NodeErrorKind::InvalidCounter,
                format!("fencing counter {shown} is not a whole number in 0..={MAX_COUNTER}"),
            ),
        }
    }

    pub(super) fn unexpected(&self, reply: Value) -> NodeError {
        NodeError::new(
            &self.name,
            NodeErrorKind::UnexpectedReply,
            format!("{reply:?}"),
        )
    }
}
