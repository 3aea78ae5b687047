//! The checker: reads a history and says whether the lock kept its
//! promises, and whether the run tested enough to say so.
//!
//! A *hold* is an attempt that won ([`What::Won`]). The holder may assume
//! exclusivity from the moment the acquire returned until the earliest of
//!
//! * its release ([`What::Release`] is stamped before the release is sent),
//! * the latest validity deadline the hold reported (the deadlines of
//!   [`What::Won`], [`What::Renew`], [`What::Lost`] and [`What::Release`]:
//!   renewals extend the interval), and
//! * the kill of its worker (a [`What::FaultStart`] of kind
//!   [`CLIENT_CRASH`] whose target is the worker id), if one came after
//!   the hold was won.
//!
//! A loss notice ([`What::Lost`]) does not end the interval: it reports
//! after the fact, and until the deadline the holder was entitled to
//! believe it was alone.
//!
//! The guarantees checked (a breach makes the verdict [`Verdict::Fail`]):
//!
//! * [`ViolationKind::Overlap`]: two holds of one key whose intervals
//!   intersect (for a read-write lock's readers and a semaphore's permits,
//!   two of one slot);
//! * [`ViolationKind::WriterOverlap`]: a write hold of a read-write lock
//!   name whose interval intersects another hold's of the name, a
//!   reader's or a writer's (see `shared`);
//! * [`ViolationKind::MoreThanKHolders`]: more permit holds of a semaphore
//!   name at one instant than the K their holders took them with (see
//!   `shared`);
//! * [`ViolationKind::TokenRegression`]: per key, in the order the holds
//!   were won, fencing tokens strictly increase (for a read-write lock or
//!   a semaphore, per slot, a writer counting on every slot);
//! * [`ViolationKind::FencedLostUpdate`]: no two accepted writes to a key's
//!   fenced counter read the same value, and the counter's final value is
//!   not below the number of accepted writes (a shortfall the duplicate
//!   reads already account for is not reported twice);
//! * [`ViolationKind::KeysLeft`]: no lock key is left on a node once the
//!   run is quiet;
//! * [`ViolationKind::KeyLeftAfterRelease`]: no lock key is found on a
//!   node the run could reach well after the release or rollback that
//!   should have removed it (judged at every probe, not only at the end:
//!   see `released`);
//! * [`ViolationKind::VoteInQuarantine`]: a node restarted without its data
//!   counts for no acquisition before its quarantine has passed (see
//!   `quarantine`).
//!
//! Also reported, but not lock guarantees (a client paused past its
//! validity writes late; that is what fencing is for):
//! [`ViolationKind::UnfencedLostUpdate`] (the same check on the unfenced
//! counter; it counts towards the verdict only when
//! [`Floors::unfenced_is_protected`] is set, in the negative control) and
//! [`ViolationKind::WriteOutsideHold`] (an accepted write answered after its
//! hold's interval ended, which explains the unfenced losses).
//!
//! A run that did not exercise enough (see [`Floors`]) is
//! [`Verdict::Invalid`], never [`Verdict::Pass`].
//!
//! Everything is `O(n log n)` in the number of events, plus the number of
//! reported violations (the [`MAX_REPORTED_PER_KIND`] earliest per kind;
//! all are counted).
//!
//! The work is split by job, each module using only those before it:
//! [`holds`](holds()) reads the holds, fault spans and final state out of
//! the history; `coverage` counts what the run exercised against the
//! [`Floors`]; `rules` finds the violations, `shared` those of the
//! read-write locks and semaphores, `released` the keys left after their
//! release, and `quarantine` the votes cast too early; `report` draws the
//! verdict and prints the [`CheckReport`].
//!
//! [`What::Won`]: super::history::What::Won
//! [`What::Renew`]: super::history::What::Renew
//! [`What::Lost`]: super::history::What::Lost
//! [`What::Release`]: super::history::What::Release
//! [`What::FaultStart`]: super::history::What::FaultStart

mod coverage;
mod holds;
mod quarantine;
mod released;
mod report;
mod rules;
mod shared;
#[cfg(test)]
mod tests;

pub use coverage::{FaultKindStats, Floors, Stats};
pub use holds::{CLIENT_CRASH, EndedBy, FaultSpan, Hold, faults, holds};
pub use report::{CheckReport, KindCount, Verdict};
pub use rules::{MAX_REPORTED_PER_KIND, Violation, ViolationKind};

pub(super) use holds::secs;
pub(super) use report::thousands;

use super::history::{Event, Mode};
use rules::Found;

/// Checks a history against the lock's guarantees and the coverage
/// `floors`.
pub fn check(events: &[Event], floors: &Floors) -> CheckReport {
    let t0 = events.iter().map(|e| e.t).min().unwrap_or(0);
    let t_end = events.iter().map(|e| e.t).max().unwrap_or(0);
    let holds = holds(events);
    let faults = faults(events);
    let last_final = holds::last_final(events);
    let mut found = Found::new(t0);
    let mut stats = Stats {
        events: events.len() as u64,
        wall_s: secs(t_end, t0),
        final_seen: last_final.is_some(),
        ..Stats::default()
    };

    // What the run exercised.
    let times = coverage::count_events(events, &mut stats);
    coverage::fault_figures(&faults, &times, &mut stats);
    coverage::hold_figures(&holds, &mut stats);

    // The guarantees: per key (by the primitive that took it), then the
    // writes and the final state.
    for key_holds in holds.chunk_by(|a, b| a.key == b.key) {
        let first = Primitive::of(&key_holds[0]);
        if key_holds.iter().all(|h| Primitive::of(h) == first) {
            judge_key(first, key_holds, &mut stats, &mut found);
        } else {
            // One name taken by different primitives (not in a run): each
            // judged on its own.
            for primitive in [Primitive::Mutex, Primitive::ReadWrite, Primitive::Semaphore] {
                let some: Vec<Hold> = key_holds
                    .iter()
                    .filter(|h| Primitive::of(h) == primitive)
                    .cloned()
                    .collect();
                if !some.is_empty() {
                    judge_key(primitive, &some, &mut stats, &mut found);
                }
            }
        }
    }
    rules::check_writes(events, &holds, last_final.as_ref(), &mut stats, &mut found);
    rules::check_keys_left(last_final.as_ref(), &mut found);
    released::check(events, &faults, &mut found);
    quarantine::check(events, &faults, &mut found);

    let coverage_problems = coverage::problems(&stats, floors);
    report::conclude(floors, (t0, t_end), stats, found, coverage_problems)
}

/// Which primitive took a hold, by its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Primitive {
    Mutex,
    ReadWrite,
    Semaphore,
}

impl Primitive {
    fn of(hold: &Hold) -> Primitive {
        match hold.mode {
            None => Primitive::Mutex,
            Some(Mode::Read { .. } | Mode::Write) => Primitive::ReadWrite,
            Some(Mode::Permit { .. }) => Primitive::Semaphore,
        }
    }
}

/// The guarantees of `primitive` over the holds of one name (sorted by
/// start).
fn judge_key(primitive: Primitive, holds: &[Hold], stats: &mut Stats, found: &mut Found) {
    match primitive {
        Primitive::Mutex => {
            rules::check_overlaps(holds, found);
            rules::check_tokens(holds, found);
        }
        Primitive::ReadWrite => {
            let peak = shared::check_writers(holds, found);
            stats.readers_at_once_max = stats.readers_at_once_max.max(peak.at_once);
            shared::check_slot_overlaps(holds, "quorumlock:rw:", found);
            shared::check_slot_tokens(holds, found);
        }
        Primitive::Semaphore => {
            let peak = shared::check_permits(holds, found);
            if peak.at_once >= stats.permits_at_once_max {
                stats.permits_at_once_max = peak.at_once;
                stats.permits_k = stats.permits_k.max(peak.permits);
            }
            shared::check_slot_overlaps(holds, "quorumlock:permit:", found);
            shared::check_slot_tokens(holds, found);
        }
    }
}
