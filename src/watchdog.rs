//! The watchdog: keeps a held lock alive while its holder works, and says so
//! at once when it can no longer prove the lock is held.
//!
//! Turn it on for every guard with
//! [`LockConfigBuilder::watchdog`](crate::LockConfigBuilder::watchdog), or
//! use [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive), which
//! always uses it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let testbed = quorumlock_testbed::Testbed::start(3)?;
//! use std::time::Duration;
//! use quorumlock::{LockConfig, MultiLock};
//!
//! let config = LockConfig::builder()
//!     .nodes(testbed.urls())
//!     .ttl(Duration::from_secs(1))
//!     .watchdog(true)
//!     .build()?;
//! let lock = MultiLock::new(config);
//! let guard = lock.acquire("reindex", Duration::from_secs(1)).await?;
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
//!   (`start + ttl − drift`), exactly like an acquire (DESIGN.md, rules 1, 3
//!   and 4). It decides at the quorum: a paused or dead node never delays
//!   the verdict.
//! * **Heals**: the renew script resets the TTL where the key carries our
//!   token and re-takes the key, with the same token and TTL, where it is
//!   absent (a node that restarted empty, a promoted replica). A key held by
//!   another owner is left alone. The guard's
//!   [`nodes`](crate::LockGuard::nodes) always show what the last round found.
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
//!   fencing tokens cover this case (they come with a later release).
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

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use crate::clock::Stamp;
use crate::error::{LostReason, NodeError};
use crate::fanout::{End, fan_out};
use crate::guard::holds;
use crate::lease::{Lease, Renewal, Round};
use crate::lock::{LockShared, ttl_millis};
use crate::node::{RENEW_CHUNK, RenewItem, RenewReply};
use crate::quorum::{self, Decision, Tally, Vote};
use crate::stats::bump;

/// The renewal schedule of one lock service.
#[derive(Default)]
pub(crate) struct Watchdog {
    queue: Mutex<Queue>,
    /// Shared with the task, which must not keep the lock service alive.
    wake: Arc<Notify>,
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
    /// per node each, with its own round.
    groups: Vec<Group>,
    next: Option<Stamp>,
}

/// Leases renewed together: one renew call per node, one start time.
struct Group {
    round: Round,
    leases: Vec<(Arc<Lease>, Duration)>,
    /// Lock keys of those leases (a multi-key guard counts each).
    keys: usize,
}

/// Groups of one tick that may be undecided at once. Each is one call per
/// node; a few in flight keep every node busy without queuing a whole tick
/// of calls (and their buffers) at once behind one another.
const GROUPS_IN_FLIGHT: usize = 4;

/// What to do with a renewal entry that came up.
enum Claim {
    /// Renew it in this round, with this TTL.
    Renew(Duration),
    /// Not due yet (a retry is never pulled forward): put back at this time.
    Later(Stamp),
    /// Nothing to do: ended, in flight elsewhere, or a later entry exists.
    Drop,
}

/// Schedules a watched lease's next renewal and its loss time, starting the
/// watchdog task if it is not running.
pub(crate) fn watch(lease: &Arc<Lease>) {
    let (renew_at, loss_at) = {
        let mut state = lease.state();
        if state.ended.is_some() {
            return;
        }
        let loss_at = lease.loss_time(state.deadline, state.ttl);
        // One loss entry per loss time: a round that did not move the
        // deadline adds none.
        let new_loss = (state.loss_scheduled != Some(loss_at)).then_some(loss_at);
        state.loss_scheduled = Some(loss_at);
        (state.next_renewal, new_loss)
    };
    let shared = &lease.lock;
    let watchdog = &shared.watchdog;
    let mut queue = watchdog
        .queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let earliest = queue.next_due();
    let mut push = |heap: fn(&mut Queue) -> &mut BinaryHeap<Due>, at: Stamp| {
        queue.seq += 1;
        let seq = queue.seq;
        heap(&mut queue).push(Due {
            at,
            seq,
            lease: Arc::clone(lease),
        });
    };
    if let Some(at) = loss_at {
        push(|q| &mut q.losses, at);
    }
    if let Some(at) = renew_at {
        push(|q| &mut q.renewals, at);
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
        runtime.spawn(run(Arc::downgrade(shared), Arc::clone(&watchdog.wake)));
    } else if earliest.is_none_or(|e| new_earliest < e) {
        drop(queue);
        watchdog.wake.notify_one();
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
}

impl Watchdog {
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
                    round: Round::new(),
                    leases: Vec::new(),
                    keys: 0,
                });
            }
            let Some(group) = groups.last_mut() else {
                break;
            };
            match claim_for_renewal(&due.lease, now, horizon, &group.round) {
                Claim::Renew(ttl) => {
                    group.keys += due.lease.hold.keys.len();
                    group.leases.push((due.lease, ttl));
                }
                Claim::Later(at) => later.push(Due { at, ..due }),
                Claim::Drop => {}
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

/// Decides what to do with a lease whose renewal entry came up, and puts it
/// into `round` if it is to be renewed now.
fn claim_for_renewal(lease: &Lease, now: Stamp, horizon: Stamp, round: &Round) -> Claim {
    let mut state = lease.state();
    // In flight: that round (an extend, another group) reschedules when it
    // ends.
    if state.ended.is_some() || state.in_flight.is_some() {
        return Claim::Drop;
    }
    let Some(next) = state.next_renewal else {
        return Claim::Drop;
    };
    // A retry keeps its backoff: pulling it into this tick would turn a
    // failing round into a tight loop.
    let due_by = if state.failures > 0 { now } else { horizon };
    if next > due_by {
        // Moved later (a renewal or extend pushed its own entry), or a
        // retry not yet due.
        return if state.failures > 0 && next <= horizon {
            Claim::Later(next)
        } else {
            Claim::Drop
        };
    }
    state.in_flight = Some(round.clone());
    Claim::Renew(state.ttl)
}

/// The watchdog task: sleeps until the next renewal or loss is due, sends
/// each tick's renewals in groups, and ends when nothing is scheduled or
/// the lock service is gone.
async fn run(shared: Weak<LockShared>, wake: Arc<Notify>) {
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        // Registered before the queue is read, so a push in between wakes us.
        notified.as_mut().enable();
        let Some(lock) = shared.upgrade() else {
            return;
        };
        let watchdog = &lock.watchdog;
        let now = Stamp::now();
        let window = lock.config.renew_interval / 10;
        let tick = watchdog.take_due(now, now.after(window));
        for lease in &tick.losses {
            lease.expire_if_due();
        }
        if !tick.groups.is_empty() {
            tokio::spawn(renew_tick(Arc::clone(&lock), tick.groups));
        }
        drop(lock);
        let Some(next) = tick.next else {
            return;
        };
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(next.to_instant()) => {}
        }
    }
}

/// One lease's part of a group: its votes so far and whether it is decided.
struct LeaseVotes {
    tally: Tally,
    votes: Vec<Option<Vote>>,
    healed: usize,
    decided: bool,
}

/// Renews one tick's groups, at most [`GROUPS_IN_FLIGHT`] undecided at once.
async fn renew_tick(lock: Arc<LockShared>, groups: Vec<Group>) {
    let permits = Arc::new(Semaphore::new(GROUPS_IN_FLIGHT));
    for group in groups {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let span = tracing::debug_span!("renew", locks = group.leases.len());
        tokio::spawn(renew_group(Arc::clone(&lock), group, permit).instrument(span));
    }
}

/// Renews every lease of a group on every node (one renew call per node),
/// each lease decided on its own tally as soon as its quorum is won or out
/// of reach. The permit is given back once every lease is decided; the
/// round keeps listening until the node timeout for late replies, which
/// tell the guards which nodes they hold.
async fn renew_group(lock: Arc<LockShared>, group: Group, permit: OwnedSemaphorePermit) {
    let Group {
        round, mut leases, ..
    } = group;
    // A lease released while this group waited for its turn is not renewed:
    // its release may already be on the wire (it waits for this round only
    // up to a bound), and a renewal sent after it would re-create the key.
    leases.retain(|(lease, _)| {
        let ended = lease.state().ended.is_some();
        if ended {
            lease.unclaim(&round);
        }
        !ended
    });
    if leases.is_empty() {
        round.done.cancel();
        return;
    }
    let mut permit = Some(permit);
    let mut undecided = leases.len();
    let n = lock.nodes.len();
    let config = &lock.config;
    let items: Arc<[RenewItem]> = leases
        .iter()
        .map(|(lease, ttl)| RenewItem {
            hold: lease.hold.clone(),
            ttl_ms: ttl_millis(*ttl),
        })
        .collect();
    lock.counters
        .renewals
        .fetch_add(leases.len() as u64, Relaxed);
    let mut rounds: Vec<LeaseVotes> = leases
        .iter()
        .map(|_| LeaseVotes {
            tally: Tally::new(n, config.required_nodes()),
            votes: vec![None; n],
            healed: 0,
            decided: false,
        })
        .collect();
    let mut errors: Vec<Option<NodeError>> = vec![None; n];
    let start = Stamp::now();
    let (end, unfinished) = fan_out(
        n,
        Instant::now() + config.node_timeout,
        |i| lock.nodes[i].renew(Arc::clone(&items)),
        |i, reply| {
            let replies = match reply {
                Ok(replies) => Some(replies),
                Err(e) => {
                    errors[i] = Some(e);
                    None
                }
            };
            for (j, lease_votes) in rounds.iter_mut().enumerate() {
                let vote = match replies.as_ref().and_then(|r| r.get(j)) {
                    Some(RenewReply::Renewed) => Vote::Won,
                    Some(RenewReply::Healed) => {
                        lease_votes.healed += 1;
                        bump(&lock.counters.healed);
                        Vote::Won
                    }
                    Some(RenewReply::NotOurs) => Vote::Contended,
                    None => Vote::Failed,
                };
                lease_votes.tally.record(vote);
                lease_votes.votes[i] = Some(vote);
                if !lease_votes.decided && lease_votes.tally.decision() != Decision::Pending {
                    lease_votes.decided = true;
                    undecided -= 1;
                    let (lease, ttl) = &leases[j];
                    conclude(&lock, lease, *ttl, start, lease_votes, &errors, false);
                }
            }
            if undecided == 0 {
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
    if end == End::DeadlinePassed {
        for (i, node) in lock.nodes.iter().enumerate() {
            if rounds.iter().all(|r| r.votes[i].is_none()) {
                bump(&node.counters.timeouts);
            }
        }
    }
    for ((lease, ttl), lease_votes) in leases.iter().zip(&rounds) {
        if !lease_votes.decided {
            conclude(&lock, lease, *ttl, start, lease_votes, &errors, true);
        } else {
            // Replies after the decision: the guard's view of its nodes
            // (and this renewal's counts) include them.
            let mut state = lease.state();
            if state.ended.is_none() && lease_votes.tally.decision() == Decision::Won {
                state.holds = holds(&lease_votes.votes);
                if let Some(renewal) = state.last_renewal.as_mut().filter(|r| r.started == start) {
                    renewal.held = lease_votes.tally.won();
                    renewal.healed = lease_votes.healed;
                }
            }
        }
        lease.unclaim(&round);
    }
    round.done.cancel();
    for (lease, _) in &leases {
        watch(lease);
    }
}

/// Applies one lease's renewal verdict.
fn conclude(
    lock: &LockShared,
    lease: &Lease,
    ttl: Duration,
    start: Stamp,
    votes: &LeaseVotes,
    errors: &[Option<NodeError>],
    at_end: bool,
) {
    let config = &lock.config;
    let now = Stamp::now();
    let mut state = lease.state();
    if state.ended.is_some() {
        return;
    }
    let old_loss = lease.loss_time(state.deadline, state.ttl);
    if now >= old_loss {
        drop(state);
        lease.expire_if_due();
        return;
    }
    let new_deadline = start.after(quorum::lease(ttl, config.drift_factor));
    if votes.tally.decision() == Decision::Won && now < lease.loss_time(new_deadline, ttl) {
        // Another TTL set meanwhile (an extend): the nodes may carry either.
        state.deadline = if state.ttl == ttl {
            new_deadline
        } else {
            state.deadline.min(new_deadline)
        };
        state.holds = holds(&votes.votes);
        state.failures = 0;
        state.last_renewal = Some(Renewal {
            started: start,
            took: now.saturating_since(start),
            held: votes.tally.won(),
            healed: votes.healed,
        });
        state.next_renewal = lease.next_renewal_after(start, state.ttl);
        state.max_hold_reached |= state.next_renewal.is_none();
        drop(state);
        bump(&lock.counters.renewed);
        tracing::debug!(key = %lease.name, won = votes.tally.won(), healed = votes.healed, "renewed");
        return;
    }
    bump(&lock.counters.renew_failed);
    let reports = lock.vote_reports(&votes.votes, errors, at_end);
    state.holds = holds(&votes.votes);
    if votes.tally.contention_rules_out_quorum() {
        lease.end(state, LostReason::KeysGone(reports));
        return;
    }
    tracing::debug!(key = %lease.name, won = votes.tally.won(), nodes = %reports, "renewal missed the quorum; retrying");
    state.failures = state.failures.saturating_add(1);
    state.last_failure = Some(reports);
    let retry_at = now.after(config.retry.delay(state.failures, rand::random::<f64>()));
    let within_hold = config
        .max_hold
        .is_none_or(|max| retry_at <= lease.acquired.after(max));
    state.max_hold_reached |= !within_hold;
    state.next_renewal = (retry_at < old_loss && within_hold).then_some(retry_at);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LockConfig;
    use crate::guard::Hold;
    use crate::lock::MultiLock;

    /// A lock service that never connects (no runtime): enough for the
    /// schedule, which does no I/O.
    fn lock(
        configure: impl FnOnce(crate::LockConfigBuilder) -> crate::LockConfigBuilder,
    ) -> Arc<LockShared> {
        let config = configure(
            LockConfig::builder()
                .nodes([
                    "redis://127.0.0.1:1",
                    "redis://127.0.0.1:2",
                    "redis://127.0.0.1:3",
                ])
                .ttl(Duration::from_secs(9)),
        )
        .build()
        .expect("valid");
        Arc::clone(MultiLock::new(config).shared())
    }

    fn lease(lock: &Arc<LockShared>, start: Stamp) -> Arc<Lease> {
        let deadline = start.after(quorum::lease(lock.config.ttl, lock.config.drift_factor));
        let keys = crate::keys::KeySet::new(&["k"]).expect("valid name");
        Arc::new(Lease::new(
            Arc::clone(lock),
            crate::keys::HoldId::new(keys, Arc::from("t")),
            start,
            deadline,
            vec![Hold::Held; 3],
            true,
            Arc::default(),
            Box::new([]),
        ))
    }

    #[test]
    fn the_heap_pops_the_earliest_first() {
        let lock = lock(|b| b);
        let now = Stamp::now();
        let mut heap = BinaryHeap::new();
        for (seq, secs) in [(1, 3), (2, 1), (3, 2), (4, 1)] {
            heap.push(Due {
                at: now.after(Duration::from_secs(secs)),
                seq,
                lease: lease(&lock, now),
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|d| d.seq)).collect();
        assert_eq!(order, [2, 4, 3, 1]);
    }

    #[test]
    fn renewal_and_loss_times_follow_the_settings() {
        let lock = lock(|b| b);
        let start = Stamp::now();
        let lease = lease(&lock, start);
        let state = lease.state();
        // Renew a third of the TTL after the start; lost a tenth of the TTL
        // before the deadline (9 s − 92 ms drift − 0.9 s).
        assert_eq!(
            state.next_renewal,
            Some(start.after(Duration::from_secs(3)))
        );
        assert_eq!(
            lease.loss_time(state.deadline, state.ttl),
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
        let lock = lock(|b| b.max_hold(Duration::from_secs(4)));
        let start = Stamp::now();
        let lease = lease(&lock, start);
        assert!(lease.state().next_renewal.is_some(), "3 s is within 4 s");
        assert_eq!(
            lease.next_renewal_after(start.after(Duration::from_secs(3)), lock.config.ttl),
            None
        );
        let lock = self::lock(|b| b.max_hold(Duration::from_secs(2)));
        let lease = self::lease(&lock, start);
        let state = lease.state();
        assert_eq!(state.next_renewal, None);
        assert!(state.max_hold_reached);
    }

    #[test]
    fn claims_take_due_renewals_once_and_never_pull_a_retry_forward() {
        let lock = lock(|b| b);
        let now = Stamp::now();
        let horizon = now.after(Duration::from_millis(300));
        let lease = lease(&lock, now);
        let round = Round::new();

        // Due within the window: pulled forward and claimed.
        lease.state().next_renewal = Some(now.after(Duration::from_millis(200)));
        assert!(
            matches!(claim_for_renewal(&lease, now, horizon, &round), Claim::Renew(ttl) if ttl == lock.config.ttl)
        );
        // In flight now: a duplicate entry is dropped.
        assert!(matches!(
            claim_for_renewal(&lease, now, horizon, &round),
            Claim::Drop
        ));
        lease.unclaim(&round);

        // A retry keeps its backoff: put back, not claimed early.
        let retry_at = now.after(Duration::from_millis(50));
        {
            let mut state = lease.state();
            state.failures = 1;
            state.next_renewal = Some(retry_at);
        }
        assert!(
            matches!(claim_for_renewal(&lease, now, horizon, &round), Claim::Later(at) if at == retry_at)
        );
        assert!(matches!(
            claim_for_renewal(&lease, retry_at, horizon, &round),
            Claim::Renew(_)
        ));
        lease.unclaim(&round);

        // Moved past the window (renewed meanwhile): a later entry exists.
        {
            let mut state = lease.state();
            state.failures = 0;
            state.next_renewal = Some(now.after(Duration::from_secs(3)));
        }
        assert!(matches!(
            claim_for_renewal(&lease, now, horizon, &round),
            Claim::Drop
        ));

        // Ended: dropped for good.
        lease.state().next_renewal = Some(now);
        lease.end(lease.state(), LostReason::Released);
        assert!(matches!(
            claim_for_renewal(&lease, now, horizon, &round),
            Claim::Drop
        ));
        assert!(!lease.is_held());
    }

    #[test]
    fn a_lease_past_its_loss_time_ends_with_the_last_failure() {
        let lock = lock(|b| b);
        // Started long enough ago that the loss time has passed.
        let start = Stamp::now().before(Duration::from_millis(8_500));
        let lease = lease(&lock, start);
        assert!(lease.is_held(), "before the deadline itself");
        let reports = crate::error::NodeReports(Vec::new());
        lease.state().last_failure = Some(reports.clone());
        lease.expire_if_due();
        let state = lease.state();
        let notice = state.ended.clone().expect("ended");
        assert_eq!(notice.reason, LostReason::RenewalsFailed(reports));
        assert!(notice.at < notice.deadline, "signalled before the deadline");
        assert!(state.deadline <= notice.at);
        drop(state);
        assert!(!lease.is_held());
        assert_eq!(lock.counters.lost.load(Relaxed), 1);
    }
}
