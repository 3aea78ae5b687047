//! One acquire call of a lock service: a single attempt, or attempts until
//! one wins or the wait budget is spent, with the waits between them (a
//! release notice, a handoff, the holder's remaining TTL or the backoff).
//! What to do after each event is decided by [`crate::attempts`]; this
//! module does the I/O: the attempts ([`crate::acquire`]), the waits
//! ([`crate::wake`]) and the queue places a call gives up.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::acquire::{self, Request};
use crate::attempts::{Attempts, Event, Step};
use crate::clock::{AttemptStarts, instant_in};
use crate::error::{Error, NodeOutcome};
use crate::guard::LockGuard;
use crate::keys::{GrantSlot, KeySet, Ticket};
use crate::lease::Lease;
use crate::release;
use crate::scripts::reply::Reading;
use crate::services::Services;
use crate::stats::bump;
use crate::telemetry::{self, Outcome};
use crate::wake::{Waiter, Woken};

/// Runs a request: one attempt (`wait: None`), or attempts until won or
/// the budget is spent, waiting between attempts for a release notice,
/// a handoff, the holder's remaining TTL or the backoff.
pub(crate) async fn acquire(
    services: &Arc<Services>,
    mut request: Request,
    wait: Option<Duration>,
) -> Result<LockGuard, Error> {
    let config = &services.core.config;
    request.waits = wait.is_some() && config.wake_ups;
    // A waiter queues for the name: its release is announced to the
    // longest waiting call alone, not to a herd. A fair lock service's
    // places also refuse the name to the waiters behind them. When its
    // attempts carry the ticket: see `carry_ticket`.
    let mut ticket = request.waits.then(|| services.wake.ticket(config.fair));
    // A waiter of one name may be granted it: the release that frees it
    // takes it for the call's grant hold (`Grants`), made by the first
    // attempt that carries the ticket.
    if let Some(ticket) = &mut ticket
        && request.keys.len() == 1
    {
        ticket.grant = Some(Arc::default());
    }
    let span = tracing::debug_span!(
        "acquire",
        key = %request.keys,
        wait_ms = wait.map(|w| w.as_millis() as u64),
        attempts = Empty,
        elapsed_us = Empty,
        waited_us = Empty,
    );
    let began = Instant::now();
    let mut waited = Duration::ZERO;
    services.core.first_connects().await;
    let outcome = attempts(services, &mut request, ticket, wait, &mut waited)
        .instrument(span.clone())
        .await;
    let took = began.elapsed();
    span.record("elapsed_us", took.as_micros() as u64);
    span.record("waited_us", waited.as_micros() as u64);
    telemetry::acquire(Outcome::of(&outcome), took, waited);
    outcome
}

/// The attempts of one acquire call, adding the time spent waiting
/// between them to `waited`.
async fn attempts(
    services: &Arc<Services>,
    request: &mut Request,
    ticket: Option<Ticket>,
    wait: Option<Duration>,
    waited: &mut Duration,
) -> Result<LockGuard, Error> {
    let Some(wait) = wait else {
        tracing::Span::current().record("attempts", 1);
        let lease = acquire::attempt(services, request, None).await?;
        return Ok(LockGuard::new(lease, Arc::clone(services)));
    };
    // Every attempt may take a place in the names' waiter queues: given
    // up when this call ends without the lock, or is dropped.
    let keys = Arc::clone(&request.keys);
    let mut place = QueuePlace {
        services,
        keys: &keys,
        ticket: ticket.as_ref(),
    };
    let outcome =
        attempts_until(services, request, ticket.as_ref(), instant_in(wait), waited).await;
    match &outcome {
        // The guard's release gives up what is left of its places.
        Ok(_) => place.ticket = None,
        // No attempt carried the ticket (see `carry_ticket`): no place to
        // give up, and no round for the caller to wait on before its error.
        Err(_) if request.ticket.is_none() => place.ticket = None,
        Err(_) => place.leave().await,
    }
    outcome
}

/// Attempts until one wins, one fails for good, or the budget ending
/// at `budget_end` (or the attempt limit) is spent: the steps of
/// [`Attempts`], with their I/O.
async fn attempts_until(
    services: &Arc<Services>,
    request: &mut Request,
    ticket: Option<&Ticket>,
    budget_end: Instant,
    waited: &mut Duration,
) -> Result<LockGuard, Error> {
    let keys = Arc::clone(&request.keys);
    let queue_id = ticket.map(|t| Arc::clone(&t.id));
    let mut waiting = services
        .wake
        .waiter(&keys, &services.core.counters, queue_id);
    // One name: a release by this lock service may take it for us.
    // A release hands the name over with the lock's TTL: an acquire
    // with a TTL of its own takes its turn by an attempt instead.
    let handoff = keys.len() == 1 && request.ttl == services.core.config.ttl;
    let retry = &services.core.config.retry;
    let budget = (Instant::now(), budget_end);
    let mut event = start(services, &keys, ticket, request);
    let mut grants = Grants::new(ticket, services.core.nodes.len());
    let mut attempts =
        Attempts::new(retry, &keys, request.ticket.is_some(), budget).asking_grants(grants.asks());
    let mut woken = Woken::Retry;
    loop {
        match attempts.next(event, Instant::now(), rand::random::<f64>()) {
            Step::GiveUp(error) => return Err(error),
            Step::Wait(nap) => {
                // Refused at the gate after a wake on other nodes'
                // notices, the attempt met a release on its way to the
                // gate: the waiter watches for the gate's notice.
                let gate = nap.ask_gate.then(|| acquire::gate(services)).flatten();
                let after = nap.after.as_ref();
                let next = handoff.then(|| request.entry(services.core.nodes.len()));
                let wait = waiting.wait(after, nap.backoff, budget_end, next, nap.listen, gate);
                woken = timed(waited, wait).await;
                event = Event::Woke {
                    on_notice: waiting.woke_on_notice(),
                    on_gate_notice: waiting.woke_on_gate_notice(),
                };
            }
            Step::Attempt { gated } => {
                // Every attempt after the first takes its places.
                if attempts.made() > 1 {
                    carry_ticket(request, ticket);
                }
                let woke = std::mem::replace(&mut woken, Woken::Retry);
                let outcome =
                    attempt(services, request, woke, gated, &mut grants, &mut waiting).await;
                tracing::Span::current().record("attempts", attempts.made());
                if let Err(e) = &outcome {
                    grants.forget(e);
                }
                match outcome {
                    // Without its ticket: the next attempt takes its places.
                    Err(e) if e.is_retryable() && ticket.is_some() && request.ticket.is_none() => {
                        event = Event::FailedUnplaced(e);
                    }
                    Err(e) if e.is_retryable() => event = Event::Failed(e),
                    done => return done.map(|lease| LockGuard::new(lease, Arc::clone(services))),
                }
            }
        }
    }
}

/// One attempt of a waiting call: decided on the handoff it was woken
/// with, on the grants it heard, or by a round of its own.
async fn attempt(
    services: &Arc<Services>,
    request: &mut Request,
    woken: Woken,
    gated: bool,
    grants: &mut Grants,
    waiting: &mut Waiter<'_>,
) -> Result<Lease, Error> {
    // A place asks for grants only while the call has its turn among its
    // lock service's waiters, and their notices must find it listening,
    // also one that comes before its first wait.
    let asks = grants.asks() && request.ticket.is_some() && {
        waiting.listen_now();
        waiting.try_turn()
    };
    // Marked before the attempt: a release announced while it runs
    // still wakes the wait after it.
    waiting.mark();
    match woken {
        Woken::HandedOver { entry, first, rest } => {
            acquire::handed_over(services, request, entry, first, rest).await
        }
        Woken::Retry => {
            if let Some(decided) = grants.decide_on_quorum(services, request).await {
                return decided;
            }
            // Only an attempt that asks is numbered and stamped: no grant
            // names another, and a waiting acquire that finds the name free
            // (most) then reads no clock and allocates nothing for it.
            request.attempt = if asks { grants.next_attempt() } else { 0 };
            // (A call that asks for grants is never gated: `Attempts`.)
            let gate = gated.then(|| acquire::gate(services)).flatten();
            acquire::attempt(services, request, gate).await
        }
    }
}

/// What a waiting call heard of the grants releases made to it (see
/// `scripts/release.lua`), and the starts of its asking attempts, which their grant
/// requests name: a quorum of grants wins the call the name with no
/// acquire round of its own ([`acquire::granted`]). A grant short of a
/// quorum still holds its node for the call: the next attempt, under the
/// grant's owner token, counts it as its own hold.
struct Grants {
    /// Where the call's grant hold goes; `None` when it asks for no grant.
    hold: Option<Arc<GrantSlot>>,
    /// The lock service's nodes.
    nodes: usize,
    /// Per node: the attempt whose request it granted, and its counter
    /// (empty until a grant is heard or forgotten: most calls hear none).
    heard: Vec<Option<(u32, Reading)>>,
    /// The start of each attempt that asked for grants, by its number.
    starts: AttemptStarts,
    /// Per node, grants for attempts up to this number are not counted: a
    /// failed attempt's (or grant decision's) rollback gave the grant hold
    /// back there, and a notice may still come from before that (empty as
    /// `heard` is).
    forgotten: Vec<usize>,
}

impl Grants {
    fn new(ticket: Option<&Ticket>, nodes: usize) -> Grants {
        Grants {
            hold: ticket.and_then(|t| t.grant.clone()),
            nodes,
            heard: Vec::new(),
            starts: AttemptStarts::default(),
            forgotten: Vec::new(),
        }
    }

    /// `heard` and `forgotten`, one entry per node.
    fn per_node(&mut self) {
        if self.heard.is_empty() {
            self.heard = vec![None; self.nodes];
            self.forgotten = vec![0; self.nodes];
        }
    }

    /// Whether the call's attempts ask for grants.
    fn asks(&self) -> bool {
        self.hold.is_some()
    }

    /// Forgets the grants heard from the nodes where a failed attempt's
    /// rollback gave the grant hold back (where the attempt won:
    /// `release::rollback`), also those whose notices are still on their
    /// way; every node after a failed decision on grants. A node that
    /// grants a later attempt's request counts again.
    fn forget(&mut self, error: &Error) {
        if self.hold.is_none() {
            return;
        }
        self.per_node();
        let reports = error.node_reports().map(|r| r.as_slice());
        for (i, (heard, forgotten)) in self.heard.iter_mut().zip(&mut self.forgotten).enumerate() {
            let kept = reports.is_some_and(|r| {
                r.get(i)
                    .is_none_or(|r| !matches!(r.outcome, NodeOutcome::Won))
            });
            if !kept {
                *heard = None;
                *forgotten = self.starts.made();
            }
        }
    }

    /// Stamps the start of the attempt about to go, one that asks for
    /// grants (before its own round's stamp: a grant's validity never
    /// counts from later); its number.
    fn next_attempt(&mut self) -> u32 {
        self.starts.stamp_next()
    }

    /// Takes the grants heard since last asked; whether they make a quorum.
    /// A grant that names no attempt of this call is not counted.
    fn hear(&mut self, services: &Services, request: &Request) -> bool {
        let (Some(_), Some(ticket)) = (&self.hold, &request.ticket) else {
            return false;
        };
        let heard = services.wake.take_grants(&request.keys, &ticket.id);
        if heard.is_empty() && self.heard.is_empty() {
            return false;
        }
        self.per_node();
        for granted in heard {
            let (node, attempt) = (granted.node, granted.attempt as usize);
            let Some(&forgotten) = self.forgotten.get(node) else {
                continue;
            };
            if (forgotten + 1..=self.starts.made()).contains(&attempt) {
                self.heard[node] = Some((granted.attempt, granted.fence));
            }
        }
        self.heard.iter().flatten().count() >= services.core.required()
    }

    /// Decides the call on its grants when those heard make a quorum
    /// (`None`: they do not, and the call attempts). Short of the validity,
    /// the grants are rolled back (and forgotten, as after any failed
    /// attempt).
    async fn decide_on_quorum(
        &mut self,
        services: &Services,
        request: &Request,
    ) -> Option<Result<Lease, Error>> {
        if !self.hear(services, request) {
            return None;
        }
        let hold = self.hold.as_ref()?.get()?;
        let ticket = request.ticket.as_ref()?;
        Some(acquire::granted(services, request, (hold, ticket), &self.heard, &self.starts).await)
    }
}

/// Gives `request` its call's `ticket` unless it carries it already.
///
/// When a waiting call's attempts carry its ticket (take places in the
/// names' waiter queues): a fair lock service's from the first attempt (its
/// place is its turn); another's from the first when the name is known to
/// be contended (other waiters of its lock service wait for it, or it was
/// just released to a waiter of another process), else from a second
/// attempt made at once after the first failed (`Event::FailedUnplaced`).
/// An acquire that finds the name free, the common case, so sends no place
/// (three arguments): S2's script time per operation was a tenth higher
/// when every waiting acquire carried one (three A/B pairs).
fn carry_ticket(request: &mut Request, ticket: Option<&Ticket>) {
    if request.ticket.is_none() {
        request.ticket = ticket.cloned();
    }
}

/// How a waiting call starts: at once, behind the other waiters of its
/// lock service, or after stepping aside; and whether its first attempt
/// carries its `ticket` already ([`carry_ticket`]).
fn start(
    services: &Services,
    keys: &KeySet,
    ticket: Option<&Ticket>,
    request: &mut Request,
) -> Event {
    let others_wait = services.wake.has_waiters(keys);
    // This lock service just released the name to a waiter of another
    // process: it lets that waiter take it first (behind its own waiters,
    // it waits anyway).
    let aside = (!others_wait)
        .then(|| services.wake.stepping_aside(keys))
        .flatten();
    let contended = others_wait || aside.is_some();
    if services.core.config.fair || contended {
        carry_ticket(request, ticket);
    }
    match aside {
        Some(pause) => {
            bump(&services.core.counters.stepped_aside);
            Event::StartAside(pause)
        }
        _ => Event::Start { others_wait },
    }
}

/// Runs `wait`, adding the time it took to `waited`.
async fn timed<T>(waited: &mut Duration, wait: impl std::future::Future<Output = T>) -> T {
    let pause = Instant::now();
    let out = wait.await;
    *waited += pause.elapsed();
    out
}

/// A waiting acquire call's places in the waiter queues of its names,
/// given up when the call ends without the lock: at once when it returns
/// an error, in the background when its future is dropped.
struct QueuePlace<'a> {
    services: &'a Arc<Services>,
    keys: &'a Arc<KeySet>,
    /// `None` once given up (or handed to a guard).
    ticket: Option<&'a Ticket>,
}

impl QueuePlace<'_> {
    /// Gives the places up on every node that answers in time.
    async fn leave(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            release::leave_queues(&self.services.core, self.keys, ticket).await;
        }
    }
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            release::leave_queues_in_background(&self.services.core, self.keys, ticket);
        }
    }
}
