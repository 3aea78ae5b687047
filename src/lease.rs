//! What a held lock shares between its [`LockGuard`](crate::LockGuard), its
//! [`HeldLock`] handles and the watchdog: the validity deadline, the
//! per-node holds, and the loss signal.
//!
//! Every answer to "is it still ours?" comes from one deadline under one
//! mutex (DESIGN.md, safety rule 3): `is_held()`, `validity()`, `lost()` and
//! the cancellation token cannot disagree. The deadline only moves forward
//! on a renewal or extend that reached its quorum before the loss margin,
//! and once the lease has ended (lost or released) nothing moves it again.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::clock::Stamp;
use crate::error::{LostReason, NodeReports};
use crate::guard::Hold;
use crate::keys::HoldId;
use crate::lock::LockShared;
use crate::owner::Owner;
use crate::stats::bump;

/// Why and when a held lock stopped being provably ours. Returned by
/// [`HeldLock::lost`] (also on a [`LockGuard`](crate::LockGuard)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LossNotice {
    /// Why.
    pub reason: LostReason,
    /// When the loss was declared (on the deadline clock).
    pub at: Stamp,
    /// The validity deadline that stood at that moment. For a loss (not a
    /// release) `at` is before it: lost is signalled before the deadline,
    /// never after.
    pub deadline: Stamp,
}

/// The last successful watchdog renewal of a guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewal {
    /// When the renewal round started (its validity counts from here).
    pub started: Stamp,
    /// From the start until the quorum was won: how long the holder waited
    /// for this renewal's verdict.
    pub took: Duration,
    /// Nodes that confirmed our token in this round: those that decided it,
    /// plus those that answered later within the node timeout.
    pub held: usize,
    /// Of those, nodes where the key was absent and was re-taken.
    pub healed: usize,
}

/// A round (a renewal group or an extend) that is sending to the nodes for a
/// lease: its id and the token cancelled when none of its requests can be
/// sent any more. A release waits for it, so that it is queued behind the
/// round on every node and no renewal can re-create a released key.
#[derive(Clone)]
pub(crate) struct Round {
    pub(crate) id: u64,
    pub(crate) done: CancellationToken,
}

impl Round {
    pub(crate) fn new() -> Round {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Round {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            done: CancellationToken::new(),
        }
    }
}

/// The mutable part of a lease.
pub(crate) struct State {
    /// The validity deadline.
    pub(crate) deadline: Stamp,
    /// The TTL the keys were last given.
    pub(crate) ttl: Duration,
    pub(crate) holds: Vec<Hold>,
    /// Set once, when the lease is lost or released.
    pub(crate) ended: Option<LossNotice>,
    pub(crate) in_flight: Option<Round>,
    /// When the watchdog renews next (`None`: it no longer renews).
    pub(crate) next_renewal: Option<Stamp>,
    /// Renewals stopped because the maximum hold time was reached.
    pub(crate) max_hold_reached: bool,
    /// Consecutive renewal rounds that failed.
    pub(crate) failures: u32,
    pub(crate) last_failure: Option<NodeReports>,
    pub(crate) last_renewal: Option<Renewal>,
    /// A task already watches the deadline for the cancellation token.
    deadline_watched: bool,
    /// The loss time the watchdog has an entry for.
    pub(crate) loss_scheduled: Option<Stamp>,
}

impl State {
    /// Not ended, and before the deadline.
    pub(crate) fn is_held(&self) -> bool {
        self.ended.is_none() && Stamp::now() < self.deadline
    }
}

/// What an acquire read from each node's fencing counters: for every node
/// it won, each key's counter (`None`: no counter there); `None` for the
/// other nodes. The first read of [`crate::fence`].
pub(crate) type FenceReads = Box<[Option<Box<[Option<u64>]>>]>;

/// A held lock's shared state.
pub(crate) struct Lease {
    pub(crate) lock: Arc<LockShared>,
    pub(crate) hold: HoldId,
    /// The lock's name for logs and errors (`a` or `a+b`).
    pub(crate) name: Arc<str>,
    pub(crate) acquired: Stamp,
    /// The fencing token once established; shared with holds re-entered
    /// through this one (one holder, one token).
    pub(crate) fence: Arc<OnceCell<u64>>,
    pub(crate) fence_reads: FenceReads,
    pub(crate) watched: bool,
    /// Cancelled when the lease ends (lost or released).
    cancel: CancellationToken,
    state: Mutex<State>,
}

impl Lease {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        lock: Arc<LockShared>,
        hold: HoldId,
        start: Stamp,
        deadline: Stamp,
        holds: Vec<Hold>,
        watched: bool,
        fence: Arc<OnceCell<u64>>,
        fence_reads: FenceReads,
    ) -> Lease {
        let ttl = lock.config.ttl;
        let mut lease = Lease {
            lock,
            // One name: share it rather than allocate its display.
            name: if hold.keys.len() == 1 {
                Arc::clone(hold.keys.first())
            } else {
                Arc::from(hold.keys.to_string())
            },
            hold,
            acquired: start,
            fence,
            fence_reads,
            watched,
            cancel: CancellationToken::new(),
            state: Mutex::new(State {
                deadline,
                ttl,
                holds,
                ended: None,
                in_flight: None,
                next_renewal: None,
                max_hold_reached: false,
                failures: 0,
                last_failure: None,
                last_renewal: None,
                deadline_watched: false,
                loss_scheduled: None,
            }),
        };
        if watched {
            // Counted down in `end`.
            bump(&lease.lock.counters.watched);
            let next = lease.next_renewal_after(start, ttl);
            let state = lease
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            state.next_renewal = next;
            state.max_hold_reached = next.is_none();
        }
        lease
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `d` (a setting made for the configured TTL) scaled to `ttl`, for a
    /// guard extended to another TTL.
    pub(crate) fn scaled(&self, d: Duration, ttl: Duration) -> Duration {
        let configured = self.lock.config.ttl;
        if ttl == configured {
            d
        } else {
            d.mul_f64(ttl.as_secs_f64() / configured.as_secs_f64())
        }
    }

    /// When a lease with this deadline and TTL is declared lost unless
    /// renewed: the deadline minus the loss margin.
    pub(crate) fn loss_time(&self, deadline: Stamp, ttl: Duration) -> Stamp {
        deadline.before(self.scaled(self.lock.config.loss_margin, ttl))
    }

    /// When to renew a round that started at `start` with `ttl`; `None` once
    /// that would be past the maximum hold time.
    pub(crate) fn next_renewal_after(&self, start: Stamp, ttl: Duration) -> Option<Stamp> {
        let next = start.after(self.scaled(self.lock.config.renew_interval, ttl));
        match self.lock.config.max_hold {
            Some(max) if next > self.acquired.after(max) => None,
            _ => Some(next),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.state().is_held()
    }

    pub(crate) fn deadline(&self) -> Stamp {
        self.state().deadline
    }

    pub(crate) fn holds(&self) -> Vec<Hold> {
        self.state().holds.clone()
    }

    pub(crate) fn last_renewal(&self) -> Option<Renewal> {
        self.state().last_renewal
    }

    /// Ends the lease if its loss time has come: the watchdog's and the
    /// `lost()` future's timers land here.
    pub(crate) fn expire_if_due(&self) {
        let state = self.state();
        if state.ended.is_some() || Stamp::now() < self.loss_time(state.deadline, state.ttl) {
            return;
        }
        let reason = if !self.watched {
            LostReason::ValidityExpired
        } else if state.max_hold_reached {
            LostReason::MaxHoldReached(self.lock.config.max_hold.unwrap_or_default())
        } else {
            LostReason::RenewalsFailed(state.last_failure.clone().unwrap_or_default())
        };
        self.end(state, reason);
    }

    /// Ends the lease (once): the deadline moves to now at the latest, the
    /// token is cancelled, the loss is counted and logged. Takes the locked
    /// state so that the check before and the end are one step.
    pub(crate) fn end(&self, mut state: MutexGuard<'_, State>, reason: LostReason) {
        if state.ended.is_some() {
            return;
        }
        let now = Stamp::now();
        let notice = LossNotice {
            reason,
            at: now,
            deadline: state.deadline,
        };
        // Counted and logged before the end is visible, so whoever sees the
        // lease ended (is_held, lost(), the token) also sees the counter
        // and the log line.
        let counters = &self.lock.counters;
        if self.watched {
            counters.watched.fetch_sub(1, Ordering::Relaxed);
        }
        if notice.reason != LostReason::Released {
            bump(&counters.lost);
            tracing::warn!(
                key = %self.name,
                reason = %notice.reason,
                validity_left_ms = notice.deadline.saturating_since(now).as_millis() as u64,
                "lock lost: the holder can no longer prove it holds the lock"
            );
        }
        state.deadline = state.deadline.min(now);
        state.next_renewal = None;
        state.ended = Some(notice);
        drop(state);
        self.cancel.cancel();
    }

    /// Resolves when the lease ends. Also watches the loss time itself, so
    /// it fires in time even for a guard without the watchdog.
    pub(crate) fn lost(self: &Arc<Self>) -> impl Future<Output = LossNotice> + Send + 'static {
        let lease = Arc::clone(self);
        async move {
            loop {
                let due = {
                    let state = lease.state();
                    if let Some(notice) = &state.ended {
                        return notice.clone();
                    }
                    lease.loss_time(state.deadline, state.ttl)
                };
                tokio::select! {
                    () = lease.cancel.cancelled() => {}
                    () = tokio::time::sleep_until(due.to_instant()) => lease.expire_if_due(),
                }
            }
        }
    }

    /// The token cancelled when the lease ends. For a guard without the
    /// watchdog, the first call starts a task that watches the deadline.
    pub(crate) fn cancellation_token(self: &Arc<Self>) -> CancellationToken {
        let start_watcher =
            !self.watched && !std::mem::replace(&mut self.state().deadline_watched, true);
        if start_watcher && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.lost());
        }
        self.cancel.clone()
    }

    /// Claims the in-flight slot for `round`, waiting while another round
    /// holds it. `false` when the lease ended meanwhile.
    pub(crate) async fn claim(&self, round: &Round) -> bool {
        loop {
            let other = {
                let mut state = self.state();
                if state.ended.is_some() {
                    return false;
                }
                match &state.in_flight {
                    None => {
                        state.in_flight = Some(round.clone());
                        return true;
                    }
                    Some(other) => other.done.clone(),
                }
            };
            other.cancelled().await;
        }
    }

    /// Gives the in-flight slot back if `round` holds it.
    pub(crate) fn unclaim(&self, round: &Round) {
        let mut state = self.state();
        if state.in_flight.as_ref().is_some_and(|r| r.id == round.id) {
            state.in_flight = None;
        }
    }

    /// Ends the lease as released and waits (bounded) until no round of it
    /// can send anything any more, so that a release sent next is queued
    /// behind it on every node. Returns whether it was still held.
    pub(crate) async fn begin_release(&self) -> bool {
        let (was_held, in_flight) = {
            let state = self.state();
            let was_held = state.is_held();
            let in_flight = state.in_flight.as_ref().map(|r| r.done.clone());
            self.end(state, LostReason::Released);
            (was_held, in_flight)
        };
        if let Some(done) = in_flight {
            // A round ends within its node timeout; the bound is a backstop.
            let bound = self.lock.config.node_timeout * 2 + self.lock.config.connect_timeout;
            if tokio::time::timeout(bound, done.cancelled()).await.is_err() {
                tracing::debug!(key = %self.name, "a renewal round did not end in time before release");
            }
        }
        was_held
    }
}

/// A read-only, cloneable view of a held lock: hand it to the work the lock
/// protects so it can check [`is_held`](Self::is_held), stop on
/// [`lost`](Self::lost), or pass the [cancellation
/// token](Self::cancellation_token) further down. It cannot release the
/// lock; the [`LockGuard`](crate::LockGuard) (or
/// [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive)) does.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// use std::time::Duration;
/// use quorumlock::{LockConfig, MultiLock};
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).build()?);
/// let guard = lock.try_acquire("invoice:7").await?;
/// let held = guard.handle();
/// let worker = tokio::spawn(async move {
///     // ... work, checking held.is_held() before each irreversible step ...
///     held.is_held()
/// });
/// assert!(worker.await?);
/// guard.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct HeldLock {
    pub(crate) lease: Arc<Lease>,
}

impl fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLock")
            .field("keys", &self.lease.hold.keys)
            .field("is_held", &self.is_held())
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl HeldLock {
    /// The lock name; for a lock on several names, the first of them in
    /// sorted order (see [`keys`](Self::keys)).
    pub fn key(&self) -> &str {
        self.lease.hold.keys.first()
    }

    /// Every lock name this hold covers, sorted (one for a plain lock).
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.lease.hold.keys.names().iter().map(|n| &**n)
    }

    /// This holder's owner token (32 hex digits, 128 random bits), stored
    /// under the key on every node it holds. Holds of one
    /// [`owner`](Self::owner) share it.
    pub fn token(&self) -> &str {
        &self.lease.hold.token
    }

    /// Who holds this lock: pass it to code (or, as its token, to another
    /// process) that should re-enter the lock as the same holder with
    /// [`MultiLock::acquire_as`](crate::MultiLock::acquire_as).
    pub fn owner(&self) -> Owner {
        Owner::from_shared(Arc::clone(&self.lease.hold.token))
    }

    /// Whether the lock is still provably ours: it was not found lost or
    /// released and the validity deadline has not passed. Derived from the
    /// same deadline as [`validity`](Self::validity) and
    /// [`lost`](Self::lost), so they never disagree.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Time left until the validity deadline (zero once it has passed).
    pub fn validity(&self) -> Duration {
        self.lease.deadline().remaining()
    }

    /// The validity deadline on the deadline clock.
    pub fn deadline(&self) -> Stamp {
        self.lease.deadline()
    }

    /// Whether the watchdog renews this lock (see [`crate::watchdog`]).
    pub fn is_watched(&self) -> bool {
        self.lease.watched
    }

    /// Each node's URL with whether the lock holds it now, in configuration
    /// order (owned, unlike [`LockGuard::nodes`](crate::LockGuard::nodes)).
    pub fn nodes(&self) -> Vec<(String, Hold)> {
        node_holds(&self.lease)
            .map(|(n, h)| (n.to_string(), h))
            .collect()
    }

    /// The last successful watchdog renewal, if any.
    pub fn last_renewal(&self) -> Option<Renewal> {
        self.lease.last_renewal()
    }

    /// Resolves when the lock can no longer be proven held, or is released.
    ///
    /// With the watchdog, that is when renewals could not reach the quorum
    /// before the deadline minus the loss margin, when other owners hold
    /// too many nodes, or when the maximum hold time ran out; without it,
    /// at the deadline minus the loss margin unless
    /// [`LockGuard::extend`](crate::LockGuard::extend) moved it. Either way
    /// the notice comes before the validity deadline, never after, and
    /// [`is_held`](Self::is_held) is false from then on.
    ///
    /// Cancel safety: the future only observes; drop it at any time. It
    /// does not borrow the lock, so it can be selected against the work.
    pub fn lost(&self) -> impl Future<Output = LossNotice> + Send + 'static {
        self.lease.lost()
    }

    /// A token that is cancelled when the lock is lost or released: hand it
    /// to work that should stop then (e.g. `token.run_until_cancelled(work)`).
    ///
    /// With the watchdog, the watchdog cancels it. Without, the first call
    /// starts a small task that watches the deadline (needs a Tokio
    /// runtime; outside one, only [`lost`](Self::lost) and
    /// [`LockGuard::extend`](crate::LockGuard::extend) notice the loss).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.lease.cancellation_token()
    }
}

/// Each node's name with the lease's hold on it, in configuration order.
pub(crate) fn node_holds(lease: &Lease) -> impl ExactSizeIterator<Item = (&str, Hold)> {
    lease
        .lock
        .nodes
        .iter()
        .zip(lease.holds())
        .map(|(n, h)| (&**n.name(), h))
}
