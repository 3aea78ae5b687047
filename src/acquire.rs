//! One acquire attempt, from the request to the guard or the error:
//!
//! 1. Stamp the start, then send the acquire script to every node at once,
//!    each call bounded by the node timeout ([`crate::fanout`]).
//! 2. Tally the replies as they arrive and decide as soon as the quorum is
//!    won or out of reach ([`crate::quorum`]).
//! 3. Won with more than the minimum validity: a lease and its guard
//!    ([`crate::lease`], [`crate::guard`]). Otherwise: roll back on every
//!    node the attempt may have written to ([`crate::release`]) and say why.
//!
//! A waiter that a release handed the name to ([`crate::wake`]) decides its
//! attempt the same way, on the answers the releaser forwards.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OnceCell, mpsc};
use tokio::time::Instant;
use tracing::field::Empty;

use crate::clock::{AttemptStarts, Stamp};
use crate::core::ttl_millis;
use crate::error::{Error, NodeError, NodeOutcome};
use crate::fanout::{End, QuorumRound, Unfinished};
use crate::keys::{Entry, GrantHold, KeySet, Ticket};
use crate::lease::{Grant, Hold, Lease};
use crate::node::Cutoff;
use crate::owner::Owner;
use crate::quorum::{self, Decision};
use crate::release;
use crate::scripts::acquire::Acquire;
use crate::scripts::acquire::AcquireReply;
use crate::scripts::reply::Reading;
use crate::services::Services;
use crate::stats::bump;
use crate::telemetry::{self, Outcome};
use crate::wake::HandoffEvent;

/// The rollback of an attempt dropped before it decided: every node its
/// write reached gets the release, in a task of its own (DESIGN rule 12:
/// nothing that undoes a write is dropped, the caller's own timeout
/// included). Disarmed once the attempt decides: `decide` then keeps the
/// guard or rolls back itself.
struct RollbackOnDrop(Option<(Arc<crate::core::Core>, Entry, Duration)>);

impl RollbackOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }

    /// Runs the decision; a drop from here on is `decide`'s to undo (its
    /// own rollback is an `Undo`, and a guard releases on drop).
    async fn until<T>(self, decide: impl std::future::Future<Output = T>) -> T {
        self.disarm();
        decide.await
    }
}

impl Drop for RollbackOnDrop {
    fn drop(&mut self) {
        let Some((core, entry, ttl)) = self.0.take() else {
            return;
        };
        let background = Arc::clone(&core.background);
        background.spawn(async move {
            let nothing: Vec<Option<Result<AcquireReply, NodeError>>> =
                (0..core.nodes.len()).map(|_| None).collect();
            release::rollback(&core, &entry, &nothing, ttl).await;
        });
    }
}

/// What to acquire: the names, and as whom.
pub(crate) struct Request {
    pub(crate) keys: Arc<KeySet>,
    /// The owner token; `None`: a fresh owner for every attempt.
    pub(crate) owner: Option<Arc<str>>,
    /// The fencing token cell to share (a re-entry through a hold).
    pub(crate) fence: Option<Arc<OnceCell<u64>>>,
    /// Whether the watchdog renews the guard.
    pub(crate) watched: bool,
    /// The keys' TTL (the lock's, unless this acquire set its own).
    pub(crate) ttl: Duration,
    /// The caller waits for a release notice between attempts: a key found
    /// held is marked so that its release announces itself.
    pub(crate) waits: bool,
    /// The caller's place in the waiter queues, when it queues (a fair
    /// lock service): a free name goes to the queue's first waiter.
    pub(crate) ticket: Option<Ticket>,
    /// The number of the call's attempt about to go (from 1), when its
    /// places ask for grants (0: they do not): a grant request names it,
    /// and the grant's validity counts from its start.
    pub(crate) attempt: u32,
}

impl Request {
    pub(crate) fn new<S: AsRef<str>>(
        keys: &[S],
        owner: Option<Arc<str>>,
        (watched, ttl): (bool, Duration),
    ) -> Result<Request, Error> {
        Ok(Request {
            keys: KeySet::new(keys)?,
            owner,
            fence: None,
            watched,
            ttl,
            waits: false,
            ticket: None,
            attempt: 0,
        })
    }

    /// The entry one attempt tries to take: the owner's token (a fresh one
    /// for an anonymous request) and a fresh entry id, so that a late
    /// rollback of one attempt can never remove another attempt's hold.
    ///
    /// A call that may be granted the name (its ticket has a grant hold)
    /// makes every attempt under the grant's owner token, so that an
    /// attempt counts a grant made to the call as its own hold (re-entry),
    /// and shares the grant's record of the nodes reached.
    pub(crate) fn entry(&self, nodes: usize) -> Entry {
        let owner = || match &self.owner {
            Some(token) => Arc::clone(token),
            None => Arc::clone(Owner::new().shared_token()),
        };
        let keys = Arc::clone(&self.keys);
        let grant = self.ticket.as_ref().and_then(|t| t.grant.as_ref());
        let entry = match grant.map(|slot| slot.get_or_make(owner, nodes)) {
            Some(grant) => {
                Entry::reaching(keys, Arc::clone(&grant.token), Arc::clone(&grant.reached))
            }
            None => Entry::new(keys, owner(), nodes),
        };
        Entry {
            ticket: self.ticket.clone(),
            ..entry
        }
    }
}

/// The node a gated attempt asks first: the first healthy one in
/// configuration order. Without one, an attempt goes without a gate.
pub(crate) fn gate(services: &Services) -> Option<usize> {
    services.core.nodes.iter().position(|n| n.is_healthy())
}

/// One acquire attempt: fan out, decide, then a lease or a rollback, in
/// an `attempt` span that records the outcome.
///
/// With a `gate` (an attempt after losing to contention, see [`gate`]):
/// that node is asked alone first, and only if it does not refuse are the
/// others asked. Waiters in other processes that wake on the same release
/// notice all ask the gate first; it lets one through, so they no longer
/// split the nodes between them (a split leaves no one a quorum and costs
/// every one of them a full round and its rollback). Refused at the gate,
/// an attempt has written nothing and costs one script call. Same safety
/// as without: the gate's answer is one vote of the same round, stamped
/// before the gate was asked, so the validity counts both steps.
#[tracing::instrument(
    level = "debug",
    name = "attempt",
    skip_all,
    fields(
        key = %request.keys,
        nodes = services.core.nodes.len(),
        gate,
        won = Empty,
        elapsed_us = Empty,
        validity_ms = Empty,
    )
)]
pub(crate) async fn attempt(
    services: &Services,
    request: &Request,
    gate: Option<usize>,
) -> Result<Lease, Error> {
    let core = &services.core;
    let entry = request.entry(core.nodes.len());
    // Dropped before it decides (a caller's timeout), the attempt still
    // rolls back what it wrote.
    let undo = RollbackOnDrop(Some((Arc::clone(core), entry.clone(), request.ttl)));
    let ttl_ms = ttl_millis(request.ttl);
    bump(&core.counters.attempts);
    let mut round = QuorumRound::new(core.nodes.len(), core.required(), Stamp::now());
    let lease_ms = core.queue_lease_ms();
    let reads_fences = core.reads_fences();
    let cutoff = Arc::new(Cutoff::default());
    let acquire = |i: usize| {
        let cutoff = Arc::clone(&cutoff);
        let call = Acquire {
            entry: entry.clone(),
            ttl_ms,
            waits: request.waits,
            lease_ms,
            reads_fences,
            attempt: request.attempt,
        };
        core.nodes[i].acquire(call, cutoff)
    };
    if let Some(gate) = gate {
        let reply = tokio::time::timeout(core.config.node_timeout, acquire(gate)).await;
        match reply {
            // Refused (held, or waiters queue ahead): nothing was
            // written anywhere.
            Ok(Ok(reply)) if reply.refused().is_some() => {
                undo.disarm();
                let pttl = reply.refused().flatten();
                round.record(gate, Ok(reply), AcquireReply::vote);
                round.finish(End::Decided);
                return Err(refused_at_gate(services, &entry, &mut round, pttl));
            }
            Ok(reply) => {
                if round.record(gate, reply, AcquireReply::vote) {
                    round.finish(End::Decided);
                    return undo
                        .until(decide(services, request, entry, &mut round))
                        .await;
                }
            }
            // No answer in time: the gate's call was dropped, and its
            // node may still run it; the round goes on without its
            // vote, and a rollback will reach it (no reply: may carry).
            Err(_) => core.count_timeout(&core.nodes[gate]),
        }
    }
    let unfinished = round
        .ask(gate, core.config.node_timeout, acquire, AcquireReply::vote)
        .await;
    if round.tally.decision() == Decision::Won {
        // Dropped: the guard has its quorum, and a call still queued is
        // skipped (no work for a node the guard does not need).
        drop(unfinished);
    } else {
        lost_round(core, request, &mut round, gate, &cutoff, unfinished).await;
    }
    undo.until(decide(services, request, entry, &mut round))
        .await
}

/// What a lost round's unfinished calls do: those already sent finish
/// (for a waiter, before its attempt returns), the others never leave.
async fn lost_round<Fut>(
    core: &crate::core::Core,
    request: &Request,
    round: &mut QuorumRound<AcquireReply>,
    gate: Option<usize>,
    cutoff: &Cutoff,
    unfinished: Unfinished<Fut>,
) where
    Fut: std::future::Future<Output = Result<AcquireReply, NodeError>> + Send + 'static,
{
    // A lost round's calls already sent finish: a waiter's mark (and
    // queue place) must land on every node that got the request, or that
    // node's release would not announce itself to it. Those not sent yet
    // are never sent: they could run after the rollback that follows.
    cutoff.pass();
    if request.waits {
        // A waiter's next attempt may follow at once: its calls must
        // not queue behind these (and be cut off with its round), or
        // its places would differ between the nodes, and so would the
        // grants that follow them; and the rollback below must not
        // go to a node that refused. Waiting, it waits a round more.
        round
            .settle(gate, unfinished, core.config.node_timeout)
            .await;
    } else {
        unfinished.finish_in_background(&core.background, core.background_bound(), "acquire");
    }
}

/// The refusal of an attempt that the gate turned away: contended, and
/// free once the gate's holder's TTL runs out at the earliest.
fn refused_at_gate(
    services: &Services,
    entry: &Entry,
    round: &mut QuorumRound<AcquireReply>,
    pttl: Option<Duration>,
) -> Error {
    let core = &services.core;
    bump(&core.counters.contended);
    telemetry::attempt(Outcome::Contended, round.elapsed);
    Error::Contended {
        key: entry.keys.to_string(),
        free_in: pttl,
        nodes: core.reports(&mut round.replies, End::Decided),
    }
}

/// The waiter's side of a handoff: tallies the answers a releasing
/// guard forwards (its round started at the `Started` stamp, taken
/// before the first request left) and decides like an attempt.
pub(crate) async fn handed_over(
    services: &Services,
    request: &Request,
    entry: Entry,
    first: Option<HandoffEvent>,
    mut rest: mpsc::UnboundedReceiver<HandoffEvent>,
) -> Result<Lease, Error> {
    let core = &services.core;
    let config = &core.config;
    bump(&core.counters.attempts);
    // The releaser ends its round within the node timeout and says so;
    // the bound only guards against a stalled runtime.
    let give_up = Instant::now()
        + config
            .node_timeout
            .saturating_mul(2)
            .saturating_add(config.connect_timeout);
    let mut next = first;
    let mut receive = async || match next.take() {
        Some(event) => Some(event),
        None => tokio::time::timeout_at(give_up, rest.recv())
            .await
            .ok()
            .flatten(),
    };
    // The releaser sends its start stamp before anything else.
    let Some(HandoffEvent::Started(start)) = receive().await else {
        return Err(handoff_without_start(services, entry).await);
    };
    let mut round = QuorumRound::new(core.nodes.len(), core.required(), start);
    let end = loop {
        match receive().await {
            Some(HandoffEvent::Reply(i, reply)) => {
                if round.record(i, reply, AcquireReply::vote) {
                    break End::Decided;
                }
            }
            Some(HandoffEvent::Ended(end)) => break end,
            Some(HandoffEvent::Started(_)) => {}
            None => break End::DeadlinePassed,
        }
    };
    round.finish(end);
    // Keep listening, so that the releaser never mistakes a decided
    // waiter for one that went away (and rolls its hold back).
    tokio::spawn(async move { while rest.recv().await.is_some() {} });
    bump(&core.counters.handed_over);
    decide(services, request, entry, &mut round).await
}

/// The waiter's side of grants: releases of other lock services took the
/// name for the call's `grant` hold on the nodes `heard` names, each for
/// the grant request of one attempt of the call (its number, and the
/// name's fencing counter there). Decided like an attempt whose round
/// started when the earliest of those attempts did (see [`AttemptStarts`]).
/// Short of the validity, the grants are rolled back like a lost attempt's
/// writes.
pub(crate) async fn granted(
    services: &Services,
    request: &Request,
    (grant, ticket): (&GrantHold, &Ticket),
    heard: &[Option<(u32, Reading)>],
    starts: &AttemptStarts,
) -> Result<Lease, Error> {
    let core = &services.core;
    bump(&core.counters.attempts);
    bump(&core.counters.granted);
    let start = heard
        .iter()
        .flatten()
        .filter_map(|(attempt, _)| starts.of(*attempt))
        .min()
        .unwrap_or_else(Stamp::now);
    let reads = core.reads_fences();
    let mut round = QuorumRound::new(core.nodes.len(), core.required(), start);
    for (i, heard) in heard.iter().enumerate() {
        if let Some((attempt, fence)) = heard
            && starts.of(*attempt).is_some()
        {
            let fences = reads.then(|| Box::from([*fence]));
            round.record(i, Ok(AcquireReply::Won { fences }), AcquireReply::vote);
        }
    }
    round.finish(End::Decided);
    let entry = Entry::of_grant(Arc::clone(&request.keys), grant, ticket.clone());
    decide(services, request, entry, &mut round).await
}

/// A handoff whose start never came (cannot happen): without a start no
/// validity can be computed, so give back whatever may have been taken,
/// never guess.
async fn handoff_without_start(services: &Services, entry: Entry) -> Error {
    let core = &services.core;
    let mut nothing: Vec<Option<Result<AcquireReply, NodeError>>> =
        (0..core.nodes.len()).map(|_| None).collect();
    // A handoff takes the name with the lock's TTL.
    release::rollback(core, &entry, &nothing, core.config.ttl).await;
    Error::QuorumNotReached {
        key: entry.keys.to_string(),
        required: core.required(),
        won: 0,
        nodes: core.reports(&mut nothing, End::DeadlinePassed),
    }
}

/// Turns a decided acquire round into a guard, or rolls it back and
/// says why not.
async fn decide(
    services: &Services,
    request: &Request,
    entry: Entry,
    round: &mut QuorumRound<AcquireReply>,
) -> Result<Lease, Error> {
    let config = &services.core.config;
    let (validity, _) = round.validity(request.ttl, config.drift_factor);
    let span = tracing::Span::current();
    span.record("won", round.tally.won());
    span.record("elapsed_us", round.elapsed.as_micros() as u64);
    span.record("validity_ms", validity.as_millis() as u64);

    let min_validity = config.min_validity_for(request.ttl);
    if round.won_with(request.ttl, config.drift_factor, min_validity) {
        tracing::debug!(won = round.tally.won(), ?validity, "acquired");
        bump(&services.core.counters.acquired);
        telemetry::attempt(Outcome::Acquired, round.elapsed);
        return Ok(lease(services, request, entry, round));
    }
    // Lost (or won too late): undo whatever the attempt may have written.
    release::rollback(&services.core, &entry, &round.replies, request.ttl).await;
    Err(refusal(services, &entry, round, validity))
}

/// The lease of a won round; it keeps the fencing counters the acquire
/// script read. The caller wraps it in its guard at once (no await in
/// between: a guard is what releases it).
fn lease(
    services: &Services,
    request: &Request,
    entry: Entry,
    round: &mut QuorumRound<AcquireReply>,
) -> Lease {
    let fence_reads = round
        .replies
        .iter_mut()
        .map(|reply| match reply.take() {
            Some(Ok(AcquireReply::Won { fences })) => fences,
            _ => None,
        })
        .collect();
    let grant = Grant {
        entry,
        start: round.start,
        holds: Hold::from_votes(&round.votes),
        watched: request.watched,
        ttl: request.ttl,
        fence: request.fence.clone().unwrap_or_default(),
        fence_reads,
    };
    Lease::new(Arc::clone(&services.core), grant)
}

/// Why a rolled-back round did not give a guard: too late, contended
/// (with how long the holder still has), or too few nodes.
fn refusal(
    services: &Services,
    entry: &Entry,
    round: &mut QuorumRound<AcquireReply>,
    validity: Duration,
) -> Error {
    let core = &services.core;
    let tally = round.tally;
    let key = entry.keys.to_string();
    if tally.decision() == Decision::Won {
        bump(&core.counters.validity_used_up);
        telemetry::attempt(Outcome::ValidityUsedUp, round.elapsed);
        return round.validity_used_up(key, validity, core.config.min_validity);
    }
    let nodes = core.reports(&mut round.replies, round.end);
    if tally.lost_to_contention() {
        let mut pttls: Vec<Option<Duration>> = nodes
            .iter()
            .filter_map(|r| match r.outcome {
                NodeOutcome::HeldByOther { pttl } => Some(pttl),
                _ => None,
            })
            .collect();
        let live = core.nodes.len() - tally.failed();
        let free_in = quorum::free_in(live, tally.required(), &mut pttls);
        tracing::debug!(contended = tally.contended(), ?free_in, "contended");
        bump(&core.counters.contended);
        telemetry::attempt(Outcome::Contended, round.elapsed);
        return Error::Contended {
            key,
            free_in,
            nodes,
        };
    }
    tracing::debug!(
        won = tally.won(),
        required = tally.required(),
        "quorum not reached"
    );
    bump(&core.counters.quorum_not_reached);
    telemetry::attempt(Outcome::QuorumNotReached, round.elapsed);
    round.quorum_not_reached(key, nodes)
}
