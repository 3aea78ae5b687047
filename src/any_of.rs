//! One acquire call that takes **any one** of several lock names: a
//! semaphore's permit (one of its slots) or a read-write lock's read side
//! (one of its reader slots).
//!
//! Each slot is an ordinary lock name, and each try is an ordinary attempt
//! on it ([`acquire::attempt`]): the same fan-out, quorum decision,
//! rollback, epoch check and lease as a mutex. This module only chooses
//! which slot to try, and waits between sweeps:
//!
//! * **A sweep** tries the slots one at a time, in the order given (the
//!   caller starts it at a random slot, so that callers spread out). The
//!   first try goes to every node at once; once one was refused, the rest
//!   are gated ([`acquire::gate`]): refused at the gate node, a try has
//!   written nothing and cost one script call, so a sweep over held slots
//!   costs one call per slot. A slot this lock service just released to a
//!   waiter of another process is left to it for a moment, by a call
//!   that waits while no other call of its lock service waits for the
//!   slots ([`crate::wake::Wake::stepping_aside`], as for a lock).
//!   A slot refused because a waiter is queued ahead (a read-write lock's
//!   waiting writer) ends the sweep: every slot refuses then.
//! * **Between sweeps** the call waits as a mutex waiter does, on the
//!   release notices of *every* slot at once (one waiter registered for all
//!   of them): the first release of any slot, the soonest holder's TTL, or
//!   the backoff. Every try of a waiting call marks the slot it finds held,
//!   so that its release announces itself. Of one lock service, at most as
//!   many calls as there are slots wait and sweep at once ([`Sweepers`]);
//!   the others queue in the process, first come, first served.
//!
//! Permits are never queued across processes: a queued place on one slot
//! would hold back a free slot for a caller that may take another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Semaphore;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::acquire::{self, Request};
use crate::clock::instant_in;
use crate::error::{Error, NodeOutcome};
use crate::guard::LockGuard;
use crate::keys::{KeySet, slot_name};
use crate::services::Services;
use crate::telemetry::{self, Outcome};

/// What one acquire of any of several slots is.
pub(crate) struct AnyOf<'a> {
    /// The caller's name for the whole (the semaphore's or lock's name):
    /// the slots' names derive from it, and errors carry it.
    pub(crate) label: &'a str,
    /// The slots' prefix (`keys::PERMIT_PREFIX` or `keys::RW_PREFIX`).
    pub(crate) prefix: &'static str,
    /// Slots `0..count`.
    pub(crate) count: u32,
    /// Whether the watchdog renews the guard, and the keys' TTL.
    pub(crate) how: (bool, Duration),
    /// `None`: one sweep.
    pub(crate) wait: Option<Duration>,
    /// How many calls of this lock service may wait for these slots at
    /// once ([`Sweepers::for_slots`]).
    pub(crate) active: Arc<Semaphore>,
}

/// A name and its number of slots.
type SlotSet = (Box<str>, u32);

/// Per name and number of slots, how many calls of one lock service may
/// wait and sweep at once: as many as there are slots.
#[derive(Default)]
pub(crate) struct Sweepers {
    limits: Mutex<HashMap<SlotSet, Weak<Semaphore>>>,
}

impl Sweepers {
    /// The limit of the `slots` slots of `name`, shared by the calls that
    /// wait for them now (made afresh once none does).
    pub(crate) fn for_slots(&self, name: &str, slots: u32) -> Arc<Semaphore> {
        let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (Box::from(name), slots);
        if let Some(limit) = limits.get(&key).and_then(Weak::upgrade) {
            return limit;
        }
        // Names nobody waits for any more go before one is added.
        limits.retain(|_, limit| limit.strong_count() > 0);
        let limit = Arc::new(Semaphore::new(slots as usize));
        limits.insert(key, Arc::downgrade(&limit));
        limit
    }
}

/// Takes one of `any.slots`, and says which.
pub(crate) async fn acquire(
    services: &Arc<Services>,
    any: AnyOf<'_>,
) -> Result<(LockGuard, u32), Error> {
    let span = tracing::debug_span!(
        "acquire_any",
        name = any.label,
        slots = any.count,
        wait_ms = any.wait.map(|w| w.as_millis() as u64),
        slot = Empty,
        waited_us = Empty,
    );
    let began = Instant::now();
    let mut waited = Duration::ZERO;
    services.core.first_connects().await;
    let outcome = sweeps(services, &any, &mut waited)
        .instrument(span.clone())
        .await;
    if let Ok((_, slot)) = &outcome {
        span.record("slot", slot);
    }
    span.record("waited_us", waited.as_micros() as u64);
    telemetry::acquire(Outcome::of(&outcome), began.elapsed(), waited);
    outcome
}

/// Sweeps until one slot is won, a try fails for good, or the wait budget
/// (or the retry policy's attempt limit, counted in sweeps) is spent.
async fn sweeps(
    services: &Arc<Services>,
    any: &AnyOf<'_>,
    waited: &mut Duration,
) -> Result<(LockGuard, u32), Error> {
    let order = Order::random(any.count);
    let Some(wait) = any.wait else {
        // One sweep: nothing to listen for, nobody to queue behind.
        return match sweep(services, any, &order, Sweep::once()).await {
            Swept::Won(won) => Ok(won),
            Swept::Failed(error) => Err(error),
            Swept::Refused(refused) => Err(refused.error),
        };
    };
    let began = Instant::now();
    let budget_end = instant_in(wait);
    let names: Vec<String> = order.slots().map(|slot| any.slot_name(slot)).collect();
    let every_slot = KeySet::new(&names)?;
    // As for a lock: a slot released to another process's waiter is left
    // to it only when no waiter of this lock service waits for the slots
    // (the release may have told one of them).
    let others_wait = services.wake.has_waiters(&every_slot);
    let counters = &services.core.counters;
    let mut waiter = services
        .wake
        .waiter(&every_slot, counters, None)
        .without_turns();
    // At most as many calls of this service as there are slots wait and
    // sweep at once (the rest queue here, first come, first served): one
    // sweeper would let the slots change hands one at a time, and every
    // waiter sweeping on every release is a herd. Queued behind others,
    // the slots change hands now, and a release during the first sweep
    // must not go unheard (the slot would sit free until the backoff ends).
    if any.active.available_permits() == 0 {
        waiter.listen_now();
    }
    let queued = Arc::clone(&any.active).acquire_owned();
    let pause = Instant::now();
    let _active = tokio::time::timeout_at(budget_end, queued).await;
    *waited += pause.elapsed();
    let retry = &services.core.config.retry;
    let mut made = 0;
    loop {
        waiter.mark();
        let how = Sweep {
            gated: made > 0,
            budget_end: Some(budget_end),
            step_aside: !others_wait,
        };
        let refused = match sweep(services, any, &order, how).await {
            Swept::Won(won) => return Ok(won),
            Swept::Failed(error) => return Err(error),
            Swept::Refused(refused) => refused,
        };
        made += 1;
        let now = Instant::now();
        let out_of_attempts = retry.max_attempts().is_some_and(|max| made >= max);
        if out_of_attempts || now >= budget_end {
            return Err(Error::WaitBudgetExhausted {
                key: any.label.to_owned(),
                attempts: made,
                waited: now.saturating_duration_since(began),
                last: Box::new(refused.error),
            });
        }
        let mut backoff = retry.delay(made, rand::random::<f64>());
        if let Some(pause) = refused.aside {
            backoff = backoff.min(pause);
        }
        let pause = Instant::now();
        waiter
            .wait(Some(&refused.error), backoff, budget_end, None, true, None)
            .await;
        *waited += pause.elapsed();
    }
}

impl AnyOf<'_> {
    fn slot_name(&self, slot: u32) -> String {
        slot_name(self.prefix, self.label, slot)
    }

    /// The request of one try of `slot`: a waiting call's marks the slot
    /// where it finds it held (its release then announces itself); no
    /// try queues.
    fn request(&self, services: &Services, slot: u32) -> Result<Request, Error> {
        let mut request = Request::new(&[self.slot_name(slot)], None, self.how)?;
        request.waits = self.wait.is_some() && services.core.config.wake_ups;
        Ok(request)
    }
}

/// The order a call tries the slots in: from a random one, so that
/// callers spread out.
struct Order {
    start: u32,
    count: u32,
}

impl Order {
    fn random(count: u32) -> Order {
        Order {
            start: rand::random::<u32>() % count.max(1),
            count,
        }
    }

    fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count).map(|i| (self.start + i) % self.count)
    }
}

/// How one sweep goes.
struct Sweep {
    /// Every try asks the gate first (not only after a refusal).
    gated: bool,
    /// A waiting call's sweep stops here (after at least one try), so
    /// that the call overruns its budget by one attempt at most, as a
    /// lock's does.
    budget_end: Option<Instant>,
    /// Leave a slot this lock service just released to another process's
    /// waiter (a waiting call, when no other of its lock service waits).
    step_aside: bool,
}

impl Sweep {
    /// The one sweep of a call that does not wait.
    fn once() -> Sweep {
        Sweep {
            gated: false,
            budget_end: None,
            step_aside: false,
        }
    }
}

/// How one sweep ended.
enum Swept {
    Won((LockGuard, u32)),
    /// A try failed with an error that retrying does not mend.
    Failed(Error),
    Refused(Refused),
}

/// Every slot refused: why, for the wait and the caller.
struct Refused {
    /// Every refusal was contention: one under the caller's name, whose
    /// `free_in` is the soonest any slot frees; otherwise the first other
    /// error (nodes failing tell more than contention).
    error: Error,
    /// Slots left to other processes' waiters, and for how long at most.
    aside: Option<Duration>,
}

/// One pass over the slots.
async fn sweep(services: &Arc<Services>, any: &AnyOf<'_>, order: &Order, how: Sweep) -> Swept {
    let mut soonest: Option<Error> = None;
    let mut other: Option<Error> = None;
    let mut aside: Option<Duration> = None;
    let mut gated = how.gated;
    for (tried, slot) in order.slots().enumerate() {
        if tried > 0 && how.budget_end.is_some_and(|end| Instant::now() >= end) {
            break;
        }
        let request = match any.request(services, slot) {
            Ok(request) => request,
            Err(error) => return Swept::Failed(error),
        };
        let pause = how
            .step_aside
            .then(|| services.wake.stepping_aside(&request.keys))
            .flatten();
        if let Some(pause) = pause {
            aside = Some(aside.map_or(pause, |a| a.max(pause)));
            continue;
        }
        let gate = gated.then(|| acquire::gate(services)).flatten();
        match acquire::attempt(services, &request, gate).await {
            Ok(lease) => return Swept::Won((LockGuard::new(lease, Arc::clone(services)), slot)),
            Err(error) if !error.is_retryable() => return Swept::Failed(error),
            Err(error) => {
                gated = true;
                let queued = queued_ahead(&error);
                match &error {
                    Error::Contended { .. } => soonest = Some(sooner(soonest, error)),
                    _ => {
                        other.get_or_insert(error);
                    }
                }
                if queued {
                    break;
                }
            }
        }
    }
    let error = other.or(soonest).unwrap_or_else(|| Error::Contended {
        key: String::new(),
        free_in: aside,
        nodes: Default::default(),
    });
    Swept::Refused(Refused {
        error: error.renamed(any.label),
        aside,
    })
}

/// Whether a refusal came from a waiter queued ahead on some node: a
/// read-write lock's waiting writer, queued on every reader slot.
fn queued_ahead(error: &Error) -> bool {
    error.node_reports().is_some_and(|r| {
        r.iter()
            .any(|r| matches!(r.outcome, NodeOutcome::WaitersAhead))
    })
}

/// The contention error whose slot frees soonest (a slot without expiry
/// frees never).
fn sooner(kept: Option<Error>, new: Error) -> Error {
    let free_in = |e: &Error| match e {
        Error::Contended { free_in, .. } => free_in.unwrap_or(Duration::MAX),
        _ => Duration::MAX,
    };
    match kept {
        Some(kept) if free_in(&kept) <= free_in(&new) => kept,
        _ => new,
    }
}
