//! Counters a service can export: how often locks were tried, won, refused
//! and lost, and how often each node failed or timed out.
//!
//! Plain relaxed atomics: one uncontended add per event, read as a snapshot
//! by [`MultiLock::stats`](crate::MultiLock::stats).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a [`MultiLock`](crate::MultiLock)'s counters since it was
/// created (shared by its clones). Every field but `watched` (a gauge)
/// only grows.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// use quorumlock::{LockConfig, MultiLock};
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// lock.try_acquire("report").await?.release().await;
/// let stats = lock.stats();
/// assert_eq!((stats.attempts, stats.acquired, stats.released), (1, 1, 1));
/// assert!(stats.nodes.iter().all(|n| n.errors == 0));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStats {
    /// Acquire attempts (each try of `acquire` counts).
    pub attempts: u64,
    /// Attempts that won a quorum with enough validity.
    pub acquired: u64,
    /// Attempts lost to another owner.
    pub contended: u64,
    /// Attempts that failed for lack of answering nodes.
    pub quorum_not_reached: u64,
    /// Attempts that won a quorum too late and were rolled back.
    pub validity_used_up: u64,
    /// Successful extends.
    pub extended: u64,
    /// Extends that did not reach the quorum (the lock may still be held).
    pub extend_failed: u64,
    /// Watchdog renewal rounds, one per guard per round.
    pub renewals: u64,
    /// Renewal rounds that reached the quorum before the guard's loss margin.
    pub renewed: u64,
    /// Renewal rounds that did not (the guard retries until its margin).
    pub renew_failed: u64,
    /// Keys the watchdog re-took on nodes that had lost them.
    pub healed: u64,
    /// Guards the watchdog is renewing right now.
    pub watched: u64,
    /// Guards found lost (validity expired, renewals failed, keys gone).
    pub lost: u64,
    /// Guards released (explicitly or on drop).
    pub released: u64,
    /// Fencing tokens handed out.
    pub fencing_tokens: u64,
    /// Release notices received by the wake-up subscribers (one per node
    /// that freed a name some waiter waited for).
    pub wake_notices: u64,
    /// Waits between attempts that ended early on a release notice (from a
    /// node or from a release by this lock service).
    pub woken: u64,
    /// Releases that took the lock for a waiting acquire of this lock
    /// service in the same script call (see [`crate::wake`]).
    pub handoffs: u64,
    /// Acquire attempts decided on a handoff (won or not).
    pub handed_over: u64,
    /// Acquire attempts decided on grants: releases of other processes
    /// took the name for the waiting call on a quorum of nodes, with no
    /// acquire round of its own (see [`crate::wake`]).
    pub granted: u64,
    /// Acquire calls that let a waiter of another process take the name
    /// first: they began just after this lock service released the name
    /// to that waiter (see [`crate::wake`]).
    pub stepped_aside: u64,
    /// Per-node failures, in configuration order.
    pub nodes: Vec<NodeStats>,
}

/// Failures of one node.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{LockConfig, MultiLock};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// lock.try_acquire("job").await?.release().await;
/// for node in lock.stats().nodes {
///     assert_eq!((node.errors, node.timeouts), (0, 0), "{}", node.node);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// The node's URL (no credentials).
    pub node: String,
    /// Calls that failed with an error (unreachable, WRONGTYPE, ...).
    pub errors: u64,
    /// Calls with no answer within the node timeout.
    pub timeouts: u64,
    /// Renew script calls sent to this node by the watchdog: one per group
    /// of up to 256 locks, however many guards are watched.
    pub renew_calls: u64,
    /// Answers that did not count because the node was quarantined (its
    /// data may be incomplete: restarted, promoted, or new to this client).
    /// A renew call answers for every guard of its group at once.
    pub quarantined: u64,
    /// Script calls that carried a batch: the acquires and releases that
    /// queued while another one to this node was under way, sent together
    /// in one call when it ended (group commit). A lone call goes out at
    /// once, on its own.
    pub batches: u64,
    /// The acquires and releases those batches carried.
    pub batched: u64,
}

/// The lock-level counters behind [`LockStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) contended: AtomicU64,
    pub(crate) quorum_not_reached: AtomicU64,
    pub(crate) validity_used_up: AtomicU64,
    pub(crate) extended: AtomicU64,
    pub(crate) extend_failed: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) renewed: AtomicU64,
    pub(crate) renew_failed: AtomicU64,
    pub(crate) healed: AtomicU64,
    pub(crate) watched: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) fencing_tokens: AtomicU64,
    /// Shared with the wake-up subscriber tasks, which must not keep the
    /// lock service alive.
    pub(crate) wake_notices: Arc<AtomicU64>,
    pub(crate) woken: AtomicU64,
    pub(crate) handoffs: AtomicU64,
    pub(crate) handed_over: AtomicU64,
    pub(crate) granted: AtomicU64,
    pub(crate) stepped_aside: AtomicU64,
}

/// The node-level counters behind [`NodeStats`].
#[derive(Debug, Default)]
pub(crate) struct NodeCounters {
    pub(crate) errors: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) renew_calls: AtomicU64,
    pub(crate) quarantined: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) batched: AtomicU64,
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// The wake-up notice counter, for a subscriber task.
    pub(crate) fn notices_handle(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.wake_notices)
    }

    pub(crate) fn snapshot(&self, nodes: Vec<NodeStats>) -> LockStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LockStats {
            attempts: get(&self.attempts),
            acquired: get(&self.acquired),
            contended: get(&self.contended),
            quorum_not_reached: get(&self.quorum_not_reached),
            validity_used_up: get(&self.validity_used_up),
            extended: get(&self.extended),
            extend_failed: get(&self.extend_failed),
            renewals: get(&self.renewals),
            renewed: get(&self.renewed),
            renew_failed: get(&self.renew_failed),
            healed: get(&self.healed),
            watched: get(&self.watched),
            lost: get(&self.lost),
            released: get(&self.released),
            fencing_tokens: get(&self.fencing_tokens),
            wake_notices: get(&self.wake_notices),
            woken: get(&self.woken),
            handoffs: get(&self.handoffs),
            handed_over: get(&self.handed_over),
            granted: get(&self.granted),
            stepped_aside: get(&self.stepped_aside),
            nodes,
        }
    }
}

impl NodeCounters {
    pub(crate) fn snapshot(&self, node: &str) -> NodeStats {
        NodeStats {
            node: node.to_string(),
            errors: self.errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            renew_calls: self.renew_calls.load(Ordering::Relaxed),
            quarantined: self.quarantined.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            batched: self.batched.load(Ordering::Relaxed),
        }
    }
}
