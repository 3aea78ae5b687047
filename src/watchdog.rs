//! The watchdog: keeps a held lock alive while its holder works, and says so
//! at once when it can no longer prove the lock is held.
//!
//! Turn it on for every guard with
//! [`LockConfigBuilder::watchdog`](crate::LockConfigBuilder::watchdog), or
//! use [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive), which
//! always uses it.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let testbed = quorumlock_testbed::Testbed::start(3)?;
//! # let nodes = testbed.urls();
//! use std::time::Duration;
//! use quorumlock::{LockConfig, MultiLock, Wait};
//!
//! let config = LockConfig::builder()
//!     .nodes(nodes)
//!     .ttl(Duration::from_secs(1))
//!     .watchdog(true)
//!     .build()?;
//! let lock = MultiLock::new(config);
//! let guard = lock.acquire("reindex", Wait::up_to(Duration::from_secs(1))).await?;
//! let stop = guard.cancellation_token();
//! // Work that outlasts the TTL: the watchdog keeps the lock alive, and
//! // `stop` would be cancelled at once if it could no longer prove it.
//! let work = tokio::time::sleep(Duration::from_millis(1500));
//! let finished = stop.run_until_cancelled(work).await.is_some();
//! assert!(finished && guard.is_held());
//! assert!(guard.last_renewal().is_some());
//! guard.release().await;
//! # Ok(())
//! # }
//! ```
//!
//! # What it does
//!
//! * **Renews** every [`renew_interval`](crate::LockConfig::renew_interval)
//!   (default a third of the TTL) after the last successful acquire or
//!   renewal. Each renewal is a fresh fan-out to *every* node with its own
//!   start time, its own quorum count and its own validity
//!   (`start + ttl − drift`), exactly like an acquire. It decides at the quorum: a paused or dead node never delays
//!   the verdict.
//! * **Heals**: the renew script resets the TTL where the key carries our
//!   token and re-takes the key, with the same token and TTL, where it is
//!   absent (a node that restarted empty, a promoted replica). A key held by
//!   another owner is left alone. The guard's
//!   [`nodes`](crate::HeldLock::nodes) always show what the last round found.
//! * **Retries** a renewal that missed the quorum with jittered backoff
//!   (the lock's [`RetryPolicy`](crate::RetryPolicy)) for as long as the
//!   validity allows.
//! * **Declares the loss** when no renewal succeeded by the deadline minus
//!   the [`loss_margin`](crate::LockConfig::loss_margin) (default a tenth of
//!   the TTL), or at once when other owners hold too many nodes for any
//!   quorum: [`is_held`](crate::HeldLock::is_held) turns false, every
//!   [`lost`](crate::HeldLock::lost) future resolves with a
//!   [`LossNotice`](crate::LossNotice), the
//!   [cancellation token](crate::HeldLock::cancellation_token) is cancelled,
//!   and a `tracing` event at warn level names each node and what it said.
//! * **Stops** on release or drop: no renewal is sent for a released guard,
//!   and a renewal still in flight is let finish before the release is sent,
//!   so the release is queued behind it on every node and a late renewal
//!   can never re-create a released key.
//!
//! # The guarantee
//!
//! **Lost is signalled before the deadline, never after.** The loss is
//! declared at `deadline − loss_margin`, and `is_held()` derives from the
//! same deadline, so it is false by the deadline even if the runtime was too
//! busy to run the watchdog's timer in time. The margin is what the holder
//! gets to stop its work.
//!
//! # Its limits
//!
//! * A holder that is *paused* (GC, swap, SIGSTOP, a stopped VM) cannot be
//!   told anything: its code does not run. When it resumes, `is_held()` is
//!   false if the deadline passed, but a write it had already decided on
//!   goes out anyway. Only the protected resource can reject that write:
//!   [fencing tokens](crate::fence) cover this case.
//! * The nodes' clocks must not run faster than the drift allowance, and a
//!   node that loses its data must stay out for a TTL (delayed restart), as
//!   for any Redlock acquire.
//! * The watchdog runs on the Tokio runtime. Work that blocks the runtime's
//!   threads (a CPU-bound loop without `.await`, blocking I/O) starves it
//!   like a pause: renewals stop, and the loss is only noticed once the
//!   work yields. `is_held()` reads the clock, so it is right even then.
//!   Run such work with `spawn_blocking`, or on another runtime.
//!
//! # Cost
//!
//! One task per [`MultiLock`](crate::MultiLock), not per guard. Renewals due
//! within a tenth of the interval of each other are sent to each node
//! together, as one script call per 256 locks, so the traffic grows with
//! nodes × ticks, not with round trips per lock.

//!
//! This module holds only documentation; its types are crate-internal.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use crate::clock::Stamp;
use crate::core::{Core, ttl_millis};
use crate::error::{LostReason, NodeError};
use crate::fanout::{End, fan_out};
use crate::lease::{Flight, Hold, Lease, Recorded, RenewalClaim, Win};
use crate::quorum::{Decision, Tally, Vote};
use crate::scripts::renew::{RENEW_CHUNK, RenewItem, RenewReply};
use crate::stats::bump;
use crate::telemetry;

/// The renewal schedule of one lock service. Dropping it ends its task at
/// once: the task holds the schedule only weakly, so a dropped lock service
/// leaves nothing behind that keeps its leases (or their connections) alive.
pub(crate) struct Watchdog {
    shared: Arc<Schedule>,
}

/// What the watchdog and its task share.
struct Schedule {
    queue: Mutex<Queue>,
    /// Wakes the task: an earlier entry, or the watchdog dropped.
    wake: Notify,
    /// Renewals due within this window of each other go out together.
    window: Duration,
}

#[derive(Default)]
struct Queue {
    /// When each watched lease renews next.
    renewals: BinaryHeap<Due>,
    /// When each watched lease is declared lost unless renewed.
    losses: BinaryHeap<Due>,
    /// Whether the task runs.
    running: bool,
    /// Tie-breaker for equal times.
    seq: u64,
}

/// A lease and a time. Entries are not removed when a lease is renewed
/// early or released; they are checked against the lease when they come up.
struct Due {
    at: Stamp,
    seq: u64,
    lease: Arc<Lease>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// What came due in one tick.
struct Tick {
    losses: Vec<Arc<Lease>>,
    /// The renewals, in groups of at most [`RENEW_CHUNK`]: one script call
    /// per node each, with its own flight.
    groups: Vec<Group>,
    next: Option<Stamp>,
}

/// Leases renewed together: one renew call per node, one start time.
struct Group {
    flight: Flight,
    leases: Vec<(Arc<Lease>, Duration)>,
    /// Lock keys of those leases (a multi-key guard counts each).
    keys: usize,
}

/// Groups of one tick that may be undecided at once. Each is one call per
/// node; two keep every node busy (one call runs while the next is on its
/// way) without queuing calls behind one another. A group's slot frees at
/// its quorum, so its slowest nodes still work on it when the next group
/// arrives: with 4 in flight, 10,000 locks on 5 nodes sharing 2 cores took
/// twice as long per round (p50 30 ms against 15 ms; the same throughput)
/// and came within the node timeout (`benches/watchdog_scale.rs`).
const GROUPS_IN_FLIGHT: usize = 2;

impl Watchdog {
    /// A watchdog that renews every `renew_interval` (coalescing renewals
    /// due within a tenth of it).
    pub(crate) fn new(renew_interval: Duration) -> Watchdog {
        Watchdog {
            shared: Arc::new(Schedule {
                queue: Mutex::default(),
                wake: Notify::new(),
                window: renew_interval / 10,
            }),
        }
    }

    /// Schedules a watched lease's next renewal and its loss time, starting
    /// the watchdog task if it is not running.
    pub(crate) fn watch(&self, lease: &Arc<Lease>) {
        self.shared.watch(lease);
    }
}

impl Watchdog {
    /// Ends every watched lease that holds `name`, for `reason`; how many.
    pub(crate) fn end_holders_of(&self, name: &str, reason: &LostReason) -> usize {
        let queue = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut ended = 0;
        for due in queue.renewals.iter().chain(queue.losses.iter()) {
            let lease = &due.lease;
            if lease.is_held() && lease.entry.keys.names().iter().any(|n| &**n == name) {
                lease.end(reason.clone());
                ended += 1;
            }
        }
        ended
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Nothing is renewed for a lock service that is gone (its guards are
        // gone too): let go of every lease now, rather than when the task
        // next wakes, and wake it so that it ends.
        let (renewals, losses) = {
            let mut queue = self
                .shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (
                std::mem::take(&mut queue.renewals),
                std::mem::take(&mut queue.losses),
            )
        };
        drop((renewals, losses));
        self.shared.wake.notify_one();
    }
}

impl Schedule {
    fn watch(self: &Arc<Self>, lease: &Arc<Lease>) {
        let Some((renew_at, loss_at)) = lease.watch_times() else {
            return;
        };
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let earliest = queue.next_due();
        if let Some(at) = loss_at {
            queue.push(|q| &mut q.losses, at, lease);
        }
        if let Some(at) = renew_at {
            queue.push(|q| &mut q.renewals, at, lease);
        }
        let Some(new_earliest) = [renew_at, loss_at].into_iter().flatten().min() else {
            return;
        };
        if !queue.running {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::warn!(key = %lease.name, "no Tokio runtime: the watchdog cannot run; the guard expires at its deadline");
                return;
            };
            queue.running = true;
            drop(queue);
            runtime.spawn(run(Arc::downgrade(self)));
        } else if earliest.is_none_or(|e| new_earliest < e) {
            drop(queue);
            self.wake.notify_one();
        }
    }

    /// Takes what is due: losses up to `now`, renewals up to `horizon`
    /// (early by at most the coalescing window, which is harmless; retries
    /// only once due). Marks the task stopped when nothing is left.
    fn take_due(&self, now: Stamp, horizon: Stamp) -> Tick {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut losses = Vec::new();
        while queue.losses.peek().is_some_and(|d| d.at <= now) {
            if let Some(due) = queue.losses.pop() {
                losses.push(due.lease);
            }
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut later = Vec::new();
        while queue.renewals.peek().is_some_and(|d| d.at <= horizon) {
            let Some(due) = queue.renewals.pop() else {
                break;
            };
            if groups.last().is_none_or(|g| g.keys >= RENEW_CHUNK) {
                groups.push(Group {
                    flight: Flight::new(),
                    leases: Vec::new(),
                    keys: 0,
                });
            }
            let Some(group) = groups.last_mut() else {
                break;
            };
            match due.lease.claim_renewal(now, horizon, &group.flight) {
                RenewalClaim::Renew(ttl) => {
                    group.keys += due.lease.entry.keys.len();
                    group.leases.push((due.lease, ttl));
                }
                RenewalClaim::Later(at) => later.push(Due { at, ..due }),
                RenewalClaim::Drop => {}
            }
        }
        groups.retain(|g| !g.leases.is_empty());
        queue.renewals.extend(later);
        let next = queue.next_due();
        if next.is_none() {
            queue.running = false;
        }
        Tick {
            losses,
            groups,
            next,
        }
    }
}

impl Queue {
    fn next_due(&self) -> Option<Stamp> {
        let renew = self.renewals.peek().map(|d| d.at);
        let loss = self.losses.peek().map(|d| d.at);
        match (renew, loss) {
            (Some(r), Some(l)) => Some(r.min(l)),
            (r, l) => r.or(l),
        }
    }

    fn push(
        &mut self,
        heap: fn(&mut Queue) -> &mut BinaryHeap<Due>,
        at: Stamp,
        lease: &Arc<Lease>,
    ) {
        self.seq += 1;
        let seq = self.seq;
        heap(self).push(Due {
            at,
            seq,
            lease: Arc::clone(lease),
        });
    }
}

/// The watchdog task: sleeps until the next renewal or loss is due, sends
/// each tick's renewals in groups, and ends when nothing is scheduled or
/// the watchdog is gone.
async fn run(schedule: Weak<Schedule>) {
    loop {
        let Some(shared) = schedule.upgrade() else {
            return;
        };
        let notified = shared.wake.notified();
        tokio::pin!(notified);
        // Registered before the queue is read, so a push in between wakes us.
        notified.as_mut().enable();
        let now = Stamp::now();
        let tick = shared.take_due(now, now.after(shared.window));
        for lease in &tick.losses {
            lease.expire_if_due();
        }
        if !tick.groups.is_empty() {
            tokio::spawn(renew_tick(Arc::clone(&shared), tick.groups));
        }
        let Some(next) = tick.next else {
            return;
        };
        // Dropping the watchdog wakes this wait; the next pass then finds
        // the schedule gone and lets go of it, and of every lease in it.
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(next.to_instant()) => {}
        }
    }
}

/// Renews one tick's groups, at most [`GROUPS_IN_FLIGHT`] undecided at once.
async fn renew_tick(schedule: Arc<Schedule>, groups: Vec<Group>) {
    let permits = Arc::new(Semaphore::new(GROUPS_IN_FLIGHT));
    for group in groups {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let span = tracing::debug_span!("renew", locks = group.leases.len());
        tokio::spawn(renew_group(Arc::clone(&schedule), group, permit).instrument(span));
    }
}

/// One lease's part of a group: its votes so far and whether it is decided.
struct LeaseVotes {
    tally: Tally,
    votes: Vec<Option<Vote>>,
    healed: usize,
    decided: bool,
}

/// A group's renewal round: every lease's votes, decided one by one.
struct GroupRound {
    core: Arc<Core>,
    leases: Vec<(Arc<Lease>, Duration)>,
    votes: Vec<LeaseVotes>,
    errors: Vec<Option<NodeError>>,
    undecided: usize,
    start: Stamp,
    /// One point in the retry backoff's jitter band for the whole group:
    /// leases that missed together retry together, as one group again,
    /// rather than each at its own time in a script call of its own (which
    /// multiplies the calls exactly when the nodes are slow).
    jitter_unit: f64,
}

/// Renews every lease of a group on every node (one renew call per node),
/// each lease decided on its own tally as soon as its quorum is won or out
/// of reach. The permit is given back once every lease is decided; the
/// round keeps listening until the node timeout for late replies, which
/// tell the guards which nodes they hold.
async fn renew_group(schedule: Arc<Schedule>, group: Group, permit: OwnedSemaphorePermit) {
    let Group {
        flight, mut leases, ..
    } = group;
    // A lease released while this group waited for its turn is not renewed:
    // its release may already be on the wire (it waits for this round only
    // up to a bound), and a renewal sent after it would re-create the key.
    leases.retain(|(lease, _)| {
        let ended = lease.has_ended();
        if ended {
            lease.unclaim(&flight);
        }
        !ended
    });
    let Some(core) = leases.first().map(|(lease, _)| Arc::clone(&lease.core)) else {
        flight.done.cancel();
        return;
    };
    let items: Arc<[RenewItem]> = leases
        .iter()
        .map(|(lease, ttl)| RenewItem {
            entry: lease.entry.clone(),
            ttl_ms: ttl_millis(*ttl),
        })
        .collect();
    let mut round = GroupRound::new(core, leases);
    let mut permit = Some(permit);
    let n = round.core.nodes.len();
    let nodes = round.core.nodes.clone();
    let (end, unfinished) = fan_out(
        n,
        Instant::now() + round.core.config.node_timeout,
        |i| nodes[i].renew(Arc::clone(&items)),
        |i, reply| {
            if round.record(i, reply) {
                // The next group may start; this one listens on.
                permit.take();
            }
            false
        },
    )
    .await;
    // Nothing of this round is sent after it: a renewal not yet written is
    // skipped, so the release that waits for `done` is queued behind
    // everything of it that can still run.
    drop(unfinished);
    round.finish(end, &flight);
    flight.done.cancel();
    for (lease, _) in &round.leases {
        schedule.watch(lease);
    }
}

impl GroupRound {
    fn new(core: Arc<Core>, leases: Vec<(Arc<Lease>, Duration)>) -> GroupRound {
        let n = core.nodes.len();
        let required = core.required();
        core.counters
            .renewals
            .fetch_add(leases.len() as u64, Relaxed);
        GroupRound {
            votes: leases
                .iter()
                .map(|_| LeaseVotes {
                    tally: Tally::new(n, required),
                    votes: vec![None; n],
                    healed: 0,
                    decided: false,
                })
                .collect(),
            undecided: leases.len(),
            errors: vec![None; n],
            start: Stamp::now(),
            jitter_unit: rand::random::<f64>(),
            core,
            leases,
        }
    }

    /// Counts node `i`'s reply for every lease, applying each lease's
    /// verdict as soon as it is decided. `true` once every lease is.
    fn record(&mut self, i: usize, reply: Result<Vec<RenewReply>, NodeError>) -> bool {
        let replies = match reply {
            Ok(replies) => Some(replies),
            Err(e) => {
                self.errors[i] = Some(e);
                None
            }
        };
        for j in 0..self.votes.len() {
            let lease_votes = &mut self.votes[j];
            let vote = match replies.as_ref().and_then(|r| r.get(j)) {
                Some(RenewReply::Renewed) => Vote::Won,
                Some(RenewReply::Healed) => {
                    lease_votes.healed += 1;
                    bump(&self.core.counters.healed);
                    Vote::Won
                }
                Some(RenewReply::NotOurs) => Vote::Contended,
                None => Vote::Failed,
            };
            lease_votes.tally.record(vote);
            lease_votes.votes[i] = Some(vote);
            if !lease_votes.decided && lease_votes.tally.decision() != Decision::Pending {
                lease_votes.decided = true;
                self.undecided -= 1;
                self.apply_verdict(j, false);
            }
        }
        self.undecided == 0
    }

    /// After the fan-out ended: counts the nodes that never answered,
    /// decides the leases still undecided, records late replies of the
    /// others, and gives every lease's in-flight slot back.
    fn finish(&self, end: End, flight: &Flight) {
        if end == End::DeadlinePassed {
            for (i, node) in self.core.nodes.iter().enumerate() {
                if self.votes.iter().all(|r| r.votes[i].is_none()) {
                    self.core.count_timeout(node);
                }
            }
        }
        for (j, ((lease, _), lease_votes)) in self.leases.iter().zip(&self.votes).enumerate() {
            if !lease_votes.decided {
                self.apply_verdict(j, true);
            } else if lease_votes.tally.decision() == Decision::Won {
                lease.record_late_replies(
                    self.start,
                    Hold::from_votes(&lease_votes.votes),
                    lease_votes.tally.won(),
                    lease_votes.healed,
                );
            }
            lease.unclaim(flight);
        }
    }

    /// Applies lease `j`'s verdict, from its votes so far; `at_end` says the
    /// round ended before they decided it.
    fn apply_verdict(&self, j: usize, at_end: bool) {
        let (lease, ttl) = &self.leases[j];
        let verdict = Verdict {
            start: self.start,
            ttl: *ttl,
            votes: &self.votes[j],
            errors: &self.errors,
            jitter_unit: self.jitter_unit,
            at_end,
        };
        verdict.apply(&self.core, lease);
    }
}

/// One lease's renewal verdict, to apply to it.
struct Verdict<'a> {
    start: Stamp,
    ttl: Duration,
    votes: &'a LeaseVotes,
    errors: &'a [Option<NodeError>],
    /// Where in the backoff's jitter band a retry goes (one per group).
    jitter_unit: f64,
    /// The round ended (deadline or all answered) before a decision.
    at_end: bool,
}

impl Verdict<'_> {
    /// A win moves the deadline (the lease's deadline rule decides); a miss
    /// schedules a retry, or ends the lease when other owners hold too
    /// many nodes.
    fn apply(&self, core: &Core, lease: &Lease) {
        let tally = &self.votes.tally;
        if tally.decision() == Decision::Won {
            let win = Win {
                start: self.start,
                ttl: self.ttl,
                holds: Hold::from_votes(&self.votes.votes),
                renewal: Some((tally.won(), self.votes.healed)),
            };
            match lease.record_win(win) {
                Recorded::Moved => {
                    bump(&core.counters.renewed);
                    telemetry::renewal(true, Some(Stamp::now().saturating_since(self.start)));
                    tracing::debug!(key = %lease.name, won = tally.won(), healed = self.votes.healed, "renewed");
                    return;
                }
                Recorded::Ended => return,
                Recorded::TooLate => {}
            }
        }
        lease.expire_if_due();
        if lease.has_ended() {
            return;
        }
        bump(&core.counters.renew_failed);
        telemetry::renewal(false, None);
        let reports = core.vote_reports(&self.votes.votes, self.errors, self.at_end);
        let keys_gone = tally.contention_rules_out_quorum().then(|| reports.clone());
        let gone = keys_gone.is_some();
        let holds = Hold::from_votes(&self.votes.votes);
        if !lease.record_miss(self.start, self.ttl, Some(holds), keys_gone) || gone {
            return;
        }
        tracing::debug!(key = %lease.name, won = tally.won(), nodes = %reports, "renewal missed the quorum; retrying");
        lease.schedule_retry(reports, self.jitter_unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{LostReason, NodeReports};
    use crate::quorum;

    /// The TTL of the tests' cores ([`Core::offline`]).
    const TTL: Duration = Duration::from_secs(9);

    fn lease(core: &Arc<Core>, start: Stamp) -> Arc<Lease> {
        Arc::new(Lease::held_since(core, start, true))
    }

    #[test]
    fn the_heap_pops_the_earliest_first() {
        let core = Core::offline(|b| b.ttl(TTL));
        let now = Stamp::now();
        let mut heap = BinaryHeap::new();
        for (seq, secs) in [(1, 3), (2, 1), (3, 2), (4, 1)] {
            heap.push(Due {
                at: now.after(Duration::from_secs(secs)),
                seq,
                lease: lease(&core, now),
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|d| d.seq)).collect();
        assert_eq!(order, [2, 4, 3, 1]);
    }

    #[test]
    fn renewal_and_loss_times_follow_the_settings() {
        let core = Core::offline(|b| b.ttl(TTL));
        let start = Stamp::now();
        let lease = lease(&core, start);
        // Renew a third of the TTL after the start; lost a tenth of the TTL
        // before the deadline (9 s − 92 ms drift − 0.9 s).
        assert_eq!(
            lease.next_renewal(),
            Some(start.after(Duration::from_secs(3)))
        );
        assert_eq!(
            lease.loss_time(lease.deadline(), core.config.ttl),
            start.after(Duration::from_millis(8_008))
        );
        // Extended to twice the TTL: interval and margin scale with it.
        assert_eq!(
            lease.next_renewal_after(start, Duration::from_secs(18)),
            Some(start.after(Duration::from_secs(6)))
        );
        assert_eq!(
            lease.loss_time(
                start.after(Duration::from_secs(18)),
                Duration::from_secs(18)
            ),
            start.after(Duration::from_millis(16_200))
        );
    }

    #[test]
    fn max_hold_stops_the_renewals_it_would_pass() {
        let core = Core::offline(|b| b.ttl(TTL).max_hold(Duration::from_secs(4)));
        let start = Stamp::now();
        let lease = lease(&core, start);
        assert!(lease.next_renewal().is_some(), "3 s is within 4 s");
        assert_eq!(
            lease.next_renewal_after(start.after(Duration::from_secs(3)), core.config.ttl),
            None
        );
        let core = Core::offline(|b| b.ttl(TTL).max_hold(Duration::from_secs(2)));
        let lease = self::lease(&core, start);
        assert_eq!(lease.next_renewal(), None);
        assert!(lease.max_hold_reached());
    }

    #[test]
    fn claims_take_due_renewals_once_and_never_pull_a_retry_forward() {
        let core = Core::offline(|b| b.ttl(TTL));
        let now = Stamp::now();
        let horizon = now.after(Duration::from_millis(300));
        let lease = lease(&core, now);
        let flight = Flight::new();

        // Due within the window: pulled forward and claimed.
        lease.set_schedule(Some(now.after(Duration::from_millis(200))), 0);
        assert!(
            matches!(lease.claim_renewal(now, horizon, &flight), RenewalClaim::Renew(ttl) if ttl == core.config.ttl)
        );
        // In flight now: a duplicate entry is dropped.
        assert!(matches!(
            lease.claim_renewal(now, horizon, &flight),
            RenewalClaim::Drop
        ));
        lease.unclaim(&flight);

        // A retry keeps its backoff: put back, not claimed early.
        let retry_at = now.after(Duration::from_millis(50));
        lease.set_schedule(Some(retry_at), 1);
        assert!(
            matches!(lease.claim_renewal(now, horizon, &flight), RenewalClaim::Later(at) if at == retry_at)
        );
        assert!(matches!(
            lease.claim_renewal(retry_at, horizon, &flight),
            RenewalClaim::Renew(_)
        ));
        lease.unclaim(&flight);

        // Moved past the window (renewed meanwhile): a later entry exists.
        lease.set_schedule(Some(now.after(Duration::from_secs(3))), 0);
        assert!(matches!(
            lease.claim_renewal(now, horizon, &flight),
            RenewalClaim::Drop
        ));

        // Ended: dropped for good.
        lease.set_schedule(Some(now), 0);
        lease.end(LostReason::Released);
        assert!(matches!(
            lease.claim_renewal(now, horizon, &flight),
            RenewalClaim::Drop
        ));
        assert!(!lease.is_held());
    }

    #[test]
    fn leases_that_miss_together_retry_together() {
        // Each lease retrying at its own jittered time would send one
        // script call per lease (per node) just when the nodes are slow;
        // a group's misses share one point of the backoff band instead.
        // A band of a whole second: independent draws would spread them.
        let retry = crate::RetryPolicy::default()
            .with_base_delay(Duration::from_secs(1))
            .with_max_delay(Duration::from_secs(1))
            .with_jitter(1.0);
        let core = Core::offline(|b| b.ttl(TTL).retry(retry));
        let now = Stamp::now();
        let leases: Vec<_> = (0..8)
            .map(|_| (lease(&core, now), core.config.ttl))
            .collect();
        let mut round = GroupRound::new(Arc::clone(&core), leases);
        for i in 0..3 {
            let error = NodeError::quarantined(&Arc::from("n"), Duration::from_secs(1));
            round.record(i, Err(error));
        }
        let retries: Vec<_> = round
            .leases
            .iter()
            .map(|(lease, _)| lease.next_renewal().expect("a retry is scheduled"))
            .collect();
        let (first, last) = (retries.iter().min(), retries.iter().max());
        let (Some(first), Some(last)) = (first, last) else {
            panic!("eight leases");
        };
        // Scheduled one after another from `Stamp::now()`: the same delay,
        // so no further apart than the time it took to schedule them.
        assert!(last.saturating_since(*first) < Duration::from_millis(5));
        assert!(*first > now, "a retry keeps its backoff");
    }

    #[test]
    fn a_lease_past_its_loss_time_ends_with_the_last_failure() {
        let core = Core::offline(|b| b.ttl(TTL));
        // Started long enough ago that the loss time has passed.
        let start = Stamp::now().before(Duration::from_millis(8_500));
        let lease = lease(&core, start);
        assert!(lease.is_held(), "before the deadline itself");
        let reports = NodeReports::default();
        lease.set_last_failure(reports.clone());
        lease.expire_if_due();
        let notice = lease.ended_notice().expect("ended");
        assert_eq!(notice.reason, LostReason::RenewalsFailed(reports));
        assert!(notice.at < notice.deadline, "signalled before the deadline");
        assert!(lease.deadline() <= notice.at);
        assert!(!lease.is_held());
        assert_eq!(core.counters.lost.load(Relaxed), 1);
    }

    #[test]
    fn the_deadline_moves_only_before_the_loss_time_and_never_back_to_held() {
        let core = Core::offline(|b| b.ttl(TTL));
        let ttl = core.config.ttl;
        let lease_of = |start: Stamp| lease(&core, start);
        let win = |start: Stamp| Win {
            start,
            ttl,
            holds: vec![Hold::Held; 3],
            renewal: None,
        };
        let now = Stamp::now();
        // A fresh win moves the deadline to its own start + ttl − drift.
        let fresh = lease_of(now.before(Duration::from_secs(2)));
        assert_eq!(fresh.record_win(win(now)), Recorded::Moved);
        assert_eq!(
            fresh.deadline(),
            now.after(quorum::lease(ttl, core.config.drift_factor))
        );
        // A win whose own loss time has passed changes nothing.
        let old_win = now.before(Duration::from_millis(8_500));
        let before = fresh.deadline();
        assert_eq!(fresh.record_win(win(old_win)), Recorded::TooLate);
        assert_eq!(fresh.deadline(), before);
        // Past the lease's loss time: it ends, and stays ended.
        let late = lease_of(now.before(Duration::from_millis(8_500)));
        assert_eq!(late.record_win(win(now)), Recorded::Ended);
        assert!(!late.is_held());
        assert_eq!(late.record_win(win(Stamp::now())), Recorded::Ended);
        // A miss moves it earlier only.
        let missed = lease_of(now);
        assert!(missed.record_miss(now.before(Duration::from_secs(1)), ttl, None, None));
        assert!(missed.deadline() < now.after(quorum::lease(ttl, core.config.drift_factor)));
    }
}
