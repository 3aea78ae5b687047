//! A waiter of one acquire call: its turn among this lock service's
//! waiters of the name, and its sleep until a release notice, a handoff,
//! the holder's TTL or the backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use tokio::sync::{OwnedMutexGuard, watch};
use tokio::time::Instant;

use super::{HandoffEvent, Offer, Wake, Woken};
use crate::clock::instant_in;
use crate::error::{Error, NodeOutcome, NodeReports};
use crate::keys::{Entry, KeySet};
use crate::stats::{Counters, bump};

/// One acquire call's waiting between attempts.
pub(crate) struct Waiter<'a> {
    pub(super) wake: &'a Wake,
    pub(super) counters: &'a Counters,
    pub(super) keys: Arc<KeySet>,
    /// Its place in the names' waiter queues, if it has one.
    pub(super) queue_id: Option<Arc<str>>,
    pub(super) registration: Option<Registration<'a>>,
    /// The notice counts of each name as of the last attempt.
    pub(super) seen: Vec<Box<[u64]>>,
    pub(super) turn: Option<OwnedMutexGuard<()>>,
    /// Whether it takes turns with the other waiters of its names in this
    /// lock service (a lock's waiters do; an any-of call's, which several
    /// may serve at once, limit themselves: `any_of`).
    pub(super) takes_turns: bool,
    /// Whether the last sleep ended on release notices (not on its timer
    /// or a handoff) that the gate's own was among, or on a release by
    /// this lock service: a gated attempt refused after such a wake lost a
    /// race to other waiters, not to a release still on its way.
    pub(super) woke_on_gate_notice: bool,
    /// Whether the last sleep ended on release notices (its own, for a
    /// waiter that queues: see `deliver`).
    pub(super) woke_on_notice: bool,
}

pub(super) struct Registration<'a> {
    pub(super) wake: &'a Wake,
    pub(super) keys: Arc<KeySet>,
    pub(super) queue_id: Option<Arc<str>>,
    pub(super) notices: Vec<watch::Receiver<Box<[u64]>>>,
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.wake
            .unregister(self.keys.names(), self.queue_id.as_ref());
    }
}

impl Waiter<'_> {
    /// This waiter does not take turns with the other waiters of its names:
    /// its caller limits how many wait at once.
    pub(crate) fn without_turns(mut self) -> Self {
        self.takes_turns = false;
        self
    }

    /// Starts listening at once, before the first attempt, so that a
    /// release while that attempt runs wakes the wait after it: for a call
    /// that expects to wait (others of its lock service wait already).
    /// Without wake-ups, nothing.
    pub(crate) fn listen_now(&mut self) {
        if self.wake.enabled && self.registration.is_none() {
            self.registration = Some(self.wake.register(
                &self.keys,
                self.counters,
                self.queue_id.clone(),
            ));
        }
    }

    /// Whether this waiter has its turn among the waiters of its names in
    /// this lock service, taking it now if it is free (or it takes no
    /// turns). A waiter queued behind another of its service must not ask
    /// a release to take the name for it: it could not use the name before
    /// the other's call ends, and the other would find it held meanwhile.
    /// Call [`listen_now`](Self::listen_now) first; without wake-ups, `false`.
    pub(crate) fn try_turn(&mut self) -> bool {
        if !self.takes_turns || self.turn.is_some() {
            return self.registration.is_some();
        }
        self.turn_if_free()
    }

    /// Takes the turn now if no other waiter of this lock service has it
    /// (`false` too when not registered).
    fn turn_if_free(&mut self) -> bool {
        let Some(registration) = self.registration.as_ref() else {
            return false;
        };
        match Arc::clone(&registration.turn).try_lock_owned() {
            Ok(guard) => {
                self.turn = Some(guard);
                true
            }
            Err(_) => false,
        }
    }

    /// Marks every notice so far as seen: call before each attempt, so a
    /// release announced while the attempt runs wakes the wait after it.
    pub(crate) fn mark(&mut self) {
        if let Some(registration) = &mut self.registration {
            self.seen.clear();
            for notices in &mut registration.notices {
                self.seen.push(notices.borrow_and_update().clone());
            }
        }
    }

    /// Sleeps after a failed attempt until a release notice, the holder's
    /// remaining TTL or `backoff`, whichever comes first, and never past
    /// `budget_end`. Without wake-ups: `backoff` only.
    ///
    /// `next` is the entry the waiter would take next (one name only): while
    /// it sleeps with its turn, a release by this lock service may take the
    /// name for it, and the wait ends with [`Woken::HandedOver`].
    ///
    /// `listen`: whether the next release notice ends the sleep. A waiter
    /// that woke on a notice and lost the race for the name to contenders
    /// of other processes sits one release out: it wakes on the second
    /// release its nodes announce (or its timer): every waiter hears a
    /// notice at the same moment, and a herd that races on each one spends
    /// its CPU on rounds that nobody but one wins. Only one: a waiter deaf
    /// for its whole backoff left the name to the process that released it
    /// and took it straight back (one worker of eight got 80 times the
    /// acquisitions of another). A handoff by this lock service still ends
    /// the sleep.
    ///
    /// `gate`: the node the next attempt asks first. Unless the last
    /// attempt won the gate, [`woke_on_gate_notice`](Self::woke_on_gate_notice)
    /// stays false when the notices that end the wait do not include the
    /// gate's: the nodes' notices come in any order, and an attempt that
    /// reaches the gate before its release is refused there without having
    /// lost a race, so it must not sit the next notice out.
    pub(crate) async fn wait(
        &mut self,
        error: Option<&Error>,
        backoff: Duration,
        budget_end: Instant,
        next: Option<Entry>,
        listen: bool,
        gate: Option<usize>,
    ) -> Woken {
        let wake = self.wake;
        self.woke_on_gate_notice = false;
        self.woke_on_notice = false;
        if !wake.enabled {
            tokio::time::sleep_until(instant_in(backoff).min(budget_end)).await;
            return Woken::Retry;
        }
        self.listen_now();
        if self.takes_turns && self.turn.is_none() && !self.take_turn(budget_end).await {
            return Woken::Retry;
        }
        let free_in = match error {
            Some(Error::Contended {
                free_in: Some(free_in),
                ..
            }) => *free_in,
            _ => backoff,
        };
        let until = instant_in(backoff.min(free_in)).min(budget_end);
        let awaited = Awaited::after(error, wake.required, gate, listen);
        self.sleep_until_notice(until, awaited, next).await
    }

    /// Whether the last [`wait`](Self::wait) ended on release notices, the
    /// gate's among them unless the gate was won (see `gate` there).
    pub(crate) fn woke_on_gate_notice(&self) -> bool {
        self.woke_on_gate_notice
    }

    /// Whether the last [`wait`](Self::wait) ended on release notices.
    pub(crate) fn woke_on_notice(&self) -> bool {
        self.woke_on_notice
    }

    /// Takes this waiter's turn among the waiters of this lock service,
    /// queuing behind the one whose turn it is. `false`: attempt now
    /// without sleeping (the budget ran out while queued, or a release came
    /// while queued).
    pub(super) async fn take_turn(&mut self, budget_end: Instant) -> bool {
        if self.turn_if_free() {
            return true;
        }
        let Some(registration) = self.registration.as_mut() else {
            return false;
        };
        if self.seen.len() != registration.notices.len() {
            // Registered after the attempt: count from now.
            self.seen = snapshot(&mut registration.notices);
        }
        // Another waiter of this lock service attempts for the name: queue
        // behind it, sending nothing meanwhile.
        let Ok(guard) =
            tokio::time::timeout_at(budget_end, Arc::clone(&registration.turn).lock_owned()).await
        else {
            return false;
        };
        self.turn = Some(guard);
        // The waiter before us may have won and released already, before we
        // could offer a handoff: its release is among the notices since we
        // queued. Any notice at all: attempt now rather than sleep through
        // it. (A fresh count here once lost that release, and the waiter
        // slept its whole backoff.)
        !notices_since(&registration.notices, &self.seen)
    }

    /// Sleeps with the turn until `until`, until releases announced by
    /// `awaited.needed` nodes (or one by this lock service), or until a
    /// release hands `next` over.
    pub(super) async fn sleep_until_notice(
        &mut self,
        until: Instant,
        awaited: Awaited,
        next: Option<Entry>,
    ) -> Woken {
        let wake = self.wake;
        let Some(registration) = self.registration.as_mut() else {
            return Woken::Retry;
        };
        if self.seen.len() != registration.notices.len() {
            // Registered after the attempt: count from now.
            self.seen = snapshot(&mut registration.notices);
        }
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        // Offer the turn to a release of this lock service.
        let mut offered = next.map(|entry| Offer::make(wake, entry));
        let woken = loop {
            let step = {
                let notices = registration
                    .notices
                    .iter_mut()
                    .map(|n| Box::pin(n.changed()));
                let handed = async {
                    match offered.as_mut() {
                        Some(offer) => offer.answers.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    first = handed => Step::Handed(first),
                    _ = select_all(notices) => Step::Notice,
                    () = &mut sleep => Step::Timer,
                }
            };
            match step {
                Step::Handed(Some(first)) => {
                    if let Some(offer) = offered.take() {
                        return offer.handed_over(Some(first));
                    }
                }
                // The releaser dropped the offer unused: wait on.
                Step::Handed(None) => offered = None,
                Step::Notice => {
                    let heard = Heard::since(&registration.notices, &self.seen);
                    if heard.quorum_may_be_free(awaited.needed, awaited.skip) {
                        bump(&self.counters.woken);
                        self.woke_on_notice = true;
                        self.woke_on_gate_notice =
                            heard.local || awaited.gate.is_none_or(|g| heard.node(g));
                        break Woken::Retry;
                    }
                }
                Step::Timer => break Woken::Retry,
            }
        };
        match offered {
            // A release took the offer just now: its answers are coming.
            Some(offer) if !wake.withdraw(&offer.name, &offer.entry) => offer.handed_over(None),
            _ => woken,
        }
    }
}

/// The notice counts of every name now, marked as seen.
pub(super) fn snapshot(notices: &mut [watch::Receiver<Box<[u64]>>]) -> Vec<Box<[u64]>> {
    notices
        .iter_mut()
        .map(|n| n.borrow_and_update().clone())
        .collect()
}

/// Whether any release was announced (by a node or locally) since `seen`.
pub(super) fn notices_since(notices: &[watch::Receiver<Box<[u64]>>], seen: &[Box<[u64]>]) -> bool {
    notices
        .iter()
        .zip(seen)
        .any(|(now, seen)| now.borrow().iter().zip(seen.iter()).any(|(n, s)| n > s))
}

/// What ended one pass of a wait.
pub(super) enum Step {
    Handed(Option<HandoffEvent>),
    Notice,
    Timer,
}

/// What a wait listens for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Awaited {
    /// How many distinct nodes' release notices end it.
    pub(super) needed: usize,
    /// How many releases per node it sits out (see `listen` in
    /// [`Waiter::wait`]).
    pub(super) skip: u64,
    /// The node the next attempt asks first, unless the last attempt won
    /// it (see [`Awaited::after`]).
    pub(super) gate: Option<usize>,
}

impl Awaited {
    /// What the wait after the failed attempt `error` listens for, when a
    /// quorum needs `required` nodes: see `listen` and `gate` in
    /// [`Waiter::wait`].
    ///
    /// Nodes the attempt won were rolled back: free. A quorum needs that
    /// many more to announce a release. Only the nodes it found held
    /// announce (the attempt marked the name there, see
    /// `scripts/acquire.lua`): one, if it was refused at the gate.
    ///
    /// The gate is watched unless the attempt won it: a gate it found held,
    /// or whose answer it did not wait for (decided at the quorum before
    /// the gate answered, or failed), may still be on its way to a release.
    /// Taking such a gate for free once made a waiter that met the gate's
    /// release on its way there sit that very release out, and sleep its
    /// whole backoff on a free name.
    pub(super) fn after(
        error: Option<&Error>,
        required: usize,
        gate: Option<usize>,
        listen: bool,
    ) -> Awaited {
        let (mut won, mut held, mut gate_won) = (0, 0, false);
        let reports = error.and_then(Error::node_reports);
        for (i, report) in reports.into_iter().flat_map(NodeReports::iter).enumerate() {
            match report.outcome {
                NodeOutcome::Won => {
                    won += 1;
                    gate_won |= gate == Some(i);
                }
                // A node where others wait ahead announces its next
                // release too (it has a queue).
                NodeOutcome::HeldByOther { .. } | NodeOutcome::WaitersAhead => held += 1,
                _ => {}
            }
        }
        let needed = required.saturating_sub(won);
        let needed = if held > 0 { needed.min(held) } else { needed }.max(1);
        Awaited {
            needed,
            skip: u64::from(!listen),
            gate: gate.filter(|_| !gate_won),
        }
    }
}

/// The releases announced since a waiter's last snapshot.
pub(super) struct Heard {
    /// By this lock service (queued on every node).
    pub(super) local: bool,
    /// Per node (any number of them): how many it announced.
    pub(super) nodes: Vec<u64>,
}

impl Heard {
    pub(super) fn since(notices: &[watch::Receiver<Box<[u64]>>], seen: &[Box<[u64]>]) -> Heard {
        let mut heard = Heard {
            local: false,
            nodes: Vec::new(),
        };
        for (now, seen) in notices.iter().zip(seen) {
            let now = now.borrow();
            let Some((last, nodes)) = now.split_last() else {
                continue;
            };
            heard.local |= seen.last().is_some_and(|s| last > s);
            if heard.nodes.len() < nodes.len() {
                heard.nodes.resize(nodes.len(), 0);
            }
            for (i, (n, s)) in nodes.iter().zip(seen.iter()).enumerate() {
                heard.nodes[i] += n.saturating_sub(*s);
            }
        }
        heard
    }

    /// Whether node `i` announced a release.
    pub(super) fn node(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|n| *n > 0)
    }

    /// Whether a quorum may be free: a release by this lock service, or
    /// releases announced by at least `needed` distinct nodes, each more
    /// than `skip` times. Waiting for enough nodes rather than the first
    /// avoids an attempt that reaches the other nodes before their release
    /// does and fails.
    pub(super) fn quorum_may_be_free(&self, needed: usize, skip: u64) -> bool {
        self.local || self.nodes.iter().filter(|n| **n > skip).count() >= needed
    }
}
