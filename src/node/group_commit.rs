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

use redis::{Cmd, Value};
use tokio::sync::oneshot;

use super::Node;
use super::calls::{fences_and_queues, queue_id, queues};
use super::send::{Cutoff, How, NOTHING, not_sent_error};
use crate::batch::Offer;
use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Entry;
use crate::scripts::{self, Script};
use crate::stats::bump;

/// A call that goes through a node's group commit.
pub(super) enum Batched {
    /// The acquire script (`scripts/acquire.lua`).
    Acquire {
        entry: Entry,
        ttl_ms: u64,
        waits: bool,
        lease_ms: u64,
    },
    /// The release script (`scripts/release.lua`).
    Release { entry: Entry, leave: bool },
}

impl Batched {
    fn votes(&self) -> bool {
        matches!(self, Batched::Acquire { .. })
    }

    /// Whether it undoes a write: never skipped, sent however silent the
    /// node (see [`super::undo`]).
    fn undoes(&self) -> bool {
        matches!(self, Batched::Release { .. })
    }

    /// Marks node `index` reached by its entry if it writes one.
    fn mark(&self, index: usize) {
        if let Batched::Acquire { entry, .. } = self {
            entry.reached.mark(index);
        }
    }

    /// Its script, when it goes alone.
    fn script(&self) -> &'static Script {
        match self {
            Batched::Acquire { .. } => &scripts::ACQUIRE,
            Batched::Release { .. } => &scripts::RELEASE,
        }
    }

    fn key_count(&self) -> usize {
        match self {
            Batched::Acquire { entry, .. } => 4 * entry.keys.len(),
            Batched::Release { entry, .. } => 3 * entry.keys.len(),
        }
    }

    /// Its keys: the lock keys, then (acquire) their fencing counters,
    /// then their waiter queues and the queues' leases.
    fn keys(&self, cmd: &mut Cmd) {
        match self {
            Batched::Acquire { entry, .. } => fences_and_queues(cmd, &entry.keys),
            Batched::Release { entry, .. } => queues(cmd, &entry.keys),
        }
    }

    /// How many arguments [`args`](Self::args) writes (for the batch's
    /// header).
    fn arg_count(&self) -> usize {
        match self {
            Batched::Acquire { .. } => 7,
            Batched::Release { .. } => 3,
        }
    }

    /// Its arguments, but for a vote's last two ([`Node::voter_args`]).
    fn args(&self, cmd: &mut Cmd) {
        match self {
            Batched::Acquire {
                entry,
                ttl_ms,
                waits,
                lease_ms,
            } => {
                cmd.arg(&*entry.token).arg(&*entry.id).arg(ttl_ms);
                cmd.arg(if *waits { "1" } else { "0" });
                match &entry.ticket {
                    Some(ticket) => cmd.arg(&*ticket.id).arg(ticket.score),
                    None => cmd.arg("").arg(0),
                };
                cmd.arg(lease_ms);
            }
            Batched::Release { entry, leave } => {
                cmd.arg(&*entry.token).arg(&*entry.id);
                cmd.arg(queue_id(entry, *leave));
            }
        }
    }

    /// Its header in a batch (`scripts/batch.lua`): script, keys, arguments.
    fn header(&self) -> String {
        let script = match self {
            Batched::Acquire { .. } => 'a',
            Batched::Release { .. } => 'r',
        };
        format!("{script}{} {}", self.key_count(), self.arg_count())
    }
}

/// `numkeys`, every call's keys, then the batch's arguments
/// (`scripts/batch.lua`), but for the vote's last two.
fn batch_args(cmd: &mut Cmd, calls: &[Batched]) {
    cmd.arg(calls.iter().map(Batched::key_count).sum::<usize>());
    for call in calls {
        call.keys(cmd);
    }
    cmd.arg(calls.len());
    for call in calls {
        cmd.arg(call.header());
    }
    for call in calls {
        call.args(cmd);
    }
}

/// A call queued for the node's next batch, and where its reply goes.
pub(super) struct Pending {
    call: Batched,
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
        call: Batched,
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
        call: &Batched,
        cutoff: Option<&Cutoff>,
    ) -> Result<Value, NodeError> {
        let how = How {
            cutoff,
            undo: call.undoes(),
            reached: &|| call.mark(self.index),
            ..How::plain()
        };
        self.script(call.script(), how, |cmd| {
            cmd.arg(call.key_count());
            call.keys(cmd);
            call.args(cmd);
            if call.votes() {
                self.voter_args(cmd);
            }
        })
        .await
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
            undo: calls.iter().any(Batched::undoes),
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
            let reply = self
                .script(&scripts::BATCH, how, |cmd| {
                    batch_args(cmd, calls);
                    self.voter_args(cmd);
                })
                .await?;
            match reply {
                Value::Array(items) if items.len() == calls.len() => Ok(items
                    .into_iter()
                    .map(|item| match item {
                        Value::ServerError(e) => Err(self.error(&e.into())),
                        item => Ok(item),
                    })
                    .collect()),
                other => Err(self.unexpected(other)),
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeySet, Ticket};

    #[test]
    fn a_batch_header_counts_what_each_call_writes() {
        let keys = KeySet::new(&["a", "b"]).expect("valid names");
        let mut entry = Entry::new(keys, Arc::from("token"), 1);
        entry.ticket = Some(Ticket {
            id: Arc::from("service.call"),
            score: 1,
        });
        let calls = [
            Batched::Acquire {
                entry: entry.clone(),
                ttl_ms: 1000,
                waits: true,
                lease_ms: 2000,
            },
            Batched::Release { entry, leave: true },
        ];
        for call in &calls {
            let (mut keys, mut args) = (redis::cmd("X"), redis::cmd("X"));
            call.keys(&mut keys);
            call.args(&mut args);
            assert_eq!(keys.args_iter().count() - 1, call.key_count());
            assert_eq!(args.args_iter().count() - 1, call.arg_count());
        }
        assert_eq!(calls[0].header(), "a8 7");
        assert_eq!(calls[1].header(), "r6 3");
    }
}
