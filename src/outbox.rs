//! A node's outbox: group commit of the lock-key writes bound for one node.
//!
//! Acquires, releases (rollbacks) and handoffs for a node leave through its
//! outbox, **one flight at a time**. A call that finds the outbox idle flies
//! at once, sent by its own caller: alone, no task, no wait, so an unloaded
//! lock pays nothing for this. Calls made while a flight is out wait in the
//! queue; when the flight lands they leave together, in the order they were
//! made, as **one** script call (`scripts/batch.lua`; releases alone
//! `scripts/releases.lua`, without the epoch check), sent by a task
//! (their callers may have gone). Under load a node thus runs one script
//! invocation and one epoch check for many operations, and the client
//! writes and parses one command for them: that is where the throughput
//! comes from. A handoff flies alone (it is its own script).
//!
//! # Order
//!
//! The queue is first in, first out, and only its head flies, so nothing
//! overtakes what was queued before it. Flights leave on the node's one
//! connection, which keeps their order on the wire (see [`crate::node`]).
//! So a rollback or release, made only after its acquire's call was made,
//! runs after that acquire on the node.
//!
//! # What is dropped, what is never dropped
//!
//! An acquire still queued whose caller has gone (its round was decided,
//! or it timed out) is dropped before its flight: it never wrote, and its
//! rollback finds nothing. A release or handoff is always sent, whoever
//! still waits for it. While a flight goes unanswered (a paused server),
//! the queue takes releases without limit (each is owed to an acquire
//! already made) but refuses acquires once [`MAX_QUEUED`] calls wait: a
//! refused acquire writes nothing and costs its caller one vote.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;

use crate::error::NodeError;
use crate::keys::Entry;

/// One lock-key write for a node.
pub(crate) enum Op {
    /// Take every key of the entry for `ttl_ms`; `waits`: the caller will
    /// wait for a release notice, so a key held by another owner is marked
    /// to announce its release (`scripts/batch.lua`).
    Acquire {
        entry: Entry,
        ttl_ms: u64,
        waits: bool,
    },
    /// Give back the entry's hold; announce the keys that became free.
    Release { entry: Entry, announce: bool },
    /// Give back `from` and take its name for `to` where that left it free.
    Handoff { from: Entry, to: Entry, ttl_ms: u64 },
}

impl Op {
    /// Lock and counter keys this operation adds to a batch call (a
    /// handoff flies alone: none).
    pub(crate) fn keys(&self) -> usize {
        match self {
            Op::Acquire { entry, .. } => 2 * entry.keys.len(),
            Op::Release { entry, .. } => entry.keys.len(),
            Op::Handoff { .. } => 0,
        }
    }

    fn is_handoff(&self) -> bool {
        matches!(self, Op::Handoff { .. })
    }
}

/// What a node answered one operation.
pub(crate) struct Landed {
    /// The quarantine left when the node is young (its vote does not
    /// count; a release's answer does).
    pub(crate) young: Option<Duration>,
    /// The operation's own reply (its element of a batch reply).
    pub(crate) reply: Value,
}

/// One operation's answer, or the error that cost it its answer.
pub(crate) type Answer = Result<Landed, NodeError>;

/// An operation waiting in the queue, with where its answer goes.
pub(crate) struct Queued {
    pub(crate) op: Op,
    pub(crate) answer: oneshot::Sender<Answer>,
}

impl Queued {
    /// An acquire nobody waits for any more: dropping it writes nothing.
    fn abandoned(&self) -> bool {
        matches!(self.op, Op::Acquire { .. }) && self.answer.is_closed()
    }
}

/// Calls that may wait behind an unanswered flight before acquires are
/// refused (releases are always taken).
pub(crate) const MAX_QUEUED: usize = 10_000;

/// Keys per batch call: enough for hundreds of operations, little enough
/// that one call holds the server for well under a millisecond.
pub(crate) const MAX_BATCH_KEYS: usize = 1024;

/// How a call enters the outbox.
pub(crate) enum Admitted {
    /// The outbox was idle: the caller flies its operation now, and calls
    /// [`Outbox::land`] when that flight ends (or is dropped).
    Fly(Op),
    /// Queued behind a flight; the answer comes here.
    Wait(oneshot::Receiver<Answer>),
    /// An acquire refused: [`MAX_QUEUED`] calls already wait.
    Full,
}

/// The queue and the flight flag of one node.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    flying: bool,
    /// Operations in the flight that is out (0 when none is).
    flying_ops: usize,
}

impl Outbox {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a flight is out (a new call would queue).
    pub(crate) fn is_busy(&self) -> bool {
        self.state().flying
    }

    /// Calls not yet answered: waiting, or in the flight that is out.
    pub(crate) fn pending(&self) -> usize {
        let state = self.state();
        state.queue.len() + state.flying_ops
    }

    /// Lets `op` fly now if nothing flies or waits, queues it otherwise.
    pub(crate) fn admit(&self, op: Op) -> Admitted {
        let mut state = self.state();
        if !state.flying && state.queue.is_empty() {
            state.flying = true;
            state.flying_ops = 1;
            return Admitted::Fly(op);
        }
        if matches!(op, Op::Acquire { .. }) && state.queue.len() >= MAX_QUEUED {
            state.queue.retain(|q| !q.abandoned());
            if state.queue.len() >= MAX_QUEUED {
                return Admitted::Full;
            }
        }
        let (answer, receiver) = oneshot::channel();
        state.queue.push_back(Queued { op, answer });
        Admitted::Wait(receiver)
    }

    /// Ends the caller's own flight. `true`: calls wait, and the caller
    /// must start a task that flies them ([`next_flight`](Self::next_flight)
    /// until it says none is left); the outbox stays busy meanwhile, so
    /// nothing new overtakes them.
    pub(crate) fn land(&self) -> bool {
        let mut state = self.state();
        state.queue.retain(|q| !q.abandoned());
        state.flying = !state.queue.is_empty();
        state.flying_ops = 0;
        state.flying
    }

    /// The next flight, from the head of the queue: one handoff, or the
    /// longest run of acquires and releases within [`MAX_BATCH_KEYS`] (at
    /// least one). `None` when nothing is left: the outbox is idle then
    /// (in the same step, so a call made meanwhile flies on its own).
    pub(crate) fn next_flight(&self) -> Option<Vec<Queued>> {
        let mut state = self.state();
        state.queue.retain(|q| !q.abandoned());
        let Some(head) = state.queue.front() else {
            state.flying = false;
            state.flying_ops = 0;
            return None;
        };
        let mut take = 1;
        if !head.op.is_handoff() {
            let mut keys = head.op.keys();
            for next in state.queue.iter().skip(1) {
                keys += next.op.keys();
                if next.op.is_handoff() || keys > MAX_BATCH_KEYS {
                    break;
                }
                take += 1;
            }
        }
        state.flying_ops = take;
        Some(state.queue.drain(..take).collect())
    }

    /// Gives up every queued call (no runtime is left to fly them): their
    /// callers get an error at once instead of waiting forever.
    pub(crate) fn abandon(&self) {
        let mut state = self.state();
        state.queue.clear();
        state.flying = false;
        state.flying_ops = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeySet;
    use std::sync::Arc;

    fn entry(name: &str) -> Entry {
        Entry::new(KeySet::new(&[name]).unwrap(), Arc::from("token"))
    }

    fn acquire(name: &str) -> Op {
        Op::Acquire {
            entry: entry(name),
            ttl_ms: 1000,
            waits: false,
        }
    }

    fn release(name: &str) -> Op {
        Op::Release {
            entry: entry(name),
            announce: true,
        }
    }

    /// An outbox whose first call flies (and has not landed).
    fn busy() -> Outbox {
        let outbox = Outbox::default();
        assert!(matches!(outbox.admit(acquire("first")), Admitted::Fly(_)));
        outbox
    }

    /// Queues `n` acquires of distinct names; their answer receivers.
    fn queue_acquires(outbox: &Outbox, n: usize) -> Vec<oneshot::Receiver<Answer>> {
        (0..n)
            .filter_map(|i| match outbox.admit(acquire(&format!("k{i}"))) {
                Admitted::Wait(rx) => Some(rx),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_first_call_flies_and_the_rest_wait_in_order() {
        let outbox = Outbox::default();
        assert!(matches!(outbox.admit(acquire("a")), Admitted::Fly(_)));
        let mut waiting = Vec::new();
        for name in ["b", "c", "d"] {
            match outbox.admit(release(name)) {
                Admitted::Wait(rx) => waiting.push(rx),
                _ => panic!("queued behind the flight"),
            }
        }
        assert!(outbox.land(), "calls wait");
        let flight = outbox.next_flight().expect("one flight");
        let names: Vec<_> = flight
            .iter()
            .map(|q| match &q.op {
                Op::Release { entry, .. } => entry.keys.names()[0].to_string(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(names, ["b", "c", "d"], "one batch, in the order made");
        assert!(outbox.next_flight().is_none(), "idle again");
        assert!(matches!(outbox.admit(acquire("e")), Admitted::Fly(_)));
    }

    #[test]
    fn a_handoff_flies_alone_and_splits_the_batches_around_it() {
        let outbox = busy();
        let mut keep = Vec::new();
        for op in [
            release("b"),
            Op::Handoff {
                from: entry("c"),
                to: entry("c"),
                ttl_ms: 1000,
            },
            release("d"),
        ] {
            if let Admitted::Wait(rx) = outbox.admit(op) {
                keep.push(rx);
            }
        }
        assert!(outbox.land());
        let sizes: Vec<(usize, bool)> = std::iter::from_fn(|| outbox.next_flight())
            .map(|f| (f.len(), f[0].op.is_handoff()))
            .collect();
        assert_eq!(sizes, [(1, false), (1, true), (1, false)]);
    }

    #[test]
    fn abandoned_acquires_are_dropped_but_releases_are_always_sent() {
        let outbox = busy();
        let gone = outbox.admit(acquire("b"));
        let release = outbox.admit(release("b"));
        drop(gone);
        drop(release);
        assert!(outbox.land(), "the release still waits to be sent");
        let flight = outbox.next_flight().expect("the release");
        assert_eq!(flight.len(), 1);
        assert!(matches!(flight[0].op, Op::Release { .. }));
    }

    #[test]
    fn a_full_queue_refuses_acquires_but_takes_releases() {
        let outbox = busy();
        let mut waiting = queue_acquires(&outbox, MAX_QUEUED);
        assert_eq!(waiting.len(), MAX_QUEUED);
        assert!(matches!(outbox.admit(acquire("x")), Admitted::Full));
        assert!(matches!(outbox.admit(release("x")), Admitted::Wait(_)));
        waiting.truncate(10);
        assert!(
            matches!(outbox.admit(acquire("y")), Admitted::Wait(_)),
            "room again once callers gave up"
        );
    }

    #[test]
    fn a_batch_stops_at_the_key_budget() {
        let outbox = busy();
        let _waiting = queue_acquires(&outbox, MAX_BATCH_KEYS);
        assert!(outbox.land());
        let first = outbox.next_flight().expect("a batch");
        assert_eq!(first.len(), MAX_BATCH_KEYS / 2, "two keys per acquire");
    }
}
