//! The lease: what a held lock shares between its [`LockGuard`](crate::LockGuard),
//! its [`HeldLock`](crate::HeldLock) handles and the watchdog. It is the one
//! owner of a held lock's mutable state: the validity deadline, the
//! per-node holds, the renewal schedule, the round in flight and the end.
//!
//! Every answer to "is it still ours?" comes from one deadline under one
//! mutex: `is_held()`, `validity()`, `lost()` and the cancellation token
//! cannot disagree. Callers never see the mutex; they say what happened
//! (a round won, a round missed, a release began) and the lease applies
//! its rules:
//!
//! * **The deadline rule** ([`Lease::record_win`]): a round that won its
//!   quorum moves the deadline to `start + ttl − drift` of that round,
//!   never further, and only while the lease is held and before its loss
//!   time (`deadline − loss_margin`); a round that missed can only move it
//!   earlier ([`Lease::record_miss`]).
//! * **Once ended, always ended**: a lease lost or released is never held
//!   again, and nothing moves its deadline.
//! * **One round at a time** ([`Lease::claim`]): an extend and a renewal
//!   never send at once, and a release waits for the round in flight so it
//!   is queued behind it on every node.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::clock::Stamp;
use crate::core::Core;
use crate::error::{Error, LostReason, NodeReports};
use crate::keys::Entry;
use crate::quorum::{self, Vote};
use crate::scripts::reply::Reading;
use crate::stats::bump;
use crate::telemetry;

/// Whether a guard holds its key on one node, as of the last acquire,
/// extend or renewal.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{LockConfig, MultiLock};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// use quorumlock::Hold;
/// let guard = lock.try_acquire("job").await?;
/// let held = guard.nodes().filter(|(_, h)| *h == Hold::Held).count();
/// assert!(held >= 2);
/// guard.release().await;
/// # Ok(())
/// # }
/// ```
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

impl Hold {
    /// Each node's hold after a quorum round, from its vote (`None`: the
    /// round was decided before the node answered).
    pub(crate) fn from_votes(votes: &[Option<Vote>]) -> Vec<Hold> {
        votes
            .iter()
            .map(|v| match v {
                Some(Vote::Won) => Hold::Held,
                Some(_) => Hold::NotHeld,
                None => Hold::Unknown,
            })
            .collect()
    }
}

/// Why and when a held lock stopped being provably ours. Returned by
/// [`HeldLock::lost`](crate::HeldLock::lost) (also on a [`LockGuard`](crate::LockGuard)).
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{LockConfig, LostReason, MultiLock};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?);
/// let guard = lock.try_acquire("job").await?;
/// lock.force_release("job").await?;
/// let notice = guard.lost().await;
/// assert_eq!(notice.reason, LostReason::ForceReleased);
/// assert!(notice.at <= notice.deadline, "signalled before the deadline");
/// # Ok(())
/// # }
/// ```
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
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use quorumlock::{LockConfig, MultiLock};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let config = LockConfig::builder()
///     .nodes(nodes)
///     .ttl(Duration::from_secs(1))
///     .watchdog(true)
///     .build()?;
/// let lock = MultiLock::new(config);
/// let guard = lock.try_acquire("job").await?;
/// // Renewed every third of the TTL.
/// let mut renewal = None;
/// for _ in 0..100 {
///     renewal = guard.last_renewal();
///     if renewal.is_some() {
///         break;
///     }
///     tokio::time::sleep(Duration::from_millis(50)).await;
/// }
/// let renewal = renewal.expect("renewed within 5 s");
/// assert!(renewal.held >= 2);
/// guard.release().await;
/// # Ok(())
/// # }
/// ```
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

/// A round (a renewal group or an extend) sending to the nodes for a lease:
/// its id and the token cancelled when none of its requests can be sent any
/// more. A release waits for it, so that it is queued behind the round on
/// every node and no renewal can re-create a released key.
#[derive(Clone)]
pub(crate) struct Flight {
    id: u64,
    pub(crate) done: CancellationToken,
}

impl Flight {
    pub(crate) fn new() -> Flight {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Flight {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            done: CancellationToken::new(),
        }
    }
}

/// What an acquire read from each node's fencing counters: for every node
/// it won, each key's counter; `None` for the other nodes. The first read of [`crate::fence`].
pub(crate) type FenceReads = Box<[Option<Box<[Reading]>>]>;

/// What an acquire won: the start of a lease.
pub(crate) struct Grant {
    pub(crate) entry: Entry,
    /// When the winning round started (before its first request left).
    pub(crate) start: Stamp,
    /// Each node's hold after the round.
    pub(crate) holds: Vec<Hold>,
    pub(crate) watched: bool,
    /// The keys' TTL this round set.
    pub(crate) ttl: Duration,
    /// The fencing token cell (shared with the hold this one re-entered).
    pub(crate) fence: Arc<OnceCell<u64>>,
    pub(crate) fence_reads: FenceReads,
}

/// A round that won its quorum, as the lease records it.
pub(crate) struct Win {
    /// When the round started (before its first request left).
    pub(crate) start: Stamp,
    /// The TTL the round gave the keys.
    pub(crate) ttl: Duration,
    pub(crate) holds: Vec<Hold>,
    /// For a watchdog renewal: nodes confirmed and healed so far.
    pub(crate) renewal: Option<(usize, usize)>,
}

/// What [`Lease::record_win`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// The deadline moved to the round's.
    Moved,
    /// The win came too late to use (its own loss time has passed); the
    /// lease is unchanged and still held.
    TooLate,
    /// The lease had ended, or its loss time had come (it is ended now).
    Ended,
}

/// What to do with a lease whose renewal came up in the watchdog's queue.
#[derive(Debug)]
pub(crate) enum RenewalClaim {
    /// Renew it in this flight, with this TTL.
    Renew(Duration),
    /// Not due yet (a retry is never pulled forward): put back at this time.
    Later(Stamp),
    /// Nothing to do: ended, in flight elsewhere, or a later entry exists.
    Drop,
}

/// The mutable part of a lease; only the lease's methods touch it.
struct State {
    /// The validity deadline.
    deadline: Stamp,
    /// The TTL the keys were last given.
    ttl: Duration,
    holds: Vec<Hold>,
    /// Set once, when the lease is lost or released.
    ended: Option<LossNotice>,
    in_flight: Option<Flight>,
    /// When the watchdog renews next (`None`: it no longer renews).
    next_renewal: Option<Stamp>,
    /// Renewals stopped because the maximum hold time was reached.
    max_hold_reached: bool,
    /// Consecutive renewal rounds that failed.
    failures: u32,
    last_failure: Option<NodeReports>,
    last_renewal: Option<Renewal>,
    /// A task already watches the deadline for the cancellation token.
    deadline_watched: bool,
    /// The loss time the watchdog has an entry for.
    loss_scheduled: Option<Stamp>,
}

impl State {
    /// Not ended, and before the deadline.
    fn is_held(&self) -> bool {
        self.ended.is_none() && Stamp::now() < self.deadline
    }
}

/// A held lock's shared state.
pub(crate) struct Lease {
    pub(crate) core: Arc<Core>,
    pub(crate) entry: Entry,
    /// The lock's name for logs and errors (`a` or `a+b`).
    pub(crate) name: Arc<str>,
    acquired: Stamp,
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
    pub(crate) fn new(core: Arc<Core>, grant: Grant) -> Lease {
        let ttl = grant.ttl;
        let deadline = grant
            .start
            .after(quorum::lease(ttl, core.config.drift_factor));
        let entry = grant.entry;
        let mut lease = Lease {
            // One name: share it rather than allocate its display.
            name: if entry.keys.len() == 1 {
                Arc::clone(entry.keys.first())
            } else {
                Arc::from(entry.keys.to_string())
            },
            core,
            entry,
            acquired: grant.start,
            fence: grant.fence,
            fence_reads: grant.fence_reads,
            watched: grant.watched,
            cancel: CancellationToken::new(),
            state: Mutex::new(State {
                deadline,
                ttl,
                holds: grant.holds,
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
        if lease.watched {
            // Counted down in `end`.
            bump(&lease.core.counters.watched);
            telemetry::watched(1.0);
            let next = lease.next_renewal_after(grant.start, ttl);
            let state = lease
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            state.next_renewal = next;
            state.max_hold_reached = next.is_none();
        }
        lease
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `d` (a setting made for the configured TTL) scaled to `ttl`, for a
    /// guard extended to another TTL.
    fn scaled(&self, d: Duration, ttl: Duration) -> Duration {
        let configured = self.core.config.ttl;
        if ttl == configured {
            d
        } else {
            d.mul_f64(ttl.as_secs_f64() / configured.as_secs_f64())
        }
    }

    /// When a lease with this deadline and TTL is declared lost unless
    /// renewed: the deadline minus the loss margin.
    pub(crate) fn loss_time(&self, deadline: Stamp, ttl: Duration) -> Stamp {
        deadline.before(self.scaled(self.core.config.loss_margin, ttl))
    }

    /// When to renew a round that started at `start` with `ttl`; `None` once
    /// that would be past the maximum hold time.
    pub(crate) fn next_renewal_after(&self, start: Stamp, ttl: Duration) -> Option<Stamp> {
        let next = start.after(self.scaled(self.core.config.renew_interval, ttl));
        match self.core.config.max_hold {
            Some(max) if next > self.acquired.after(max) => None,
            _ => Some(next),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.state().is_held()
    }

    /// Whether the lease was lost or released.
    pub(crate) fn has_ended(&self) -> bool {
        self.state().ended.is_some()
    }

    pub(crate) fn deadline(&self) -> Stamp {
        self.state().deadline
    }

    /// The TTL the keys were last given.
    pub(crate) fn key_ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn holds(&self) -> Vec<Hold> {
        self.state().holds.clone()
    }

    pub(crate) fn last_renewal(&self) -> Option<Renewal> {
        self.state().last_renewal
    }

    /// `Ok` while the lease is held; otherwise ends it (if it had not
    /// ended) and returns [`Error::Lost`] with the reason. Checked and
    /// ended under one lock: nothing can renew it in between.
    pub(crate) fn ensure_held(&self) -> Result<(), Error> {
        let state = self.state();
        if state.is_held() {
            return Ok(());
        }
        let reason = self.end_locked(state, LostReason::ValidityExpired);
        Err(self.lost_error(reason))
    }

    /// [`Error::Lost`] for this lease with `reason`.
    fn lost_error(&self, reason: LostReason) -> Error {
        Error::Lost {
            key: self.name.to_string(),
            reason,
        }
    }

    /// The error for a lease that has ended ([`Error::Lost`] with why).
    pub(crate) fn ended_error(&self) -> Error {
        let reason = self
            .state()
            .ended
            .as_ref()
            .map_or(LostReason::ValidityExpired, |n| n.reason.clone());
        self.lost_error(reason)
    }

    /// Ends the lease if its loss time has come: the watchdog's and the
    /// `lost()` future's timers land here.
    pub(crate) fn expire_if_due(&self) {
        self.expire_locked(self.state());
    }

    /// [`expire_if_due`](Self::expire_if_due) on the locked state.
    fn expire_locked(&self, state: MutexGuard<'_, State>) {
        if state.ended.is_some() || Stamp::now() < self.loss_time(state.deadline, state.ttl) {
            return;
        }
        let reason = if !self.watched {
            LostReason::ValidityExpired
        } else if state.max_hold_reached {
            LostReason::MaxHoldReached(self.core.config.max_hold.unwrap_or_default())
        } else {
            LostReason::RenewalsFailed(state.last_failure.clone().unwrap_or_default())
        };
        self.end_locked(state, reason);
    }

    /// Ends the lease (once) for `reason`.
    pub(crate) fn end(&self, reason: LostReason) {
        self.end_locked(self.state(), reason);
    }

    /// Ends the lease (once): the deadline moves to now at the latest, the
    /// token is cancelled, the loss is counted and logged. Takes the locked
    /// state so that the check before and the end are one step. Returns
    /// the reason the lease ended with (an earlier end's, if any).
    fn end_locked(&self, mut state: MutexGuard<'_, State>, reason: LostReason) -> LostReason {
        if let Some(notice) = &state.ended {
            return notice.reason.clone();
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
        let counters = &self.core.counters;
        if self.watched {
            counters.watched.fetch_sub(1, Ordering::Relaxed);
            telemetry::watched(-1.0);
        }
        telemetry::ended(&notice.reason, now.saturating_since(self.acquired));
        if notice.reason != LostReason::Released {
            bump(&counters.lost);
            tracing::warn!(
                key = %self.name,
                reason = %notice.reason,
                validity_left_ms = notice.deadline.saturating_since(now).as_millis() as u64,
                "lock lost: the holder can no longer prove it holds the lock"
            );
        }
        let reason = notice.reason.clone();
        state.deadline = state.deadline.min(now);
        state.next_renewal = None;
        state.ended = Some(notice);
        drop(state);
        self.cancel.cancel();
        reason
    }

    /// Records a round that won its quorum: **the deadline rule**. The
    /// deadline moves to the round's own `start + ttl − drift` (never
    /// further), only while the lease has not ended and its current loss
    /// time has not come (then it ends now), and only if the round's own
    /// loss time has not come either (a win too late to use changes
    /// nothing).
    pub(crate) fn record_win(&self, win: Win) -> Recorded {
        let mut state = self.state();
        let now = Stamp::now();
        if state.ended.is_some() || now >= self.loss_time(state.deadline, state.ttl) {
            self.expire_locked(state);
            return Recorded::Ended;
        }
        let deadline = win
            .start
            .after(quorum::lease(win.ttl, self.core.config.drift_factor));
        if now >= self.loss_time(deadline, win.ttl) {
            return Recorded::TooLate;
        }
        state.deadline = deadline;
        state.ttl = win.ttl;
        state.holds = win.holds;
        if let Some((held, healed)) = win.renewal {
            state.failures = 0;
            state.last_renewal = Some(Renewal {
                started: win.start,
                took: now.saturating_since(win.start),
                held,
                healed,
            });
        }
        if self.watched {
            state.next_renewal = self.next_renewal_after(win.start, win.ttl);
            state.max_hold_reached |= state.next_renewal.is_none();
        }
        Recorded::Moved
    }

    /// Records a round that set `ttl` on some nodes and did not win usable
    /// validity: nodes that took it may expire before the old deadline, so
    /// the deadline can only move earlier (to `start + ttl − drift`).
    /// `holds`: what the round found, if it is to be shown. `keys_gone`:
    /// other owners hold too many nodes for any quorum: the lease ends.
    ///
    /// Returns `false`, recording nothing, when the lease had ended or its
    /// loss time had come (it is ended now).
    pub(crate) fn record_miss(
        &self,
        start: Stamp,
        ttl: Duration,
        holds: Option<Vec<Hold>>,
        keys_gone: Option<NodeReports>,
    ) -> bool {
        let mut state = self.state();
        if state.ended.is_some() || Stamp::now() >= self.loss_time(state.deadline, state.ttl) {
            self.expire_locked(state);
            return false;
        }
        let deadline = start.after(quorum::lease(ttl, self.core.config.drift_factor));
        state.deadline = state.deadline.min(deadline);
        if let Some(holds) = holds {
            state.holds = holds;
        }
        if let Some(reports) = keys_gone {
            self.end_locked(state, LostReason::KeysGone(reports));
        }
        true
    }

    /// After a missed renewal: schedules the retry with the lock's backoff
    /// (`jitter_unit` in `0..1` picks the point within its jitter band),
    /// within the loss time and the maximum hold time.
    pub(crate) fn schedule_retry(&self, reports: NodeReports, jitter_unit: f64) {
        let config = &self.core.config;
        let mut state = self.state();
        if state.ended.is_some() {
            return;
        }
        let now = Stamp::now();
        state.failures = state.failures.saturating_add(1);
        state.last_failure = Some(reports);
        let retry_at = now.after(config.retry.delay(state.failures, jitter_unit));
        let within_hold = config
            .max_hold
            .is_none_or(|max| retry_at <= self.acquired.after(max));
        state.max_hold_reached |= !within_hold;
        let loss = self.loss_time(state.deadline, state.ttl);
        state.next_renewal = (retry_at < loss && within_hold).then_some(retry_at);
    }

    /// Replies that came after a renewal was decided: the guard's view of
    /// its nodes (and that renewal's counts) include them.
    pub(crate) fn record_late_replies(
        &self,
        start: Stamp,
        holds: Vec<Hold>,
        held: usize,
        healed: usize,
    ) {
        let mut state = self.state();
        if state.ended.is_some() {
            return;
        }
        state.holds = holds;
        if let Some(renewal) = state.last_renewal.as_mut().filter(|r| r.started == start) {
            renewal.held = held;
            renewal.healed = healed;
        }
    }

    /// For the watchdog: the next renewal time, and the loss time if it has
    /// no entry for it yet; `None` once the lease has ended.
    pub(crate) fn watch_times(&self) -> Option<(Option<Stamp>, Option<Stamp>)> {
        let mut state = self.state();
        if state.ended.is_some() {
            return None;
        }
        let loss_at = self.loss_time(state.deadline, state.ttl);
        // One loss entry per loss time: a round that did not move the
        // deadline adds none.
        let new_loss = (state.loss_scheduled != Some(loss_at)).then_some(loss_at);
        state.loss_scheduled = Some(loss_at);
        Some((state.next_renewal, new_loss))
    }

    /// Decides what to do with this lease's renewal entry that came up at
    /// `now`, and claims the in-flight slot for `flight` if it is to be
    /// renewed now (renewals due by `horizon` are pulled forward).
    pub(crate) fn claim_renewal(
        &self,
        now: Stamp,
        horizon: Stamp,
        flight: &Flight,
    ) -> RenewalClaim {
        let mut state = self.state();
        // In flight: that round (an extend, another group) reschedules when
        // it ends.
        if state.ended.is_some() || state.in_flight.is_some() {
            return RenewalClaim::Drop;
        }
        let Some(next) = state.next_renewal else {
            return RenewalClaim::Drop;
        };
        // A retry keeps its backoff: pulling it into this tick would turn a
        // failing round into a tight loop.
        let due_by = if state.failures > 0 { now } else { horizon };
        if next > due_by {
            // Moved later (a renewal or extend pushed its own entry), or a
            // retry not yet due.
            return if state.failures > 0 && next <= horizon {
                RenewalClaim::Later(next)
            } else {
                RenewalClaim::Drop
            };
        }
        state.in_flight = Some(flight.clone());
        RenewalClaim::Renew(state.ttl)
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

    /// Claims the in-flight slot for `flight`, waiting while another round
    /// holds it. `false` when the lease ended meanwhile.
    pub(crate) async fn claim(&self, flight: &Flight) -> bool {
        loop {
            let other = {
                let mut state = self.state();
                if state.ended.is_some() {
                    return false;
                }
                match &state.in_flight {
                    None => {
                        state.in_flight = Some(flight.clone());
                        return true;
                    }
                    Some(other) => other.done.clone(),
                }
            };
            other.cancelled().await;
        }
    }

    /// Gives the in-flight slot back if `flight` holds it.
    pub(crate) fn unclaim(&self, flight: &Flight) {
        let mut state = self.state();
        if state.in_flight.as_ref().is_some_and(|f| f.id == flight.id) {
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
            let in_flight = state.in_flight.as_ref().map(|f| f.done.clone());
            self.end_locked(state, LostReason::Released);
            (was_held, in_flight)
        };
        if let Some(done) = in_flight {
            // A round ends within its node timeout; the bound is a backstop.
            let config = &self.core.config;
            let bound = config
                .node_timeout
                .saturating_mul(2)
                .saturating_add(config.connect_timeout);
            if tokio::time::timeout(bound, done.cancelled()).await.is_err() {
                tracing::debug!(key = %self.name, "a renewal round did not end in time before release");
            }
        }
        was_held
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("keys", &self.entry.keys)
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

/// A lease held on every node of a [`Core::offline`] core since a round
/// begun at `start`, with the core's TTL, for the unit tests of what does
/// no I/O.
#[cfg(test)]
impl Lease {
    pub(crate) fn held_since(core: &Arc<Core>, start: Stamp, watched: bool) -> Lease {
        let keys = crate::keys::KeySet::new(&["k"]).expect("valid name");
        Lease::new(
            Arc::clone(core),
            Grant {
                entry: Entry::new(keys, Arc::from("t"), core.nodes.len()),
                start,
                holds: vec![Hold::Held; core.nodes.len()],
                watched,
                ttl: core.config.ttl,
                fence: Arc::default(),
                fence_reads: Box::new([]),
            },
        )
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl Lease {
    /// The renewal schedule, for the watchdog's unit tests.
    pub(crate) fn next_renewal(&self) -> Option<Stamp> {
        self.state().next_renewal
    }

    /// Sets the renewal schedule as a run of failed renewals would.
    pub(crate) fn set_schedule(&self, next_renewal: Option<Stamp>, failures: u32) {
        let mut state = self.state();
        state.next_renewal = next_renewal;
        state.failures = failures;
    }

    pub(crate) fn max_hold_reached(&self) -> bool {
        self.state().max_hold_reached
    }

    pub(crate) fn ended_notice(&self) -> Option<LossNotice> {
        self.state().ended.clone()
    }

    pub(crate) fn set_last_failure(&self, reports: NodeReports) {
        self.state().last_failure = Some(reports);
    }
}
