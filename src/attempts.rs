//! The attempts of one acquire call that waits, as a state machine: what
//! to do after each event (the call starts, a wait ends, an attempt fails).
//!
//! It owns the three things the loop decides between attempts, and nothing
//! that does I/O (the caller attempts and sleeps; `wake::Waiter` listens):
//!
//! * **the retry**: the backoff after each failed attempt, the attempt
//!   limit and the wait budget ([`RetryPolicy`]);
//! * **the gate**: an attempt after losing to contention asks one node
//!   first ([`Step::Attempt`]'s `gated`), so that waiters woken by the same
//!   release notice do not split the nodes between them. Not a queued
//!   waiter woken by its own notice: it is first in line, no herd to turn
//!   away; nor a call whose places ask for grants, at all: refused at the
//!   gate, it would take its place there alone, and places that differ
//!   between the nodes split the grants between waiters;
//! * **the notices**: a waiter that woke on a release notice and lost the
//!   race to contenders of other processes sits the next notice out
//!   ([`Nap::listen`]), unless it is queued (the next notice naming it is
//!   its turn) or the gate was not among the notices that woke it (it met
//!   a release on its way to the gate, not a lost race).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::keys::KeySet;
use crate::retry::RetryPolicy;

/// What happened, for [`Attempts::next`].
#[derive(Debug)]
pub(crate) enum Event {
    /// The call starts; `others_wait`: other calls of this lock service
    /// wait for the names already.
    Start { others_wait: bool },
    /// The call starts while this lock service leaves the names to a
    /// waiter of another process, for this long yet (`Wake::step_aside`).
    StartAside(Duration),
    /// A wait ended (not by a handoff's answers, which the caller takes
    /// as the next attempt); how it ended, from the waiter.
    Woke {
        on_notice: bool,
        on_gate_notice: bool,
    },
    /// An attempt failed with an error worth retrying.
    Failed(Error),
    /// The call's first attempt failed without taking places in the
    /// waiter queues (it carried no ticket: see `call::carry_ticket`); the next
    /// one carries it.
    FailedUnplaced(Error),
}

/// What to do next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Attempt now; `gated`: ask the gate first.
    Attempt { gated: bool },
    /// Wait for a release notice, the holder's TTL or the backoff, then
    /// report [`Event::Woke`].
    Wait(Nap),
    /// The budget or the attempt limit is spent.
    GiveUp(Error),
}

/// One wait between attempts.
#[derive(Debug)]
pub(crate) struct Nap {
    /// The failed attempt's error (its nodes' reports tell the waiter
    /// which notices to wait for); `None` before the first attempt.
    pub(crate) after: Option<Error>,
    pub(crate) backoff: Duration,
    /// Whether the next release notice ends the wait.
    pub(crate) listen: bool,
    /// Whether the next attempt asks the gate first (the waiter then
    /// watches for the gate's notice).
    pub(crate) ask_gate: bool,
}

/// The state of one acquire call's attempts.
pub(crate) struct Attempts<'a> {
    retry: &'a RetryPolicy,
    keys: &'a KeySet,
    /// The call has a place in the waiter queues (a fair lock service).
    queued: bool,
    /// Its places ask for grants: its attempts are never gated.
    asks_grants: bool,
    began: Instant,
    budget_end: Instant,
    attempts: u32,
    /// The last attempt lost to contention.
    contended: bool,
    /// How the last wait ended: on a notice, the gate's among them.
    woke_on_notice: bool,
    woke_on_gate_notice: bool,
}

impl<'a> Attempts<'a> {
    pub(crate) fn new(
        retry: &'a RetryPolicy,
        keys: &'a KeySet,
        queued: bool,
        (began, budget_end): (Instant, Instant),
    ) -> Attempts<'a> {
        Attempts {
            retry,
            keys,
            queued,
            asks_grants: false,
            began,
            budget_end,
            attempts: 0,
            contended: false,
            woke_on_notice: false,
            woke_on_gate_notice: false,
        }
    }

    /// The call's places ask for grants (`call::Grants`): no attempt of
    /// it is gated.
    pub(crate) fn asking_grants(mut self, asks: bool) -> Self {
        self.asks_grants = asks;
        self
    }

    /// Attempts made so far.
    pub(crate) fn made(&self) -> u32 {
        self.attempts
    }

    /// The step after `event`, at `now`; `jitter` in `[0, 1)` randomises
    /// the backoff.
    pub(crate) fn next(&mut self, event: Event, now: Instant, jitter: f64) -> Step {
        match event {
            // Others of this lock service wait for it already: queue behind
            // them (first come, first served) rather than barge in with an
            // attempt that would find the name taken or handed over.
            Event::Start { others_wait: true } => Step::Wait(Nap {
                after: None,
                backoff: self.retry.delay(1, jitter),
                listen: true,
                ask_gate: false,
            }),
            Event::Start { others_wait: false } => self.attempt(),
            // Not woken by notices: the release that started the pause
            // may still be announced to this process's subscribers.
            Event::StartAside(pause) => Step::Wait(Nap {
                after: None,
                backoff: pause,
                listen: false,
                ask_gate: false,
            }),
            Event::Woke {
                on_notice,
                on_gate_notice,
            } => {
                self.woke_on_notice = on_notice;
                self.woke_on_gate_notice = on_gate_notice;
                self.attempt()
            }
            Event::Failed(error) => self.failed(error, now, jitter),
            // Take the places at once, on every node (not the gate alone),
            // rather than wait unheard: a release announces itself to the
            // queue's first waiter, and this call is in no queue yet.
            Event::FailedUnplaced(error) => match self.failed(error, now, jitter) {
                Step::Wait(_) => {
                    self.queued = true;
                    self.attempts += 1;
                    Step::Attempt { gated: false }
                }
                give_up => give_up,
            },
        }
    }

    fn attempt(&mut self) -> Step {
        self.attempts += 1;
        Step::Attempt {
            gated: self.contended && !self.asks_grants && !(self.queued && self.woke_on_notice),
        }
    }

    fn failed(&mut self, error: Error, now: Instant, jitter: f64) -> Step {
        self.contended = matches!(error, Error::Contended { .. });
        let out_of_attempts = self
            .retry
            .max_attempts()
            .is_some_and(|max| self.attempts >= max);
        if out_of_attempts || now >= self.budget_end {
            return Step::GiveUp(Error::WaitBudgetExhausted {
                key: self.keys.to_string(),
                attempts: self.attempts,
                waited: now.saturating_duration_since(self.began),
                last: Box::new(error),
            });
        }
        Step::Wait(Nap {
            after: Some(error),
            backoff: self.retry.delay(self.attempts, jitter),
            listen: self.queued || !(self.contended && self.woke_on_gate_notice),
            ask_gate: self.contended,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeReports;

    fn contended() -> Error {
        Error::Contended {
            key: "job".into(),
            free_in: None,
            nodes: NodeReports::default(),
        }
    }

    fn no_quorum() -> Error {
        Error::QuorumNotReached {
            key: "job".into(),
            required: 2,
            won: 1,
            nodes: NodeReports::default(),
        }
    }

    struct Case {
        retry: RetryPolicy,
        keys: std::sync::Arc<KeySet>,
        start: Instant,
    }

    impl Case {
        fn new(retry: RetryPolicy) -> Case {
            Case {
                retry,
                keys: KeySet::new(&["job"]).expect("a valid name"),
                start: Instant::now(),
            }
        }

        fn attempts(&self, queued: bool) -> Attempts<'_> {
            let end = self.start + Duration::from_secs(10);
            Attempts::new(&self.retry, &self.keys, queued, (self.start, end))
        }
    }

    fn woke(on_notice: bool, on_gate_notice: bool) -> Event {
        Event::Woke {
            on_notice,
            on_gate_notice,
        }
    }

    fn nap(step: Step) -> Nap {
        match step {
            Step::Wait(nap) => nap,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    fn gated(step: Step) -> bool {
        match step {
            Step::Attempt { gated } => gated,
            other => panic!("expected an attempt, got {other:?}"),
        }
    }

    #[test]
    fn a_call_attempts_at_once_unless_others_wait() {
        let case = Case::new(RetryPolicy::default());
        let mut alone = case.attempts(false);
        assert!(!gated(alone.next(
            Event::Start { others_wait: false },
            case.start,
            0.0
        )));
        assert_eq!(alone.made(), 1);

        let mut behind = case.attempts(false);
        let first = nap(behind.next(Event::Start { others_wait: true }, case.start, 0.0));
        assert!(first.after.is_none() && first.listen && !first.ask_gate);
        assert_eq!(behind.made(), 0, "no attempt before the wait");
        assert!(!gated(behind.next(woke(true, false), case.start, 0.0)));
    }

    #[test]
    fn a_call_that_steps_aside_sleeps_the_pause_out_then_attempts_ungated() {
        let case = Case::new(RetryPolicy::default());
        let mut a = case.attempts(false);
        let pause = Duration::from_millis(3);
        let first = nap(a.next(Event::StartAside(pause), case.start, 0.0));
        assert_eq!(first.backoff, pause);
        assert!(first.after.is_none() && !first.listen && !first.ask_gate);
        assert_eq!(a.made(), 0, "no attempt before the pause");
        assert!(!gated(a.next(woke(false, false), case.start, 0.0)));
        assert_eq!(a.made(), 1);
    }

    #[test]
    fn contention_gates_the_next_attempt_and_other_failures_do_not() {
        let case = Case::new(RetryPolicy::default());
        let mut a = case.attempts(false);
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        let after = nap(a.next(Event::Failed(contended()), case.start, 0.0));
        assert!(after.ask_gate && after.listen);
        assert!(gated(a.next(woke(false, false), case.start, 0.0)));

        let after = nap(a.next(Event::Failed(no_quorum()), case.start, 0.0));
        assert!(!after.ask_gate);
        assert!(!gated(a.next(woke(false, false), case.start, 0.0)));
    }

    #[test]
    fn a_lost_race_on_the_gates_notice_sits_one_notice_out() {
        let case = Case::new(RetryPolicy::default());
        let mut a = case.attempts(false);
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        a.next(Event::Failed(contended()), case.start, 0.0);
        // Woke on the gate's notice, then lost again: deaf for one notice.
        a.next(woke(true, true), case.start, 0.0);
        let after = nap(a.next(Event::Failed(contended()), case.start, 0.0));
        assert!(!after.listen);
        // Woke on other nodes' notices only: it met a release on its way.
        a.next(woke(true, false), case.start, 0.0);
        let after = nap(a.next(Event::Failed(contended()), case.start, 0.0));
        assert!(after.listen);
    }

    #[test]
    fn a_queued_waiter_woken_by_its_notice_skips_the_gate_and_always_listens() {
        let case = Case::new(RetryPolicy::default());
        let mut a = case.attempts(true);
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        a.next(Event::Failed(contended()), case.start, 0.0);
        assert!(!gated(a.next(woke(true, true), case.start, 0.0)));
        let after = nap(a.next(Event::Failed(contended()), case.start, 0.0));
        assert!(after.listen);
        // Woken by its timer instead: the gate again.
        assert!(gated(a.next(woke(false, false), case.start, 0.0)));
    }

    #[test]
    fn a_first_failure_without_a_place_attempts_again_at_once_ungated_and_queued() {
        let case = Case::new(RetryPolicy::default());
        let mut a = case.attempts(false);
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        assert!(!gated(a.next(
            Event::FailedUnplaced(contended()),
            case.start,
            0.0
        )));
        assert_eq!(a.made(), 2);
        // Queued from now on: woken by its notice, it skips the gate.
        a.next(Event::Failed(contended()), case.start, 0.0);
        assert!(!gated(a.next(woke(true, true), case.start, 0.0)));

        // Out of attempts: it gives up rather than attempt again.
        let case = Case::new(RetryPolicy::default().with_max_attempts(1));
        let mut a = case.attempts(false);
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        let out = a.next(Event::FailedUnplaced(contended()), case.start, 0.0);
        assert!(matches!(out, Step::GiveUp(_)), "{out:?}");
    }

    /// A call whose places ask for grants is never gated, where the same
    /// call without them is after losing to contention.
    #[test]
    fn a_call_that_asks_for_grants_is_never_gated() {
        let case = Case::new(RetryPolicy::default());
        for asks in [false, true] {
            let mut a = case.attempts(false).asking_grants(asks);
            a.next(Event::Start { others_wait: false }, case.start, 0.0);
            a.next(Event::Failed(contended()), case.start, 0.0);
            let woken_by_another_notice = a.next(woke(false, false), case.start, 0.0);
            assert_eq!(gated(woken_by_another_notice), !asks, "asks {asks}");
        }
    }

    #[test]
    fn the_budget_and_the_attempt_limit_end_the_call_with_the_last_error() {
        let case = Case::new(RetryPolicy::default().with_max_attempts(2));
        let mut a = case.attempts(false);
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        nap(a.next(Event::Failed(contended()), case.start, 0.0));
        a.next(woke(false, false), case.start, 0.0);
        match a.next(Event::Failed(no_quorum()), case.start, 0.0) {
            Step::GiveUp(Error::WaitBudgetExhausted { attempts, last, .. }) => {
                assert_eq!(attempts, 2);
                assert!(matches!(*last, Error::QuorumNotReached { .. }));
            }
            other => panic!("expected to give up, got {other:?}"),
        }

        let case = Case::new(RetryPolicy::default());
        let mut b = case.attempts(false);
        b.next(Event::Start { others_wait: false }, case.start, 0.0);
        let late = case.start + Duration::from_secs(10);
        match b.next(Event::Failed(contended()), late, 0.0) {
            Step::GiveUp(Error::WaitBudgetExhausted {
                attempts, waited, ..
            }) => {
                assert_eq!(attempts, 1);
                assert_eq!(waited, Duration::from_secs(10));
            }
            other => panic!("expected to give up, got {other:?}"),
        }
    }

    #[test]
    fn the_backoff_grows_with_the_attempts() {
        let case = Case::new(RetryPolicy::default().with_jitter(0.0));
        let mut a = case.attempts(false);
        let mut backoffs = Vec::new();
        a.next(Event::Start { others_wait: false }, case.start, 0.0);
        for _ in 0..6 {
            backoffs.push(nap(a.next(Event::Failed(no_quorum()), case.start, 0.0)).backoff);
            a.next(woke(false, false), case.start, 0.0);
        }
        assert!(backoffs.windows(2).all(|w| w[0] <= w[1]), "{backoffs:?}");
        assert!(backoffs[0] < backoffs[5], "{backoffs:?}");
    }
}
