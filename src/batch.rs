//! Group commit's turn-taking: which caller sends to a node now, and which
//! calls wait to go out together in the next batch.
//!
//! A node has one sender at a time: the *turn*. A call that finds the turn
//! free and nobody queued takes it and goes out alone, at once, so a lone
//! caller pays nothing for batching. Calls that arrive while the turn is
//! taken queue; when the turn's call has its reply (or is abandoned), its
//! holder takes the whole queue as the next batch, which goes out as one
//! script call. Under load the batches grow by themselves, with no timer:
//! the longer a round trip, the more calls gather behind it.
//!
//! The turn also orders: only its holder sends, and it takes the queue in
//! arrival order, so a call (a rollback, a release) queued after another
//! is never sent before it.
//!
//! This module is the bookkeeping alone (no I/O, no async); [`crate::node`]
//! sends.

use std::sync::{Mutex, PoisonError};

/// The queue length from which [`Batcher::offer`] prunes.
pub(crate) const PRUNE_FROM: usize = 64;

/// The turn and the queue of one node, for calls of type `T`.
#[derive(Debug)]
pub(crate) struct Batcher<T> {
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    taken: bool,
    queue: Vec<T>,
}

/// What [`Batcher::offer`] decided for a call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offer<T> {
    /// The caller has the turn: send `T` now, then call
    /// [`Batcher::next_batch`].
    SendNow(T),
    /// Queued: the turn's holder sends it.
    Queued,
}

impl<T> Default for Batcher<T> {
    fn default() -> Self {
        Batcher {
            state: Mutex::new(State {
                taken: false,
                queue: Vec::new(),
            }),
        }
    }
}

impl<T> Batcher<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the turn for `call` if it is free, or queues the call. A
    /// queue that reaches a power of two from [`PRUNE_FROM`] on first drops
    /// the calls nobody waits for any more (`awaited` false), so a turn
    /// held long (a node slow to answer) keeps no more than the calls still
    /// awaited.
    pub(crate) fn offer(&self, call: T, awaited: impl Fn(&T) -> bool) -> Offer<T> {
        let mut state = self.state();
        if state.taken {
            let len = state.queue.len();
            if len >= PRUNE_FROM && len.is_power_of_two() {
                state.queue.retain(awaited);
            }
            state.queue.push(call);
            Offer::Queued
        } else {
            state.taken = true;
            Offer::SendNow(call)
        }
    }

    /// For the turn's holder once its call is done: the calls queued
    /// meanwhile, in arrival order, which it must now send (it keeps the
    /// turn), or `None`, and the turn is free.
    pub(crate) fn next_batch(&self) -> Option<Vec<T>> {
        let mut state = self.state();
        if state.queue.is_empty() {
            state.taken = false;
            None
        } else {
            Some(std::mem::take(&mut state.queue))
        }
    }

    /// How many calls wait for the turn while it is taken; `None` while it
    /// is free.
    pub(crate) fn waiting(&self) -> Option<usize> {
        let state = self.state();
        state.taken.then_some(state.queue.len())
    }

    /// For a holder that can no longer send (no runtime left to send on):
    /// frees the turn and returns every queued call, whose callers then
    /// hear that their call was dropped.
    pub(crate) fn abandon(&self) -> Vec<T> {
        let mut state = self.state();
        state.taken = false;
        std::mem::take(&mut state.queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn always(_: &i32) -> bool {
        true
    }

    #[test]
    fn a_long_queue_drops_the_calls_nobody_waits_for() {
        let batcher = Batcher::default();
        assert_eq!(batcher.offer(-1, always), Offer::SendNow(-1));
        let odd = |n: &i32| n % 2 == 1;
        // Odd calls are still awaited.
        for n in 0..=PRUNE_FROM as i32 {
            assert_eq!(batcher.offer(n, odd), Offer::Queued);
        }
        // The offer that found 64 queued pruned them first, then queued.
        let batch = batcher.next_batch().expect("queued");
        assert_eq!(batch.len(), PRUNE_FROM / 2 + 1);
        assert!(batch[..PRUNE_FROM / 2].iter().all(odd));
        assert_eq!(batch.last(), Some(&(PRUNE_FROM as i32)));
    }

    #[test]
    fn a_lone_call_goes_out_at_once_and_frees_the_turn() {
        let batcher = Batcher::default();
        assert_eq!(batcher.offer(1, always), Offer::SendNow(1));
        assert_eq!(batcher.next_batch(), None);
        assert_eq!(batcher.offer(2, always), Offer::SendNow(2));
    }

    #[test]
    fn calls_during_a_turn_go_out_together_in_arrival_order() {
        let batcher = Batcher::default();
        assert_eq!(batcher.offer(1, always), Offer::SendNow(1));
        assert_eq!(batcher.offer(2, always), Offer::Queued);
        assert_eq!(batcher.offer(3, always), Offer::Queued);
        assert_eq!(batcher.next_batch(), Some(vec![2, 3]));
        // The holder keeps the turn while it sends the batch.
        assert_eq!(batcher.offer(4, always), Offer::Queued);
        assert_eq!(batcher.next_batch(), Some(vec![4]));
        assert_eq!(batcher.next_batch(), None);
        assert_eq!(batcher.offer(5, always), Offer::SendNow(5));
    }

    #[test]
    fn an_abandoned_turn_hands_back_the_queue_and_frees_the_turn() {
        let batcher = Batcher::default();
        assert_eq!(batcher.offer(1, always), Offer::SendNow(1));
        assert_eq!(batcher.offer(2, always), Offer::Queued);
        assert_eq!(batcher.abandon(), vec![2]);
        assert_eq!(batcher.offer(3, always), Offer::SendNow(3));
    }
}
