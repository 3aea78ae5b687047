//! [`LockGuard`]: a held lock, its validity, and the ways to give it back.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Stamp;
use crate::config;
use crate::error::{Error, LostReason, NodeError, NodeOutcome};
use crate::fanout::quorum_round;
use crate::lock::{LockShared, ttl_millis};
use crate::quorum::{Decision, Vote};
use crate::stats::bump;

/// Whether a guard holds its key on one node, as of the last acquire or
/// extend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hold {
    /// The node confirmed our token.
    Held,
    /// The node answered without our token (another owner, an error).
    NotHeld,
    /// The quorum was decided before this node answered: our request may
    /// have landed. It is released with the others either way.
    Unknown,
}

/// What [`LockGuard::release`] did on the nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Nodes where our key was found and deleted.
    pub released: usize,
    /// Nodes that did not carry our token (expired, or never won).
    pub not_held: usize,
    /// Nodes that failed or did not answer within the node timeout. Their
    /// key, if any, expires by its TTL.
    pub failed: Vec<NodeError>,
    /// Whether the guard was still within its validity when the release
    /// began, i.e. the lock was exclusively ours up to this release.
    pub was_held: bool,
}

/// A held lock. Obtained from [`MultiLock::try_acquire`](crate::MultiLock::try_acquire)
/// or [`MultiLock::acquire`](crate::MultiLock::acquire).
///
/// The holder may assume exclusivity only while [`is_held`](Self::is_held)
/// is true, i.e. before the validity deadline (`start + ttl − drift`, on
/// `CLOCK_BOOTTIME`). Nothing refreshes that deadline behind your back; call
/// [`extend`](Self::extend) to push it out.
///
/// Dropping a guard without [`release`](Self::release) spawns a best-effort
/// release on the current Tokio runtime. Outside a runtime (or while one
/// shuts down) nothing is sent and the keys expire by their TTL: safe, but
/// the lock stays taken until then.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// use std::time::Duration;
/// use quorumlock::{LockConfig, MultiLock};
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).ttl(Duration::from_secs(2)).build()?);
/// let mut guard = lock.try_acquire("stock:sku-42").await?;
/// // A majority of the 3 nodes confirmed; the third may still be answering.
/// assert!(guard.held_nodes().count() >= 2);
/// let validity = guard.extend(Duration::from_secs(5)).await?;
/// assert!(validity > Duration::from_secs(4));
/// let report = guard.release().await;
/// assert!(report.was_held && report.released >= 2);
/// # Ok(())
/// # }
/// ```
#[must_use = "a guard dropped at once releases the lock at once; bind it for as long as the work runs"]
pub struct LockGuard {
    lock: Arc<LockShared>,
    key: Arc<str>,
    token: Arc<str>,
    deadline: Stamp,
    holds: Vec<Hold>,
    released: bool,
    /// Whether this guard was already counted as lost.
    counted_lost: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("validity", &self.validity())
            .field("holds", &self.holds)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(
        lock: Arc<LockShared>,
        key: Arc<str>,
        token: Arc<str>,
        deadline: Stamp,
        holds: Vec<Hold>,
    ) -> Self {
        LockGuard {
            lock,
            key,
            token,
            deadline,
            holds,
            released: false,
            counted_lost: false,
        }
    }

    /// The lock name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This holder's owner token (32 hex digits, 128 random bits), the value
    /// stored under the key on every node it holds.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the lock is still provably ours: the validity deadline has
    /// not passed. Derived from the same deadline as
    /// [`validity`](Self::validity), so the two never disagree.
    pub fn is_held(&self) -> bool {
        Stamp::now() < self.deadline
    }

    /// Time left until the validity deadline (zero once it has passed).
    pub fn validity(&self) -> Duration {
        self.deadline.remaining()
    }

    /// The validity deadline on the deadline clock.
    pub fn deadline(&self) -> Stamp {
        self.deadline
    }

    /// Each node's URL with whether this guard holds it, in configuration order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (&str, Hold)> {
        self.lock
            .nodes
            .iter()
            .zip(&self.holds)
            .map(|(n, h)| (&**n.name(), *h))
    }

    /// The nodes that confirmed our token.
    pub fn held_nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes()
            .filter(|(_, h)| *h == Hold::Held)
            .map(|(n, _)| n)
    }

    /// Sets the keys' TTL to `ttl` on every node that still carries our
    /// token, and returns the new validity.
    ///
    /// Needs the quorum again. The new deadline is computed from this call's
    /// own start time (`start + ttl − drift`). On failure the old deadline is
    /// kept, or shortened if the new TTL is shorter (some nodes may have
    /// taken it). When too few nodes still carry our token for any quorum,
    /// the guard is lost at once ([`Error::Lost`]).
    ///
    /// A guard past its deadline cannot be extended, even if its keys still
    /// exist: someone else may have held the lock in between. An extend that
    /// completes after the old deadline passed is reported as lost too, so a
    /// guard never turns from not held back to held.
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let config = &self.lock.config;
        config::check_ttl(ttl, config)?;
        if !self.is_held() {
            return Err(self.lost(LostReason::ValidityExpired));
        }
        let ttl_ms = ttl_millis(ttl);
        let mut round = quorum_round(
            self.lock.nodes.len(),
            config.required_nodes(),
            config.node_timeout,
            |i| self.lock.nodes[i].extend(Arc::clone(&self.key), Arc::clone(&self.token), ttl_ms),
            |ours: &bool| if *ours { Vote::Won } else { Vote::Contended },
        )
        .await;
        let (validity, new_deadline) = round.validity(ttl, config.drift_factor);
        let tally = round.tally;
        tracing::debug!(key = %self.key, won = tally.won(), elapsed = ?round.elapsed, ?validity, "extend");

        if !self.is_held() {
            return Err(self.lost(LostReason::ValidityExpired));
        }
        if round.won_with(ttl, config.drift_factor, config.min_validity) {
            self.deadline = new_deadline;
            self.holds = holds(&round.votes);
            bump(&self.lock.counters.extended);
            return Ok(self.validity());
        }
        bump(&self.lock.counters.extend_failed);
        // Nodes that took the new TTL may expire before the old deadline.
        self.deadline = self.deadline.min(new_deadline);
        let nodes = self.lock.reports(&mut round.replies, round.end);
        if tally.contention_rules_out_quorum() {
            return Err(self.lost(LostReason::KeysGone(nodes)));
        }
        if tally.decision() == Decision::Won {
            return Err(Error::ValidityUsedUp {
                key: self.key.to_string(),
                elapsed: round.elapsed,
                validity,
                min_validity: config.min_validity,
            });
        }
        Err(Error::QuorumNotReached {
            key: self.key.to_string(),
            required: tally.required(),
            won: tally.won(),
            nodes,
        })
    }

    /// Deletes our key on every node (owner-checked: a key that carries
    /// another owner's token is never touched) and reports what happened.
    /// Waits for each node up to the node timeout.
    pub async fn release(mut self) -> ReleaseReport {
        self.released = true;
        let was_held = self.is_held();
        let mut report = self.lock.release_everywhere(&self.key, &self.token).await;
        report.was_held = was_held;
        tracing::debug!(key = %self.key, released = report.released, failed = report.failed.len(), was_held, "released");
        report
    }

    /// Marks the guard lost (the deadline moves to now) and builds the error.
    fn lost(&mut self, reason: LostReason) -> Error {
        if !std::mem::replace(&mut self.counted_lost, true) {
            bump(&self.lock.counters.lost);
        }
        self.deadline = self.deadline.min(Stamp::now());
        Error::Lost {
            key: self.key.to_string(),
            reason,
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "guard dropped outside a Tokio runtime; keys expire by their TTL");
            return;
        };
        let (lock, key, token) = (
            Arc::clone(&self.lock),
            Arc::clone(&self.key),
            Arc::clone(&self.token),
        );
        runtime.spawn(async move {
            let report = lock.release_everywhere(&key, &token).await;
            tracing::debug!(key = %key, released = report.released, "released on drop");
        });
    }
}

/// Each node's hold after a quorum round, from its vote (`None`: the round
/// was decided before the node answered).
pub(crate) fn holds(votes: &[Option<Vote>]) -> Vec<Hold> {
    votes
        .iter()
        .map(|v| match v {
            Some(Vote::Won) => Hold::Held,
            Some(_) => Hold::NotHeld,
            None => Hold::Unknown,
        })
        .collect()
}

impl From<bool> for NodeOutcome {
    /// An owner-checked script's reply: `true` when our token was there.
    fn from(ours: bool) -> NodeOutcome {
        if ours {
            NodeOutcome::Won
        } else {
            NodeOutcome::NotHeld
        }
    }
}
