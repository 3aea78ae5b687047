//! The watchdog: keeps a held lock alive while its holder works, and says so
//! at once when it can no longer prove the lock is held.
//!
//! Turn it on for every guard with
//! [`LockConfigBuilder::watchdog`](crate::LockConfigBuilder::watchdog), or
//! use [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive), which
//! always uses it.
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
//!   quorum: [`is_held`](crate::LockGuard::is_held) turns false, every
//!   [`lost`](crate::LockGuard::lost) future resolves with a
//!   [`LossNotice`](crate::LossNotice), the
//!   [cancellation token](crate::LockGuard::cancellation_token) is cancelled,
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
//! * The loss notice needs the Tokio runtime to run; the deadline does not.
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

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::clock::Stamp;
use crate::error::{LostReason, NodeError, NodeOutcome, NodeReport, NodeReports};
use crate::fanout::{End, fan_out};
use crate::guard::holds;
use crate::lease::{Lease, Renewal, Round};
use crate::lock::{LockShared, ttl_millis};
use crate::node::{RenewItem, RenewReply};
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
    batch: Vec<(Arc<Lease>, Duration)>,
    round: Round,
    next: Option<Stamp>,
}

/// Schedules a watched lease's next renewal and its loss time, starting the
/// watchdog task if it is not running.
pub(crate) fn watch(lease: &Arc<Lease>) {
    let (renew_at, loss_at) = {
        let state = lease.state();
        if state.ended.is_some() {
            return;
        }
        (
            state.next_renewal,
            lease.loss_time(state.deadline, state.ttl),
        )
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
    push(|q| &mut q.losses, loss_at);
    if let Some(at) = renew_at {
        push(|q| &mut q.renewals, at);
    }
    let new_earliest = renew_at.map_or(loss_at, |r| r.min(loss_at));
    if !queue.running {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %lease.key, "no Tokio runtime: the watchdog cannot run; the guard expires at its deadline");
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
    /// (early by at most the coalescing window, which is harmless). Marks
    /// the task stopped when nothing is left.
    fn take_due(&self, now: Stamp, horizon: Stamp) -> Tick {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut losses = Vec::new();
        while queue.losses.peek().is_some_and(|d| d.at <= now) {
            if let Some(due) = queue.losses.pop() {
                losses.push(due.lease);
            }
        }
        let round = Round::new();
        let mut batch = Vec::new();
        while queue.renewals.peek().is_some_and(|d| d.at <= horizon) {
            let Some(due) = queue.renewals.pop() else {
                break;
            };
            if let Some(ttl) = claim_for_renewal(&due.lease, horizon, &round) {
                batch.push((due.lease, ttl));
            }
        }
        let next = queue.next_due();
        if next.is_none() {
            queue.running = false;
        }
        Tick {
            losses,
            batch,
            round,
            next,
        }
    }
}

/// Puts a lease into `round` if its renewal is due by `horizon` and nothing
/// else is in flight for it; returns the TTL to renew with.
fn claim_for_renewal(lease: &Lease, horizon: Stamp, round: &Round) -> Option<Duration> {
    let mut state = lease.state();
    // In flight: that round (an extend, another batch) reschedules when it
    // ends. A later renewal time: a later entry exists.
    if state.ended.is_some() || state.in_flight.is_some() || state.next_renewal? > horizon {
        return None;
    }
    state.in_flight = Some(round.clone());
    Some(state.ttl)
}

/// The watchdog task: sleeps until the next renewal or loss is due, sends
/// each tick's renewals as one batch, and ends when nothing is scheduled or
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
        if !tick.batch.is_empty() {
            let span = tracing::debug_span!("renew", locks = tick.batch.len());
            tokio::spawn(renew_batch(Arc::clone(&lock), tick.round, tick.batch).instrument(span));
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

/// One lease's part of a batch: its votes so far and whether it is decided.
struct LeaseVotes {
    tally: Tally,
    votes: Vec<Option<Vote>>,
    healed: usize,
    decided: bool,
}

/// Renews every lease of `batch` on every node: one renew call per node
/// (chunked), each lease decided on its own tally as soon as its quorum is
/// won or out of reach.
async fn renew_batch(lock: Arc<LockShared>, round: Round, batch: Vec<(Arc<Lease>, Duration)>) {
    let n = lock.nodes.len();
    let config = &lock.config;
    let items: Arc<[RenewItem]> = batch
        .iter()
        .map(|(lease, ttl)| RenewItem {
            key: Arc::clone(&lease.key),
            token: Arc::clone(&lease.token),
            ttl_ms: ttl_millis(*ttl),
        })
        .collect();
    lock.counters
        .renewals
        .fetch_add(batch.len() as u64, Relaxed);
    let mut rounds: Vec<LeaseVotes> = batch
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
                        Vote::Won
                    }
                    Some(RenewReply::NotOurs) => Vote::Contended,
                    None => Vote::Failed,
                };
                lease_votes.tally.record(vote);
                lease_votes.votes[i] = Some(vote);
                if !lease_votes.decided && lease_votes.tally.decision() != Decision::Pending {
                    lease_votes.decided = true;
                    let (lease, ttl) = &batch[j];
                    conclude(&lock, lease, *ttl, start, lease_votes, &errors, false);
                }
            }
            // Keep listening after every lease is decided: later replies
            // tell the guards which nodes they hold.
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
    for ((lease, ttl), lease_votes) in batch.iter().zip(&rounds) {
        if !lease_votes.decided {
            conclude(&lock, lease, *ttl, start, lease_votes, &errors, true);
        } else {
            let mut state = lease.state();
            if state.ended.is_none() && lease_votes.tally.decision() == Decision::Won {
                state.holds = holds(&lease_votes.votes);
            }
        }
        lease.unclaim(&round);
    }
    round.done.cancel();
    for (lease, _) in &batch {
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
        lock.counters.healed.fetch_add(votes.healed as u64, Relaxed);
        tracing::debug!(key = %lease.key, won = votes.tally.won(), healed = votes.healed, "renewed");
        return;
    }
    bump(&lock.counters.renew_failed);
    let reports = reports(lock, &votes.votes, errors, at_end);
    state.holds = holds(&votes.votes);
    if votes.tally.contention_rules_out_quorum() {
        lease.end(state, LostReason::KeysGone(reports));
        return;
    }
    tracing::debug!(key = %lease.key, won = votes.tally.won(), nodes = %reports, "renewal missed the quorum; retrying");
    state.failures = state.failures.saturating_add(1);
    state.last_failure = Some(reports);
    let retry_at = now.after(config.retry.delay(state.failures, rand::random::<f64>()));
    let within_hold = config
        .max_hold
        .is_none_or(|max| retry_at <= lease.acquired.after(max));
    state.max_hold_reached |= !within_hold;
    state.next_renewal = (retry_at < old_loss && within_hold).then_some(retry_at);
}

/// Each node's outcome for one lease of a renewal round.
fn reports(
    lock: &LockShared,
    votes: &[Option<Vote>],
    errors: &[Option<NodeError>],
    at_end: bool,
) -> NodeReports {
    let outcomes = lock
        .nodes
        .iter()
        .zip(votes.iter().zip(errors))
        .map(|(node, (vote, error))| NodeReport {
            node: node.name().to_string(),
            outcome: match (vote, error) {
                (Some(Vote::Won), _) => NodeOutcome::Won,
                (Some(Vote::Contended), _) => NodeOutcome::NotHeld,
                (Some(Vote::Failed), Some(e)) => NodeOutcome::Failed(e.clone()),
                (Some(Vote::Failed), None) | (None, _) if at_end => {
                    NodeOutcome::Failed(lock.timeout_detail(node))
                }
                _ => NodeOutcome::NoReplyBeforeDecision,
            },
        })
        .collect();
    NodeReports(outcomes)
}
