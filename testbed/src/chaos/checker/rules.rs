//! The violation checks: overlapping holds, token regressions, lost
//! updates, writes outside their hold and lock keys left behind (see the
//! [module documentation](super) for what each one means). What they find
//! is collected in [`Found`]: all counted, the earliest of each kind kept.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use super::coverage::{Floors, Stats};
use super::holds::{Final, Hold, secs};
use crate::chaos::history::{Event, Mode, Nanos, Target, What};
use crate::table::clip;

/// At most this many violations of each kind are listed in a report, the
/// earliest by start; all of them are counted.
pub const MAX_REPORTED_PER_KIND: usize = 1_000;

/// The kinds of violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// Two holds of one key whose intervals intersect (for a read-write
    /// lock or a semaphore: two holds of one slot).
    Overlap,
    /// A write hold of a read-write lock name whose interval intersects
    /// another hold's (a reader's or a writer's) of the same name.
    WriterOverlap,
    /// More permit holds of a semaphore name at one instant than the K the
    /// holders took them with (see `checker::shared`).
    MoreThanKHolders,
    /// A hold won later than another has a fencing token not above it.
    TokenRegression,
    /// An accepted write to a fenced counter was lost.
    FencedLostUpdate,
    /// A lock key was still on a node after the quiet period.
    KeysLeft,
    /// A lock key was still on a node that could be reached, well after the
    /// release or rollback that should have removed it (judged at each
    /// probe, see `checker::released`).
    KeyLeftAfterRelease,
    /// A node restarted without its data counted for an acquisition before
    /// its quarantine had passed (see `checker::quarantine`).
    VoteInQuarantine,
    /// A write to an unfenced counter was lost. Not a lock guarantee.
    UnfencedLostUpdate,
    /// An accepted write was answered after its hold's interval ended.
    /// Informational.
    WriteOutsideHold,
}

impl ViolationKind {
    /// Every kind, in report order.
    pub const ALL: [ViolationKind; 10] = [
        ViolationKind::Overlap,
        ViolationKind::WriterOverlap,
        ViolationKind::MoreThanKHolders,
        ViolationKind::TokenRegression,
        ViolationKind::FencedLostUpdate,
        ViolationKind::KeysLeft,
        ViolationKind::KeyLeftAfterRelease,
        ViolationKind::VoteInQuarantine,
        ViolationKind::UnfencedLostUpdate,
        ViolationKind::WriteOutsideHold,
    ];

    /// The kind's name in reports (`snake_case`).
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlap",
            ViolationKind::WriterOverlap => "writer_overlap",
            ViolationKind::MoreThanKHolders => "more_than_k_holders",
            ViolationKind::TokenRegression => "token_regression",
            ViolationKind::FencedLostUpdate => "fenced_lost_update",
            ViolationKind::KeysLeft => "keys_left",
            ViolationKind::KeyLeftAfterRelease => "key_left_after_release",
            ViolationKind::VoteInQuarantine => "vote_in_quarantine",
            ViolationKind::UnfencedLostUpdate => "unfenced_lost_update",
            ViolationKind::WriteOutsideHold => "write_outside_hold",
        }
    }

    /// Whether the lock promises this never happens.
    pub fn guaranteed(self) -> bool {
        !matches!(
            self,
            ViolationKind::UnfencedLostUpdate | ViolationKind::WriteOutsideHold
        )
    }

    /// Whether a violation of this kind fails the run under `floors`: the
    /// guaranteed kinds, and unfenced lost updates when the unfenced
    /// counter is declared protected.
    pub fn fails_run(self, floors: &Floors) -> bool {
        self.guaranteed()
            || (self == ViolationKind::UnfencedLostUpdate && floors.unfenced_is_protected)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One violation found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    /// What was violated.
    pub kind: ViolationKind,
    /// Whether the lock promises this never happens (see
    /// [`ViolationKind::guaranteed`]).
    pub guaranteed: bool,
    /// The lock name.
    pub key: String,
    /// Start of the time span concerned (`CLOCK_MONOTONIC`, ns).
    pub start: Nanos,
    /// End of the time span concerned (`CLOCK_MONOTONIC`, ns).
    pub end: Nanos,
    /// `start`, in seconds from the first event of the history.
    pub start_s: f64,
    /// The holds involved.
    pub holds: Vec<String>,
    /// One line for a human.
    pub detail: String,
}

/// The violations found so far: all counted, the
/// [`MAX_REPORTED_PER_KIND`] earliest (by start) of each kind kept.
pub(super) struct Found {
    t0: Nanos,
    counts: [u64; ViolationKind::ALL.len()],
    /// Per kind, a max-heap on (start, arrival): its top is the kept
    /// violation to drop when an earlier one comes.
    kept: [BinaryHeap<Kept>; ViolationKind::ALL.len()],
    arrivals: u64,
}

/// A kept violation, ordered by start, then by arrival (of two with the
/// same start, the one found first is kept).
struct Kept {
    order: (Nanos, u64),
    violation: Violation,
}

impl PartialEq for Kept {
    fn eq(&self, other: &Kept) -> bool {
        self.order == other.order
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Kept) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Kept) -> Ordering {
        self.order.cmp(&other.order)
    }
}

impl Found {
    /// Nothing found yet; violations' seconds count from `t0`.
    pub(super) fn new(t0: Nanos) -> Found {
        Found {
            t0,
            counts: [0; ViolationKind::ALL.len()],
            kept: Default::default(),
            arrivals: 0,
        }
    }

    /// The stamp violations' seconds count from.
    pub(super) fn t0(&self) -> Nanos {
        self.t0
    }

    /// How many violations of `kind` were found.
    pub(super) fn counted(&self, kind: ViolationKind) -> u64 {
        self.counts[kind.index()]
    }

    /// How many violations of `kind` are kept for the list.
    pub(super) fn listed(&self, kind: ViolationKind) -> u64 {
        self.kept[kind.index()].len() as u64
    }

    /// Whether a violation of `kind` starting at `start` would be kept.
    pub(super) fn wants(&self, kind: ViolationKind, start: Nanos) -> bool {
        let kept = &self.kept[kind.index()];
        kept.len() < MAX_REPORTED_PER_KIND || kept.peek().is_some_and(|k| start < k.order.0)
    }

    /// Counts `n` violations of `kind` without listing them.
    pub(super) fn count(&mut self, kind: ViolationKind, n: u64) {
        self.counts[kind.index()] += n;
    }

    /// Counts a violation of `kind` on `key` over `(start, end)`, and keeps
    /// it if it is among the earliest of its kind so far.
    pub(super) fn push(
        &mut self,
        kind: ViolationKind,
        key: &str,
        (start, end): (Nanos, Nanos),
        holds: Vec<String>,
        detail: String,
    ) {
        self.count(kind, 1);
        if !self.wants(kind, start) {
            return;
        }
        let kept = &mut self.kept[kind.index()];
        if kept.len() >= MAX_REPORTED_PER_KIND {
            kept.pop();
        }
        self.arrivals += 1;
        kept.push(Kept {
            order: (start, self.arrivals),
            violation: Violation {
                kind,
                guaranteed: kind.guaranteed(),
                key: key.to_string(),
                start,
                end,
                start_s: secs(start, self.t0),
                holds,
                detail,
            },
        });
    }

    /// The kept violations, by kind, then start, end and arrival.
    pub(super) fn into_violations(self) -> Vec<Violation> {
        let mut violations = Vec::new();
        for kept in self.kept {
            let mut list = kept.into_vec();
            list.sort_by_key(|k| (k.order.0, k.violation.end, k.order.1));
            violations.extend(list.into_iter().map(|k| k.violation));
        }
        violations
    }
}

/// Every pair of intersecting intervals among `holds` (one key, sorted by
/// start). Sweeps by start keeping the holds still open: a hold overlaps
/// exactly the open ones when it starts.
pub(super) fn check_overlaps(holds: &[Hold], found: &mut Found) {
    let kind = ViolationKind::Overlap;
    let mut open: BTreeSet<(Nanos, usize)> = BTreeSet::new();
    for (i, b) in holds.iter().enumerate() {
        while let Some(&(end, _)) = open.first() {
            if end > b.start {
                break;
            }
            open.pop_first();
        }
        if b.end <= b.start {
            continue; // An empty interval overlaps nothing.
        }
        // Every overlap found here starts at `b.start`: once one is not
        // kept, none of the rest would be.
        for (n, &(_, j)) in open.iter().enumerate() {
            if !found.wants(kind, b.start) {
                found.count(kind, (open.len() - n) as u64);
                break;
            }
            let a = &holds[j];
            let (start, end) = (b.start, a.end.min(b.end));
            let detail = format!(
                "{} and {} both held {} for {:.1} ms: {} and {}",
                a.id,
                b.id,
                b.key,
                (end - start) as f64 / 1e6,
                describe(a, found.t0),
                describe(b, found.t0)
            );
            found.push(
                kind,
                &b.key,
                (start, end),
                vec![a.id.clone(), b.id.clone()],
                detail,
            );
        }
        open.insert((b.end, i));
    }
}

/// Fencing tokens must strictly increase in the order holds were won
/// (`holds`: one key, sorted by start). Each token not above the largest
/// one before it is a regression.
pub(super) fn check_tokens(holds: &[Hold], found: &mut Found) {
    let mut max: Option<(u64, &Hold)> = None;
    for b in holds {
        let Some(token) = b.token else { continue };
        match max {
            Some((m, a)) if token <= m => token_regression((a, m), (b, token), found),
            _ => max = Some((token, b)),
        }
    }
}

/// `b`, won after `a`, got a token not above `a`'s.
pub(super) fn token_regression((a, m): (&Hold, u64), (b, token): (&Hold, u64), found: &mut Found) {
    let detail = format!(
        "{} won {} at {:.3} s with token {token}, not above token {m} of {} won at {:.3} s",
        b.id,
        b.key,
        secs(b.start, found.t0),
        a.id,
        secs(a.start, found.t0)
    );
    found.push(
        ViolationKind::TokenRegression,
        &b.key,
        (a.start, b.start),
        vec![a.id.clone(), b.id.clone()],
        detail,
    );
}

/// The writes: counts them into `stats`, reports accepted ones answered
/// after their hold ended, and checks both counter kinds for lost updates
/// (against the final values, when the history has them).
pub(super) fn check_writes(
    events: &[Event],
    holds: &[Hold],
    last_final: Option<&Final<'_>>,
    stats: &mut Stats,
    found: &mut Found,
) {
    let [fenced_writes, unfenced_writes] = accepted_writes(events, holds, stats, found);
    stats.lost_updates_fenced = check_lost_updates(
        fenced_writes,
        last_final.map(|f| (f.fenced, f.t)),
        ViolationKind::FencedLostUpdate,
        found,
    );
    stats.lost_updates_unfenced = check_lost_updates(
        unfenced_writes,
        last_final.map(|f| (f.unfenced, f.t)),
        ViolationKind::UnfencedLostUpdate,
        found,
    );
}

/// No lock key may be left on a node once the run is quiet.
pub(super) fn check_keys_left(last_final: Option<&Final<'_>>, found: &mut Found) {
    let Some(&Final { t, keys_left, .. }) = last_final else {
        return;
    };
    for entry in keys_left {
        let (node, key) = entry.split_once(':').unwrap_or(("?", entry));
        found.push(
            ViolationKind::KeysLeft,
            key,
            (t, t),
            Vec::new(),
            format!("lock key {key} still on {node} after the quiet period"),
        );
    }
}

struct AcceptedWrite<'a> {
    key: &'a str,
    read: u64,
    t: Nanos,
    hold: &'a str,
}

/// Counts the writes into `stats` (accepted, refused, orphans), reports
/// the accepted ones answered after their hold's interval, and returns the
/// accepted writes that read their counter: fenced, then unfenced.
fn accepted_writes<'a>(
    events: &'a [Event],
    holds: &[Hold],
    stats: &mut Stats,
    found: &mut Found,
) -> [Vec<AcceptedWrite<'a>>; 2] {
    let hold_index: HashMap<&str, usize> = holds
        .iter()
        .enumerate()
        .map(|(i, h)| (h.id.as_str(), i))
        .collect();
    let mut accepted: [Vec<AcceptedWrite<'_>>; 2] = [Vec::new(), Vec::new()];
    for e in events {
        let What::Write {
            key,
            hold,
            target,
            read,
            accepted: ok,
            ..
        } = &e.what
        else {
            continue;
        };
        match (target, ok) {
            (Target::Fenced, true) => stats.fenced_writes_accepted += 1,
            (Target::Fenced, false) => stats.fenced_writes_rejected += 1,
            (Target::Unfenced, true) => stats.unfenced_writes += 1,
            (Target::Unfenced, false) => {}
        }
        if !ok {
            continue;
        }
        let h = hold_index.get(hold.as_str()).map(|&i| &holds[i]);
        if h.is_none() {
            stats.orphan_writes += 1;
        }
        if let Some(h) = h.filter(|h| e.t > h.end) {
            report_write_outside_hold(h, e.t, key, *target, found);
        }
        if let Some(read) = read {
            let i = match target {
                Target::Fenced => 0,
                Target::Unfenced => 1,
            };
            accepted[i].push(AcceptedWrite {
                key,
                read: *read,
                t: e.t,
                hold,
            });
        }
    }
    accepted
}

/// An accepted write to `target` of `key`, answered at `t`, after the
/// interval of its hold `h` ended.
fn report_write_outside_hold(h: &Hold, t: Nanos, key: &str, target: Target, found: &mut Found) {
    let what = match target {
        Target::Fenced => "fenced",
        Target::Unfenced => "unfenced",
    };
    let detail = format!(
        "{} wrote {what} {key} at {:.3} s, {:.1} ms after its hold ended ({})",
        h.id,
        secs(t, found.t0),
        (t - h.end) as f64 / 1e6,
        h.ended_by.name()
    );
    found.push(
        ViolationKind::WriteOutsideHold,
        key,
        (h.end, t),
        vec![h.id.clone()],
        detail,
    );
}

/// Lost updates of one counter kind: accepted writes of a key that read
/// the same value, and a final value below the number of accepted writes.
/// Returns the lost updates (per key, the larger of the two counts).
fn check_lost_updates(
    mut writes: Vec<AcceptedWrite<'_>>,
    finals: Option<(&[(String, u64)], Nanos)>,
    kind: ViolationKind,
    found: &mut Found,
) -> u64 {
    let counter = match kind {
        ViolationKind::FencedLostUpdate => "fenced",
        _ => "unfenced",
    };
    writes.sort_by(|a, b| (a.key, a.read, a.t).cmp(&(b.key, b.read, b.t)));
    let mut per_key: BTreeMap<&str, (u64, u64)> = BTreeMap::new(); // (writes, duplicates)
    for group in writes.chunk_by(|a, b| a.key == b.key && a.read == b.read) {
        let first = &group[0];
        let entry = per_key.entry(first.key).or_default();
        entry.0 += group.len() as u64;
        if group.len() < 2 {
            continue;
        }
        entry.1 += group.len() as u64 - 1;
        let last = &group[group.len() - 1];
        let ids: Vec<String> = group.iter().map(|w| w.hold.to_string()).collect();
        let detail = format!(
            "{} accepted writes to the {counter} counter of {} read {} and wrote {}: {} lost ({})",
            group.len(),
            first.key,
            first.read,
            first.read.saturating_add(1),
            group.len() - 1,
            clip(&ids.join(", "), 120)
        );
        found.push(kind, first.key, (first.t, last.t), ids, detail);
    }
    let mut lost = 0;
    let t_final = finals.map_or(0, |(_, t)| t);
    let finals: BTreeMap<&str, u64> = finals
        .map(|(values, _)| values.iter().map(|(k, v)| (k.as_str(), *v)).collect())
        .unwrap_or_default();
    for (key, (n, duplicates)) in &per_key {
        let shortfall = finals.get(key).map_or(0, |&v| n.saturating_sub(v));
        lost += shortfall.max(*duplicates);
        // Duplicate reads already account for that many lost updates.
        if shortfall > *duplicates {
            found.push(
                kind,
                key,
                (t_final, t_final),
                Vec::new(),
                format!(
                    "the {counter} counter of {key} ended at {} after {n} accepted writes: \
                     {shortfall} lost, {duplicates} of them seen as duplicate reads",
                    finals[key]
                ),
            );
        }
    }
    lost
}

/// A hold as a violation names it: its interval, what ended it, the nodes
/// its acquire reported held, and its renewals and loss (what it believed).
pub(super) fn describe(h: &Hold, t0: Nanos) -> String {
    let nodes: Vec<String> = h.nodes.iter().map(|i| format!("n{i}")).collect();
    let mode = match h.mode {
        None => String::new(),
        Some(Mode::Read { slot }) => format!(" read, slot {slot}"),
        Some(Mode::Write) => " write".to_string(),
        Some(Mode::Permit { slot, permits }) => format!(" permit, slot {slot} of {permits}"),
    };
    format!(
        "{}{mode} [{:.3} s, {:.3} s, {}; won on {}; {} renewals{}]",
        h.id,
        secs(h.start, t0),
        secs(h.end, t0),
        h.ended_by.name(),
        if nodes.is_empty() {
            "-".to_string()
        } else {
            nodes.join(",")
        },
        h.renewals,
        if h.lost { ", lost" } else { "" }
    )
}
