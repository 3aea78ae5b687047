//! [`LockGuard`]: a held lock, its validity, and the ways to give it back.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::config;
use crate::error::{Error, LostReason, NodeError, NodeOutcome};
use crate::fanout::quorum_round;
use crate::lease::{HeldLock, Lease, Round, node_holds};
use crate::lock::ttl_millis;
use crate::quorum::{Decision, Vote};
use crate::stats::bump;
use crate::watchdog;

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
    /// Nodes where this hold was found and given back.
    pub released: usize,
    /// Of those, nodes where the key stays because the same owner holds it
    /// through other holds (re-entry); on the others it was deleted.
    pub kept: usize,
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
/// The holder may assume exclusivity only while [`is_held`](HeldLock::is_held)
/// is true, i.e. before the validity deadline (`start + ttl − drift`, on
/// `CLOCK_BOOTTIME`). Without the watchdog nothing refreshes that deadline
/// behind your back; call [`extend`](Self::extend) to push it out. With the
/// watchdog ([`LockConfigBuilder::watchdog`](crate::LockConfigBuilder::watchdog)
/// or [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive)) it is
/// renewed in the background, and [`lost`](HeldLock::lost) /
/// [`cancellation_token`](HeldLock::cancellation_token) tell you when it can no
/// longer be proven held.
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
    held: HeldLock,
    released: bool,
}

/// Everything a [`HeldLock`] tells (key, token, `is_held`, validity,
/// deadline, `lost()`, the cancellation token, the last renewal) the guard
/// tells too: it is the held lock plus the right to extend and release it.
impl Deref for LockGuard {
    type Target = HeldLock;

    fn deref(&self) -> &HeldLock {
        &self.held
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lease = &self.held.lease;
        f.debug_struct("LockGuard")
            .field("keys", &lease.hold.keys)
            .field("validity", &self.validity())
            .field("watched", &lease.watched)
            .field("holds", &lease.holds())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// Wraps a lease just won; a watched one is handed to the watchdog.
    pub(crate) fn new(lease: Lease) -> Self {
        let lease = Arc::new(lease);
        if lease.watched {
            watchdog::watch(&lease);
        }
        LockGuard {
            held: HeldLock { lease },
            released: false,
        }
    }

    /// Each node's URL with whether this guard holds it, in configuration
    /// order, as of the last acquire, extend or renewal.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (&str, Hold)> {
        node_holds(&self.held.lease)
    }

    /// The nodes that confirmed our token.
    pub fn held_nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes()
            .filter(|(_, h)| *h == Hold::Held)
            .map(|(n, _)| n)
    }

    /// A cloneable read-only view of this lock for the work it protects.
    pub fn handle(&self) -> HeldLock {
        self.held.clone()
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
    ///
    /// With the watchdog on, an extend waits for a renewal in flight, and
    /// later renewals use the new TTL (the interval and margin scale with it).
    ///
    /// Cancel safety: dropping the future leaves the guard as it was, except
    /// that nodes may have taken the new TTL; the deadline is not moved.
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let lease = Arc::clone(&self.held.lease);
        let config = &lease.lock.config;
        config::check_ttl(ttl, config)?;
        let round = Round::new();
        if !lease.claim(&round).await {
            return Err(lease_error(&lease));
        }
        // Gives the slot back however this future ends.
        let _slot = Unclaim(&lease, &round);
        if !lease.is_held() {
            lease.end(lease.state(), LostReason::ValidityExpired);
            return Err(lease_error(&lease));
        }
        let ttl_ms = ttl_millis(ttl);
        let mut quorum = quorum_round(
            lease.lock.nodes.len(),
            config.required_nodes(),
            config.node_timeout,
            |i| lease.lock.nodes[i].extend(lease.hold.clone(), ttl_ms),
            |ours: &bool| if *ours { Vote::Won } else { Vote::Contended },
        )
        .await;
        let (validity, new_deadline) = quorum.validity(ttl, config.drift_factor);
        let tally = quorum.tally;
        tracing::debug!(key = %lease.name, won = tally.won(), elapsed = ?quorum.elapsed, ?validity, "extend");

        let mut state = lease.state();
        if !state.is_held() {
            // Ended meanwhile (then this is a no-op), or the deadline passed
            // during the round: never turned back to held.
            lease.end(state, LostReason::ValidityExpired);
            return Err(lease_error(&lease));
        }
        if quorum.won_with(ttl, config.drift_factor, config.min_validity) {
            state.deadline = new_deadline;
            state.ttl = ttl;
            state.holds = holds(&quorum.votes);
            if lease.watched {
                state.next_renewal = lease.next_renewal_after(quorum.start, ttl);
                state.max_hold_reached |= state.next_renewal.is_none();
            }
            drop(state);
            bump(&lease.lock.counters.extended);
            return Ok(self.validity());
        }
        bump(&lease.lock.counters.extend_failed);
        // Nodes that took the new TTL may expire before the old deadline.
        state.deadline = state.deadline.min(new_deadline);
        let nodes = lease.lock.reports(&mut quorum.replies, quorum.end);
        if tally.contention_rules_out_quorum() {
            lease.end(state, LostReason::KeysGone(nodes));
            return Err(lease_error(&lease));
        }
        drop(state);
        if tally.decision() == Decision::Won {
            return Err(Error::ValidityUsedUp {
                key: lease.name.to_string(),
                elapsed: quorum.elapsed,
                validity,
                min_validity: config.min_validity,
            });
        }
        Err(Error::QuorumNotReached {
            key: lease.name.to_string(),
            required: tally.required(),
            won: tally.won(),
            nodes,
        })
    }

    /// Stops the watchdog, deletes our key on every node (owner-checked: a
    /// key that carries another owner's token is never touched) and reports
    /// what happened. Waits for each node up to the node timeout.
    ///
    /// A renewal still in flight is let finish first (at most one node
    /// timeout), so the release is queued behind it on every node and a
    /// released lock is never re-created by a late renewal.
    pub async fn release(mut self) -> ReleaseReport {
        self.released = true;
        let lease = Arc::clone(&self.held.lease);
        let was_held = lease.begin_release().await;
        let mut report = lease.lock.release_everywhere(&lease.hold).await;
        report.was_held = was_held;
        tracing::debug!(key = %lease.name, released = report.released, failed = report.failed.len(), was_held, "released");
        report
    }
}

/// The error for a lease that has ended.
pub(crate) fn lease_error(lease: &Lease) -> Error {
    let reason = lease
        .state()
        .ended
        .as_ref()
        .map_or(LostReason::ValidityExpired, |n| n.reason.clone());
    Error::Lost {
        key: lease.name.to_string(),
        reason,
    }
}

/// Gives a lease's in-flight slot back when dropped, and hands a watched
/// lease back to the watchdog (whose renewal skipped it meanwhile).
struct Unclaim<'a>(&'a Arc<Lease>, &'a Round);

impl Drop for Unclaim<'_> {
    fn drop(&mut self) {
        self.1.done.cancel();
        self.0.unclaim(self.1);
        if self.0.watched {
            watchdog::watch(self.0);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Stop the watchdog at least; the keys expire by their TTL.
            self.held
                .lease
                .end(self.held.lease.state(), LostReason::Released);
            tracing::debug!(key = %self.held.lease.name, "guard dropped outside a Tokio runtime; keys expire by their TTL");
            return;
        };
        let lease = Arc::clone(&self.held.lease);
        runtime.spawn(async move {
            lease.begin_release().await;
            let report = lease.lock.release_everywhere(&lease.hold).await;
            tracing::debug!(key = %lease.name, released = report.released, "released on drop");
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
