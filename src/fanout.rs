//! Send one operation to every node at once and stop listening as soon as the
//! caller has its answer.
//!
//! The per-node futures are polled in place (no task per node), and each is
//! polled once before any reply is taken, so that every call to a connected
//! node has queued its command by the time the caller decides. When the
//! caller decides, or the shared deadline passes, [`fan_out`] returns the
//! calls still unfinished as [`Unfinished`]. What to do with them is the
//! caller's choice, and it matters:
//!
//! * Acquire **drops** them when it won (the guard has its quorum; a call
//!   still queued is skipped) and **finishes** those already sent when it
//!   lost, in the background, sending none that was not (its
//!   [`Cutoff`](crate::node::Cutoff)): a waiter's mark and queue place
//!   land on every node that got the request, and the rollback queues
//!   behind them on each node's connection.
//! * Extend, renew and the fencing raise **drop** them: nothing of a
//!   decided round is sent after it (a renewal or raise re-takes a missing
//!   key, and a late one would outrun the release that follows). A command
//!   already written to the socket still runs on its node; one still
//!   queued is skipped.
//! * Rollback and release **finish** them in the background
//!   ([`Unfinished::finish_in_background`]): a release must reach every
//!   node, and a dropped release would be skipped if not yet written.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::future::MaybeDone;
use futures::stream::FuturesUnordered;
use tokio::task::Unconstrained;
use tokio::time::Instant;

use crate::background::Background;
use crate::clock::Stamp;
use crate::error::{Error, NodeError, NodeReports};
use crate::quorum::{self, Decision, Tally, Vote};

/// How a fan-out ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// `on_reply` said the outcome is decided.
    Decided,
    /// Every node answered without a decision.
    AllAnswered,
    /// The deadline passed; unanswered nodes timed out.
    DeadlinePassed,
}

pin_project_lite::pin_project! {
    /// One node's call, tagged with the node's index. Its output is kept
    /// once it is ready, so the call can be polled by [`Tagged::prime`]
    /// before it is polled as a member of the fan-out.
    pub(crate) struct Tagged<F: Future> {
        index: usize,
        #[pin]
        call: MaybeDone<F>,
    }
}

impl<F: Future> Tagged<F> {
    /// Polls the call once, keeping its output if it is ready.
    fn prime(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        let _ = self.project().call.poll(cx);
    }
}

impl<F: Future> Future for Tagged<F> {
    type Output = (usize, F::Output);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        std::task::ready!(this.call.as_mut().poll(cx));
        match this.call.take_output() {
            Some(out) => Poll::Ready((*this.index, out)),
            // A FuturesUnordered never polls a finished member again.
            None => Poll::Pending,
        }
    }
}

/// The calls of a fan-out that had not finished when it ended.
pub(crate) struct Unfinished<F: Future>(FuturesUnordered<Tagged<Unconstrained<F>>>);

impl<F> Unfinished<F>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    /// Lets the calls run to completion in a background task, for at most
    /// `bound`, counted in `background`. Needs a Tokio runtime; spawns
    /// nothing when none is left.
    pub(crate) fn finish_in_background(
        self,
        background: &Arc<Background>,
        bound: Duration,
        what: &'static str,
    ) {
        if self.0.is_empty() {
            return;
        }
        let calls = self.0;
        background.spawn(async move {
            let drain = calls.for_each(|_| async {});
            if tokio::time::timeout(bound, drain).await.is_err() {
                tracing::debug!(
                    what,
                    "a node did not answer in time; its key expires by its TTL"
                );
            }
        });
    }
}

/// Calls `call(i)` for every node index `i < n` concurrently and hands each
/// result to `on_reply` as it arrives. Returns when `on_reply` returns
/// `true`, when every node answered, or at `deadline`, together with the
/// calls still unfinished.
pub(crate) async fn fan_out<T, Fut>(
    n: usize,
    deadline: Instant,
    call: impl FnMut(usize) -> Fut,
    on_reply: impl FnMut(usize, Result<T, NodeError>) -> bool,
) -> (End, Unfinished<Fut>)
where
    Fut: Future<Output = Result<T, NodeError>>,
{
    fan_out_announcing(n, deadline, call, || {}, on_reply).await
}

/// [`fan_out`], calling `on_sent` once every call has been polled once:
/// each call to a connected node has then queued its command on that
/// node's connection, so anything queued later on the same connections
/// runs after it on every such node.
pub(crate) async fn fan_out_announcing<T, Fut>(
    n: usize,
    deadline: Instant,
    mut call: impl FnMut(usize) -> Fut,
    on_sent: impl FnOnce(),
    mut on_reply: impl FnMut(usize, Result<T, NodeError>) -> bool,
) -> (End, Unfinished<Fut>)
where
    Fut: Future<Output = Result<T, NodeError>>,
{
    // Unconstrained: tokio's cooperative budget must not keep a call from
    // queuing its command on its first poll. A call is tiny (queue a command,
    // await one reply), and a connected node then reliably gets the request
    // even when the decision comes from faster nodes first.
    let mut in_flight: FuturesUnordered<_> = (0..n)
        .map(|index| Tagged {
            index,
            call: MaybeDone::Future(tokio::task::unconstrained(call(index))),
        })
        .collect();
    let mut primed = false;
    let timer = tokio::time::sleep_until(deadline);
    tokio::pin!(timer);
    let mut on_sent = Some(on_sent);
    let end = std::future::poll_fn(|cx| {
        // Every call is polled once before any reply is taken: a
        // FuturesUnordered may stop a pass early (after members that were
        // woken while polled), and a call that was never polled has queued
        // nothing when the round decides.
        if !std::mem::replace(&mut primed, true) {
            for call in Pin::new(&mut in_flight).iter_pin_mut() {
                call.prime(cx);
            }
        }
        // Replies first: one that is ready at the deadline still counts.
        loop {
            match in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some((i, result))) => {
                    if on_reply(i, result) {
                        return Poll::Ready(End::Decided);
                    }
                }
                Poll::Ready(None) => return Poll::Ready(End::AllAnswered),
                // Every call still in flight has been polled.
                Poll::Pending => break,
            }
        }
        if let Some(on_sent) = on_sent.take() {
            on_sent();
        }
        timer.as_mut().poll(cx).map(|()| End::DeadlinePassed)
    })
    .await;
    if let Some(on_sent) = on_sent.take() {
        on_sent();
    }
    (end, Unfinished(in_flight))
}

/// The node of fan-out slot `j` of a round that asked node `asked` on its
/// own first ([`QuorumRound::ask`]): node j, or j + 1 from that one on.
fn slot_node(asked: Option<usize>, j: usize) -> usize {
    match asked {
        Some(a) if j >= a => j + 1,
        _ => j,
    }
}

/// A fan-out decided by a quorum tally (acquire, extend): the votes, the
/// replies, and the times its validity is computed from.
pub(crate) struct QuorumRound<T> {
    pub(crate) tally: Tally,
    /// Each node's vote; `None`: no reply before the round ended.
    pub(crate) votes: Vec<Option<Vote>>,
    pub(crate) replies: Vec<Option<Result<T, NodeError>>>,
    pub(crate) end: End,
    /// Taken before the first request left.
    pub(crate) start: Stamp,
    pub(crate) elapsed: Duration,
}

/// Sends `call(i)` to every node and tallies the replies (`vote` classifies
/// an answer; an error is a failed vote) until the quorum of `required` is
/// won, out of reach, or `node_timeout` has passed. Nothing of a decided
/// round is sent afterwards: its unfinished calls are dropped.
pub(crate) async fn quorum_round<T, Fut>(
    n: usize,
    required: usize,
    node_timeout: Duration,
    call: impl FnMut(usize) -> Fut,
    vote: impl Fn(&T) -> Vote,
) -> QuorumRound<T>
where
    Fut: Future<Output = Result<T, NodeError>>,
{
    let mut round = QuorumRound::new(n, required, Stamp::now());
    drop(round.ask(None, node_timeout, call, vote).await);
    round
}

impl<T> QuorumRound<T> {
    /// Sends `call(i)` to every node of the round but `asked` (one already
    /// asked on its own, see `acquire::attempt_gated`) and tallies the
    /// replies until the round is decided or `node_timeout` has passed;
    /// then marks it ended. Returns the calls still unfinished.
    pub(crate) async fn ask<Fut>(
        &mut self,
        asked: Option<usize>,
        node_timeout: Duration,
        mut call: impl FnMut(usize) -> Fut,
        vote: impl Fn(&T) -> Vote,
    ) -> Unfinished<Fut>
    where
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let node = |j: usize| slot_node(asked, j);
        let targets = self.votes.len() - usize::from(asked.is_some());
        let (end, unfinished) = fan_out(
            targets,
            Instant::now() + node_timeout,
            |j| call(node(j)),
            |j, reply| self.record(node(j), reply, &vote),
        )
        .await;
        self.finish(end);
        unfinished
    }

    /// A round over `n` nodes that needs `required` wins, started (before
    /// the first request left) at `start`.
    pub(crate) fn new(n: usize, required: usize, start: Stamp) -> QuorumRound<T> {
        QuorumRound {
            tally: Tally::new(n, required),
            votes: vec![None; n],
            replies: (0..n).map(|_| None).collect(),
            end: End::AllAnswered,
            start,
            elapsed: Duration::ZERO,
        }
    }

    /// Counts node `i`'s reply (`vote` classifies an answer; an error is a
    /// failed vote). `true` once the round is decided.
    pub(crate) fn record(
        &mut self,
        i: usize,
        reply: Result<T, NodeError>,
        vote: impl Fn(&T) -> Vote,
    ) -> bool {
        let v = reply.as_ref().map_or(Vote::Failed, vote);
        self.tally.record(v);
        self.votes[i] = Some(v);
        self.replies[i] = Some(reply);
        self.tally.decision() != Decision::Pending
    }

    /// Waits up to `bound` for the calls that [`ask`](Self::ask) (with
    /// the same `asked`) left unfinished, keeping each late reply: a node
    /// that refused then needs no rollback. The tally stays as decided.
    pub(crate) async fn settle<Fut>(
        &mut self,
        asked: Option<usize>,
        unfinished: Unfinished<Fut>,
        bound: Duration,
    ) where
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let mut calls = unfinished.0;
        let replies = &mut self.replies;
        let late = async {
            while let Some((j, reply)) = calls.next().await {
                replies[slot_node(asked, j)] = Some(reply);
            }
        };
        let _ = tokio::time::timeout(bound, late).await;
    }

    /// Marks the round ended now, and how.
    pub(crate) fn finish(&mut self, end: End) {
        self.end = end;
        self.elapsed = self.start.elapsed();
    }

    /// For keys given `ttl` by this round: the validity left now that it has
    /// ended (`ttl − elapsed − drift`) and its deadline (`start + ttl − drift`).
    pub(crate) fn validity(&self, ttl: Duration, drift_factor: f64) -> (Duration, Stamp) {
        (
            quorum::validity(ttl, self.elapsed, drift_factor),
            self.start.after(quorum::lease(ttl, drift_factor)),
        )
    }

    /// Whether the round won its quorum with more than `min` validity left.
    pub(crate) fn won_with(&self, ttl: Duration, drift_factor: f64, min: Duration) -> bool {
        self.tally.decision() == Decision::Won && self.validity(ttl, drift_factor).0 > min
    }

    // The two refusals an acquire and an extend share, built here so that
    // both report the same fields of the same round the same way. Which one
    // applies, and what is counted for it, stays with the caller: an
    // acquire also tells contention apart, an extend may lose the guard.

    /// The refusal of a round that won its quorum too late: `validity`
    /// (what was left when it ended) is not more than `min_validity`.
    pub(crate) fn validity_used_up(
        &self,
        key: String,
        validity: Duration,
        min_validity: Duration,
    ) -> Error {
        Error::ValidityUsedUp {
            key,
            elapsed: self.elapsed,
            validity,
            min_validity,
        }
    }

    /// The refusal of a round that did not win its quorum, with each node's
    /// outcome.
    pub(crate) fn quorum_not_reached(&self, key: String, nodes: NodeReports) -> Error {
        Error::QuorumNotReached {
            key,
            required: self.tally.required(),
            won: self.tally.won(),
            nodes,
        }
    }
}
