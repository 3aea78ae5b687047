//! The lease's rules on its own, without Redis: the deadline arithmetic,
//! the loss time, what a won or missed round does to the deadline, late
//! replies, and that an ended lease stays ended.
//!
//! The times are real (`Stamp::now()`), so every test keeps seconds between
//! the instants it compares: a round just started has about 5.9 s left
//! before its loss time, one started [`NEAR_END`] ago is 2 s past its loss
//! time and 2 s before its deadline, and nothing here depends on how fast
//! the test runs within that.

use super::*;
use crate::retry::RetryPolicy;

const TTL: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(4);
const INTERVAL: Duration = Duration::from_secs(3);
const DRIFT_FACTOR: f64 = 0.01;
/// How long ago a round started whose deadline (`start + 9.898 s`) is 2 s
/// away and whose loss time (4 s earlier) passed 2 s ago.
const NEAR_END: Duration = Duration::from_millis(7_898);

/// A core that never connects ([`Core::offline`]) with round numbers: a
/// 10 s TTL (9.898 s of it past the drift), a 4 s loss margin (wide, so
/// that "past the loss time, before the deadline" lasts long enough to
/// test), renewals every 3 s.
fn core(configure: impl FnOnce(crate::LockConfigBuilder) -> crate::LockConfigBuilder) -> Arc<Core> {
    Core::offline(|b| {
        configure(
            b.ttl(TTL)
                .drift_factor(DRIFT_FACTOR)
                .loss_margin(MARGIN)
                .renew_interval(INTERVAL),
        )
    })
}

/// An unwatched lease whose acquire round started at `start`.
fn lease(start: Stamp) -> Lease {
    Lease::held_since(&core(|b| b), start, false)
}

/// The deadline of a round that started at `start` and gave the keys `ttl`.
fn deadline_of(start: Stamp, ttl: Duration) -> Stamp {
    start.after(quorum::lease(ttl, DRIFT_FACTOR))
}

fn win(start: Stamp, ttl: Duration) -> Win {
    Win {
        start,
        ttl,
        holds: vec![Hold::Held, Hold::Held, Hold::NotHeld],
        renewal: None,
    }
}

fn ago(d: Duration) -> Stamp {
    Stamp::now().before(d)
}

#[test]
fn holds_follow_the_votes() {
    let votes = [
        Some(Vote::Won),
        Some(Vote::Contended),
        Some(Vote::Failed),
        None,
    ];
    assert_eq!(
        Hold::from_votes(&votes),
        [Hold::Held, Hold::NotHeld, Hold::NotHeld, Hold::Unknown]
    );
}

#[test]
fn the_deadline_counts_from_the_acquire_rounds_start() {
    let start = ago(Duration::from_secs(2));
    let lease = lease(start);
    // ttl − drift from the start, not from when the lease was made.
    assert_eq!(lease.deadline(), deadline_of(start, TTL));
    assert_eq!(
        lease.deadline().saturating_since(start),
        TTL - Duration::from_millis(100 + 2)
    );
    assert_eq!(lease.key_ttl(), TTL);
    assert!(lease.is_held());
    assert!(lease.ensure_held().is_ok());
}

#[test]
fn the_loss_time_is_the_deadline_less_the_margin_scaled_to_the_ttl() {
    let lease = lease(Stamp::now());
    let deadline = lease.deadline();
    assert_eq!(lease.loss_time(deadline, TTL), deadline.before(MARGIN));
    assert_eq!(
        lease.loss_time(deadline, TTL * 2),
        deadline.before(MARGIN * 2)
    );
    assert_eq!(
        lease.loss_time(deadline, TTL / 2),
        deadline.before(MARGIN / 2)
    );
}

#[test]
fn renewals_are_due_an_interval_after_the_rounds_start_within_the_maximum_hold() {
    let core = core(|b| b.max_hold(Duration::from_secs(5)));
    let start = Stamp::now();
    let lease = Lease::held_since(&core, start, true);
    assert_eq!(lease.next_renewal(), Some(start.after(INTERVAL)));
    assert!(!lease.max_hold_reached());
    // The interval scales with the TTL.
    assert_eq!(
        lease.next_renewal_after(start, TTL / 2),
        Some(start.after(INTERVAL / 2))
    );
    // 6 s after the acquire is past the 5 s maximum hold.
    assert_eq!(lease.next_renewal_after(start, TTL * 2), None);
}

#[test]
fn a_lease_whose_first_renewal_is_past_the_maximum_hold_never_renews() {
    let core = core(|b| b.max_hold(Duration::from_secs(2)));
    let lease = Lease::held_since(&core, Stamp::now(), true);
    assert_eq!(lease.next_renewal(), None);
    assert!(lease.max_hold_reached());
}

#[test]
fn a_win_moves_the_deadline_to_its_own_rounds_deadline() {
    let lease = lease(ago(Duration::from_secs(3)));
    let start = ago(Duration::from_secs(1));
    assert_eq!(lease.record_win(win(start, TTL)), Recorded::Moved);
    assert_eq!(lease.deadline(), deadline_of(start, TTL));
    assert_eq!(lease.holds(), [Hold::Held, Hold::Held, Hold::NotHeld]);
    assert_eq!(lease.last_renewal(), None, "an extend is no renewal");

    // A shorter TTL moves it to that round's deadline, earlier than before.
    let start = Stamp::now();
    let short = Duration::from_secs(5);
    assert_eq!(lease.record_win(win(start, short)), Recorded::Moved);
    assert_eq!(lease.deadline(), deadline_of(start, short));
    assert_eq!(lease.key_ttl(), short);
}

#[test]
fn a_win_past_its_own_loss_time_is_too_late_and_changes_nothing() {
    let lease = lease(Stamp::now());
    let before = lease.deadline();
    // Its deadline is 2 s away: within the 4 s margin.
    let late = ago(NEAR_END);
    assert_eq!(lease.record_win(win(late, TTL)), Recorded::TooLate);
    assert_eq!(lease.deadline(), before);
    assert_eq!(lease.holds(), [Hold::Held; 3]);
    assert!(lease.is_held());
}

#[test]
fn a_win_after_the_leases_loss_time_ends_it_and_it_stays_ended() {
    // Inside the margin, still before the deadline.
    let lease = lease(ago(NEAR_END));
    assert!(lease.is_held(), "before the deadline");
    assert_eq!(lease.record_win(win(Stamp::now(), TTL)), Recorded::Ended);
    assert!(!lease.is_held());
    assert!(lease.has_ended());
    assert!(lease.cancel.is_cancelled());
    let notice = lease.ended_notice().expect("ended");
    assert_eq!(notice.reason, LostReason::ValidityExpired);
    assert!(notice.at <= notice.deadline, "lost before the deadline");

    // A guard never turns from not held back to held.
    assert_eq!(lease.record_win(win(Stamp::now(), TTL)), Recorded::Ended);
    assert!(!lease.is_held());
    assert!(lease.deadline() <= Stamp::now());
}

#[test]
fn a_miss_only_moves_the_deadline_earlier() {
    let lease = lease(ago(Duration::from_secs(2)));
    let before = lease.deadline();
    // The same TTL from a later start would be later: it is not taken.
    assert!(lease.record_miss(Stamp::now(), TTL, None, None));
    assert_eq!(lease.deadline(), before);
    assert_eq!(lease.holds(), [Hold::Held; 3], "no holds given, none shown");

    // A shorter TTL some nodes may have taken: their keys go earlier.
    let start = Stamp::now();
    let short = Duration::from_secs(5);
    let holds = vec![Hold::Held, Hold::NotHeld, Hold::Unknown];
    assert!(lease.record_miss(start, short, Some(holds.clone()), None));
    assert_eq!(lease.deadline(), deadline_of(start, short));
    assert_eq!(lease.holds(), holds);
    assert_eq!(
        lease.key_ttl(),
        TTL,
        "a miss keeps the TTL the loss time scales with"
    );
    assert!(lease.is_held());
}

#[test]
fn a_miss_with_the_keys_gone_ends_the_lease() {
    let lease = lease(Stamp::now());
    let reports = NodeReports::default();
    assert!(lease.record_miss(Stamp::now(), TTL, None, Some(reports.clone())));
    assert!(!lease.is_held());
    assert_eq!(
        lease.ended_notice().map(|n| n.reason),
        Some(LostReason::KeysGone(reports))
    );
}

#[test]
fn a_miss_after_the_loss_time_records_nothing() {
    let lease = lease(ago(NEAR_END));
    let before = lease.deadline();
    let short = Duration::from_secs(1);
    assert!(!lease.record_miss(ago(Duration::from_secs(5)), short, None, None));
    assert!(lease.has_ended());
    assert!(lease.deadline() <= before);
    assert!(lease.deadline() <= Stamp::now());
}

#[test]
fn an_ended_lease_keeps_its_reason_and_nothing_moves_its_deadline() {
    let lease = lease(Stamp::now());
    lease.end(LostReason::Released);
    let deadline = lease.deadline();
    assert!(
        deadline <= Stamp::now(),
        "ending moves the deadline to now at the latest"
    );
    assert_eq!(
        deadline.remaining(),
        Duration::ZERO,
        "validity is never negative"
    );

    assert_eq!(lease.record_win(win(Stamp::now(), TTL)), Recorded::Ended);
    assert!(!lease.record_miss(Stamp::now(), TTL, None, None));
    lease.end(LostReason::ValidityExpired);
    assert_eq!(lease.deadline(), deadline);
    assert!(!lease.is_held());
    // The first reason stands.
    let lost = Error::Lost {
        key: "k".to_string(),
        reason: LostReason::Released,
    };
    assert_eq!(
        lease.ensure_held().unwrap_err().to_string(),
        lost.to_string()
    );
    assert_eq!(lease.ended_error().to_string(), lost.to_string());
}

#[test]
fn a_lease_past_its_deadline_is_not_held_and_ends_when_checked() {
    let lease = lease(ago(Duration::from_secs(20)));
    assert!(!lease.is_held());
    assert!(!lease.has_ended(), "only the check ends it");
    assert!(lease.ensure_held().is_err());
    assert_eq!(
        lease.ended_notice().map(|n| n.reason),
        Some(LostReason::ValidityExpired)
    );
}

#[test]
fn expiry_says_why_the_lease_was_not_renewed() {
    let old = ago(NEAR_END);
    let unwatched = lease(old);
    unwatched.expire_if_due();
    assert_eq!(
        unwatched.ended_notice().map(|n| n.reason),
        Some(LostReason::ValidityExpired)
    );

    let core = core(|b| b);
    let failing = Lease::held_since(&core, old, true);
    let reports = NodeReports::default();
    failing.set_last_failure(reports.clone());
    failing.expire_if_due();
    assert_eq!(
        failing.ended_notice().map(|n| n.reason),
        Some(LostReason::RenewalsFailed(reports))
    );

    let max = Duration::from_secs(2);
    let core = self::core(|b| b.max_hold(max));
    let capped = Lease::held_since(&core, old, true);
    capped.expire_if_due();
    assert_eq!(
        capped.ended_notice().map(|n| n.reason),
        Some(LostReason::MaxHoldReached(max))
    );
}

#[test]
fn expiry_before_the_loss_time_does_nothing() {
    let lease = lease(Stamp::now());
    lease.expire_if_due();
    assert!(!lease.has_ended());
    assert!(lease.is_held());
}

#[test]
fn late_replies_complete_the_renewal_they_belong_to() {
    let core = core(|b| b);
    let lease = Lease::held_since(&core, ago(Duration::from_secs(3)), true);
    let start = ago(Duration::from_secs(1));
    let renewal = Win {
        renewal: Some((2, 0)),
        ..win(start, TTL)
    };
    assert_eq!(lease.record_win(renewal), Recorded::Moved);
    let first = lease.last_renewal().expect("a renewal");
    assert_eq!((first.started, first.held, first.healed), (start, 2, 0));
    assert_eq!(lease.next_renewal(), Some(start.after(INTERVAL)));

    lease.record_late_replies(start, vec![Hold::Held; 3], 3, 1);
    let completed = lease.last_renewal().expect("a renewal");
    assert_eq!((completed.held, completed.healed), (3, 1));
    assert_eq!(lease.holds(), [Hold::Held; 3]);

    // Another round's late replies show the nodes, not that round's counts.
    let deadline = lease.deadline();
    let holds = vec![Hold::NotHeld, Hold::Held, Hold::Held];
    lease.record_late_replies(Stamp::now(), holds.clone(), 1, 0);
    assert_eq!(lease.last_renewal(), Some(completed));
    assert_eq!(lease.holds(), holds);
    assert_eq!(
        lease.deadline(),
        deadline,
        "late replies never move the deadline"
    );

    // Nor does anything of an ended lease.
    lease.end(LostReason::Released);
    lease.record_late_replies(start, vec![Hold::Unknown; 3], 0, 0);
    assert_eq!(lease.holds(), holds);
    assert_eq!(lease.last_renewal(), Some(completed));
}

#[test]
fn a_retry_is_scheduled_within_the_loss_time_or_not_at_all() {
    let retry = RetryPolicy::default()
        .with_base_delay(Duration::from_secs(2))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter(0.0);
    let core = core(|b| b.retry(retry));
    // Loss time about 5.9 s away: a 2 s retry fits.
    let lease = Lease::held_since(&core, Stamp::now(), true);
    let before = Stamp::now();
    lease.schedule_retry(NodeReports::default(), 0.0);
    let next = lease.next_renewal().expect("a retry");
    assert!(next >= before.after(Duration::from_secs(2)));
    assert!(next < lease.loss_time(lease.deadline(), TTL));

    // Loss time about 0.9 s away: a 2 s retry would come after it.
    let lease = Lease::held_since(&core, ago(Duration::from_secs(5)), true);
    lease.schedule_retry(NodeReports::default(), 0.0);
    assert_eq!(lease.next_renewal(), None);
    assert!(
        !lease.max_hold_reached(),
        "the loss time, not the maximum hold"
    );
}

#[test]
fn one_loss_entry_per_loss_time() {
    let lease = lease(Stamp::now());
    let loss = lease.loss_time(lease.deadline(), TTL);
    assert_eq!(lease.watch_times(), Some((None, Some(loss))));
    assert_eq!(lease.watch_times(), Some((None, None)), "already scheduled");

    let start = Stamp::now();
    assert_eq!(lease.record_win(win(start, TTL)), Recorded::Moved);
    let moved = lease.loss_time(deadline_of(start, TTL), TTL);
    assert_eq!(lease.watch_times(), Some((None, Some(moved))));

    lease.end(LostReason::Released);
    assert_eq!(lease.watch_times(), None);
}

#[test]
fn only_the_round_in_flight_gives_its_slot_back() {
    let core = core(|b| b);
    let lease = Lease::held_since(&core, Stamp::now(), true);
    let renewal = Flight::new();
    let now = Stamp::now();
    let horizon = now.after(INTERVAL * 2);
    assert!(matches!(
        lease.claim_renewal(now, horizon, &renewal),
        RenewalClaim::Renew(ttl) if ttl == TTL
    ));
    // Another round cannot take the slot, nor give it back.
    let other = Flight::new();
    lease.unclaim(&other);
    assert!(matches!(
        lease.claim_renewal(now, horizon, &other),
        RenewalClaim::Drop
    ));
    lease.unclaim(&renewal);
    assert!(matches!(
        lease.claim_renewal(now, horizon, &other),
        RenewalClaim::Renew(ttl) if ttl == TTL
    ));
}

#[test]
fn a_retry_is_not_pulled_forward() {
    let core = core(|b| b);
    let lease = Lease::held_since(&core, Stamp::now(), true);
    let now = Stamp::now();
    let horizon = now.after(INTERVAL * 2);
    let retry_at = now.after(Duration::from_secs(1));
    lease.set_schedule(Some(retry_at), 1);
    assert!(matches!(
        lease.claim_renewal(now, horizon, &Flight::new()),
        RenewalClaim::Later(at) if at == retry_at
    ));
    // Without failures the same entry is due by the horizon: renewed now.
    lease.set_schedule(Some(retry_at), 0);
    assert!(matches!(
        lease.claim_renewal(now, horizon, &Flight::new()),
        RenewalClaim::Renew(_)
    ));
}
