//! Group commit: acquires and releases take turns on a node
//! ([`crate::batch`]). A call that finds none under way goes out at once,
//! alone, with its own script; calls that come while one is under way
//! queue, and when it ends they go out together as one `scripts/batch.lua`
//! call, in the order they came. On a busy node this saves a script call,
//! a round of syscalls on both sides and a reply per call (S2 in
//! `benches/peers.rs`: batches of about 16, +16 % operations per second,
//! -18 % client CPU per operation); it cannot share the scripts' own work.
//!
//! The order is kept: only the turn's holder sends, so a rollback, queued
//! after its acquire, is sent after it; a queued acquire whose round's
//! cutoff passed, or whose caller stopped waiting, is skipped. A queued
//! release never is (it undoes a write, see [`super::undo`]), and it queues
//! behind the turn also while the node is silent. Other scripts (renew, extend, fencing, handoff)
//! go out directly, and none of them can be undone by a queued call sent
//! after it: a renewal or a raise re-takes a key that lacks its entry,
//! which a late acquire of the same entry then finds as its own; a
//! handoff's waiter takes the name with an entry id of its own, which a
//! late rollback of that waiter's earlier attempt leaves alone.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::Value;
use tokio::sync::oneshot;

use super::Node;
use super::send::{Cutoff, How, NOTHING, not_sent_error};
use crate::batch::Offer;
use crate::error::{NodeError, NodeErrorKind};
use crate::scripts::Call;
use crate::scripts::batch::{Batch, Member};
use crate::stats::bump;

/// What the node does with a call of its group commit beyond sending it
/// (its layout is its script's: [`crate::scripts::batch`]).
impl Member {
    /// Whether it undoes a write: never skipped, sent however silent the
    /// node (see [`super::undo`]).
    fn undoes(&self) -> bool {
        matches!(self, Member::Release(_))
    }

    /// Marks node `index` reached by its entry if it writes one.
    fn mark(&self, index: usize) {
        if let Member::Acquire(acquire) = self {
            acquire.entry.reached.mark(index);
        }
    }
}

/// A call queued for the node's next batch, and where its reply goes.
pub(super) struct Pending {
    call: Member,
    cutoff: Option<Arc<Cutoff>>,
    reply: oneshot::Sender<Result<Value, NodeError>>,
}

impl Pending {
    /// Whether it is still to be sent: an undo always, anything else while
    /// its caller waits for it.
    fn awaited(&self) -> bool {
        self.call.undoes() || !self.reply.is_closed()
    }
}

/// The node's turn to send ([`crate::batch`]), held by the one call or
/// task sending now. Dropped, it passes the turn on: to the calls queued
/// meanwhile, sent in a task of their own.
struct Turn(Option<Arc<Node>>);

impl Turn {
    /// For a holder that freed the turn itself (the queue was empty).
    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(node) = self.0.take() {
            node.pass_turn();
        }
    }
}

impl Node {
    /// Runs an acquire or a release through the node's group commit
    /// ([`crate::batch`]): at once and alone when nothing else is being
    /// sent to the node, else in the next batch, one script call for
    /// every call queued meanwhile. The reply is the call's own, a vote
    /// unwrapped as [`voting`](Self::voting) does. An acquire is not sent
    /// at all once `cutoff` has passed, nor once its caller stopped
    /// waiting; a release always is.
    pub(super) async fn batched(
        self: &Arc<Self>,
        call: Member,
        cutoff: Option<Arc<Cutoff>>,
    ) -> Result<Value, NodeError> {
        let votes = call.votes();
        if votes {
            self.may_vote().await?;
        }
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            call,
            cutoff: cutoff.clone(),
            reply,
        };
        // A node that answers nothing gets nothing more (`Node::send`):
        // its call fails now, as it would have when sent, rather than queue
        // behind the unanswered call that holds the turn. An undo queues
        // all the same.
        let silent = if pending.call.undoes() {
            None
        } else {
            self.silent()
        };
        let offer = match silent {
            Some(error) => Err(error),
            None => Ok(self.batcher.offer(pending, Pending::awaited)),
        };
        let result = match offer {
            Err(error) => Err(error),
            Ok(Offer::SendNow(pending)) => {
                let turn = Turn(Some(Arc::clone(self)));
                let result = self.send_one(&pending.call, cutoff.as_deref()).await;
                drop(turn);
                result
            }
            Ok(Offer::Queued) => answer.await.unwrap_or_else(|_| {
                Err(NodeError::new(
                    &self.name,
                    NodeErrorKind::Unreachable,
                    "dropped unsent: no runtime was left to send it on".to_string(),
                ))
            }),
        };
        self.count_failure(&result, cutoff.as_deref());
        let reply = result?;
        if !votes {
            return Ok(reply);
        }
        match self.unwrap_vote(reply)? {
            (Some(left), _) => Err(self.quarantined(left)),
            (None, reply) => Ok(reply),
        }
    }

    /// One call on its own, with its own script.
    async fn send_one(
        self: &Arc<Self>,
        call: &Member,
        cutoff: Option<&Cutoff>,
    ) -> Result<Value, NodeError> {
        let how = How {
            cutoff,
            undo: call.undoes(),
            reached: &|| call.mark(self.index),
            ..How::plain()
        };
        self.script(call, how).await
    }

    /// Sends the calls of a batch, each acquire unless its caller stopped
    /// waiting or its round's cutoff passed, and hands each its reply.
    /// Returns once every reply is handed over, or once nobody waits for
    /// any (what was sent then still runs, and its reply is recorded).
    async fn send_batch(self: &Arc<Self>, batch: Vec<Pending>) {
        let mut calls = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for pending in batch {
            if !pending.awaited() {
                continue;
            }
            // Marked before the cutoff is read (see `Reached`).
            pending.call.mark(self.index);
            if pending.cutoff.as_deref().is_some_and(Cutoff::passed) {
                let _ = pending.reply.send(Err(self.error(&not_sent_error())));
                continue;
            }
            calls.push(pending.call);
            replies.push(pending.reply);
        }
        if calls.is_empty() {
            return;
        }
        let calls = &calls;
        let how = How {
            undo: calls.iter().any(Member::undoes),
            reached: NOTHING,
            ..How::plain()
        };
        let send = async move {
            if let [call] = &calls[..] {
                return self.send_one(call, None).await.map(|reply| vec![Ok(reply)]);
            }
            bump(&self.counters.batches);
            self.counters
                .batched
                .fetch_add(calls.len() as u64, Ordering::Relaxed);
            let batch = Batch(calls);
            let reply = self.script(&batch, how).await?;
            let replies = batch.parse(reply).map_err(|e| self.bad(e))?;
            Ok(replies
                .into_iter()
                .map(|reply| reply.map_err(|e| self.error(&e.into())))
                .collect())
        };
        let nobody_waits =
            futures::future::join_all(replies.iter_mut().map(oneshot::Sender::closed));
        tokio::select! {
            result = send => match result {
                Ok(results) => {
                    for (reply, result) in replies.into_iter().zip(results) {
                        let _ = reply.send(result);
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            },
            _ = nobody_waits => {}
        }
    }

    /// Passes the node's turn on (see [`crate::batch`]): sends the calls
    /// queued meanwhile, as batches, in a task of their own.
    fn pass_turn(self: &Arc<Self>) {
        let Some(batch) = self.batcher.next_batch() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Their callers hear that the calls were dropped.
            drop(batch);
            drop(self.batcher.abandon());
            return;
        };
        let node = Arc::clone(self);
        // Made here, so that a task dropped before it ran still passes the
        // turn on.
        let turn = Turn(Some(Arc::clone(self)));
        runtime.spawn(async move {
            let mut batch = batch;
            loop {
                node.send_batch(batch).await;
                match node.batcher.next_batch() {
                    Some(next) => batch = next,
                    None => break,
                }
            }
            turn.done();
        });
    }
}
