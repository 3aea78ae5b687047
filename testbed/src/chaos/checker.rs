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
//!   intersect;
//! * [`ViolationKind::TokenRegression`]: per key, in the order the holds
//!   were won, fencing tokens strictly increase;
//! * [`ViolationKind::FencedLostUpdate`]: no two accepted writes to a key's
//!   fenced counter read the same value, and the counter's final value is
//!   not below the number of accepted writes (a shortfall the duplicate
//!   reads already account for is not reported twice);
//! * [`ViolationKind::KeysLeft`]: no lock key is left on a node once the
//!   run is quiet.
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

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::history::{Event, Nanos, Target, What};

/// The fault kind that kills a worker process; its target is the worker id.
pub const CLIENT_CRASH: &str = "client_crash";

/// At most this many violations of each kind are listed in a report, the
/// earliest by start; all of them are counted.
pub const MAX_REPORTED_PER_KIND: usize = 1_000;

/// How much a run must have exercised for its verdict to be
/// [`Verdict::Pass`]. Below any floor the verdict is [`Verdict::Invalid`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Floors {
    /// Fewest acquisitions ([`What::Won`] events).
    pub min_acquisitions: u64,
    /// Fewest faults injected ([`What::FaultStart`] events).
    pub min_faults: u64,
    /// Fault kinds that must each have been injected at least once.
    pub required_kinds: Vec<String>,
    /// Smallest share (0 to 1) of acquire attempts started while a fault
    /// was active.
    pub min_during_fault_ratio: f64,
    /// Treat the unfenced counter as protected: its lost updates fail the
    /// run. Set by the negative control that shows the hazard.
    pub unfenced_is_protected: bool,
}

impl Floors {
    /// No floors: any history is covered enough, and the unfenced counter
    /// is not protected.
    pub fn none() -> Floors {
        Floors {
            min_acquisitions: 0,
            min_faults: 0,
            required_kinds: Vec::new(),
            min_during_fault_ratio: 0.0,
            unfenced_is_protected: false,
        }
    }
}

impl Default for Floors {
    fn default() -> Floors {
        Floors::none()
    }
}

/// The kinds of violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// Two holds of one key whose intervals intersect.
    Overlap,
    /// A hold won later than another has a fencing token not above it.
    TokenRegression,
    /// An accepted write to a fenced counter was lost.
    FencedLostUpdate,
    /// A lock key was still on a node after the quiet period.
    KeysLeft,
    /// A write to an unfenced counter was lost. Not a lock guarantee.
    UnfencedLostUpdate,
    /// An accepted write was answered after its hold's interval ended.
    /// Informational.
    WriteOutsideHold,
}

impl ViolationKind {
    /// Every kind, in report order.
    pub const ALL: [ViolationKind; 6] = [
        ViolationKind::Overlap,
        ViolationKind::TokenRegression,
        ViolationKind::FencedLostUpdate,
        ViolationKind::KeysLeft,
        ViolationKind::UnfencedLostUpdate,
        ViolationKind::WriteOutsideHold,
    ];

    /// The kind's name in reports (`snake_case`).
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlap",
            ViolationKind::TokenRegression => "token_regression",
            ViolationKind::FencedLostUpdate => "fenced_lost_update",
            ViolationKind::KeysLeft => "keys_left",
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

/// How many violations of one kind there were.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindCount {
    /// The kind.
    pub kind: ViolationKind,
    /// Whether the lock promises this never happens.
    pub guaranteed: bool,
    /// Whether these count towards the verdict in this check.
    pub fails_run: bool,
    /// How many were found.
    pub count: u64,
    /// How many of them are listed in [`CheckReport::violations`].
    pub listed: u64,
}

/// What ended a hold's interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// The holder released it.
    Release,
    /// Its latest validity deadline passed.
    Deadline,
    /// Its worker was killed.
    Kill,
}

impl EndedBy {
    fn name(self) -> &'static str {
        match self {
            EndedBy::Release => "release",
            EndedBy::Deadline => "deadline",
            EndedBy::Kill => "kill",
        }
    }
}

/// One hold, as reconstructed from the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    /// The hold id (`<worker>-<sequence>`).
    pub id: String,
    /// The lock name.
    pub key: String,
    /// The worker (the `src` of its [`What::Won`]).
    pub worker: String,
    /// When the acquire returned: the interval's start.
    pub start: Nanos,
    /// The interval's end: the earliest of release, latest deadline and
    /// kill. Never before `start`.
    pub end: Nanos,
    /// What ended the interval.
    pub ended_by: EndedBy,
    /// The latest validity deadline the hold reported.
    pub deadline: Nanos,
    /// When the release was logged, if it was.
    pub released: Option<Nanos>,
    /// When its worker was killed, if that happened after the hold was won.
    pub killed: Option<Nanos>,
    /// Its fencing token, if it got one.
    pub token: Option<u64>,
    /// How many times the watchdog renewed it.
    pub renewals: u32,
    /// Whether a loss was reported for it.
    pub lost: bool,
}

/// One fault, from its [`What::FaultStart`] to its [`What::FaultEnd`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultSpan {
    /// Its id in the run.
    pub fault: u32,
    /// Its kind.
    pub kind: String,
    /// What it hit.
    pub target: String,
    /// Its parameters.
    pub detail: String,
    /// When it began.
    pub start: Nanos,
    /// When it ended; the end of the history if it never did.
    pub end: Nanos,
    /// Whether a [`What::FaultEnd`] was logged.
    pub ended: bool,
}

/// Figures for one fault kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultKindStats {
    /// The kind.
    pub kind: String,
    /// How many were injected.
    pub count: u64,
    /// Their summed durations, in seconds.
    pub total_s: f64,
    /// Acquire attempts started while one of this kind was active.
    pub attempts_during: u64,
    /// Acquisitions made while one of this kind was active.
    pub acquisitions_during: u64,
}

/// What the run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Events in the history.
    pub events: u64,
    /// From the first event to the last, in seconds.
    pub wall_s: f64,
    /// Acquire attempts ([`What::AcquireStart`]).
    pub attempts: u64,
    /// Acquisitions ([`What::Won`]).
    pub acquisitions: u64,
    /// Failed attempts ([`What::Failed`]).
    pub failed: u64,
    /// Acquisitions per lock name.
    pub acquisitions_per_key: BTreeMap<String, u64>,
    /// Attempts started while any fault was active.
    pub attempts_during_fault: u64,
    /// `attempts_during_fault / attempts` (0 without attempts).
    pub attempts_during_fault_ratio: f64,
    /// Acquisitions made while any fault was active.
    pub acquisitions_during_fault: u64,
    /// `acquisitions_during_fault / acquisitions` (0 without any).
    pub acquisitions_during_fault_ratio: f64,
    /// Faults injected.
    pub faults: u64,
    /// Per fault kind, by name.
    pub faults_per_kind: Vec<FaultKindStats>,
    /// Accepted writes to the fenced counters.
    pub fenced_writes_accepted: u64,
    /// Refused reads or writes of the fenced counters.
    pub fenced_writes_rejected: u64,
    /// Accepted writes to the unfenced counters.
    pub unfenced_writes: u64,
    /// Lost updates of the fenced counters (per key, the larger of the
    /// duplicate reads and the final shortfall, summed).
    pub lost_updates_fenced: u64,
    /// Lost updates of the unfenced counters, counted the same way.
    pub lost_updates_unfenced: u64,
    /// Accepted writes whose hold id never won. Informational: a worker
    /// that logged a write but not its win.
    pub orphan_writes: u64,
    /// Watchdog renewals.
    pub renewals: u64,
    /// Losses reported ([`What::Lost`]).
    pub losses_reported: u64,
    /// Holds without a fencing token.
    pub token_less_holds: u64,
    /// Holds whose worker was killed while holding.
    pub killed_holds: u64,
    /// For those, the longest time from the kill to the next hold of the
    /// same name by another worker, in milliseconds (`None` when no killed
    /// hold was followed by one): a crashed holder's lock must be free
    /// again within about the TTL.
    pub free_after_kill_max_ms: Option<f64>,
    /// Killed holds after which no other worker won the same name.
    pub killed_holds_not_followed: u64,
    /// Median hold interval, in milliseconds.
    pub hold_p50_ms: f64,
    /// 99th percentile hold interval, in milliseconds.
    pub hold_p99_ms: f64,
    /// Longest hold interval, in milliseconds.
    pub hold_max_ms: f64,
    /// Whether the history has a [`What::Final`] event (without one the
    /// final counters and the keys left are not checked).
    pub final_seen: bool,
}

/// The outcome of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No violation that fails the run, and the coverage floors were met.
    Pass,
    /// At least one violation that fails the run.
    Fail,
    /// No failing violation, but the run exercised too little to pass.
    Invalid,
}

impl Verdict {
    /// `PASS`, `FAIL` or `INVALID`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Invalid => "INVALID",
        }
    }
}

/// Everything the checker found; serialises to `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The verdict.
    pub verdict: Verdict,
    /// Why: the failing violations by kind, then the coverage problems.
    /// Empty for a pass.
    pub reasons: Vec<String>,
    /// The floors not met (also listed in `reasons`).
    pub coverage_problems: Vec<String>,
    /// The floors checked against.
    pub floors: Floors,
    /// The first event's time (`CLOCK_MONOTONIC`, ns): time zero of the
    /// report's seconds.
    pub t0: Nanos,
    /// The last event's time.
    pub t_end: Nanos,
    /// What the run did.
    pub stats: Stats,
    /// Violations that fail the run (see [`ViolationKind::fails_run`]).
    pub failing_violations: u64,
    /// Violations of guaranteed kinds.
    pub guaranteed_violations: u64,
    /// Violations of kinds that are not lock guarantees.
    pub unguaranteed_violations: u64,
    /// Per kind, every kind listed.
    pub violation_counts: Vec<KindCount>,
    /// The violations, by kind then time; of each kind, the
    /// [`MAX_REPORTED_PER_KIND`] earliest by start.
    pub violations: Vec<Violation>,
}

impl CheckReport {
    /// How many violations of `kind` were found (listed or not).
    pub fn count(&self, kind: ViolationKind) -> u64 {
        self.violation_counts
            .iter()
            .find(|c| c.kind == kind)
            .map_or(0, |c| c.count)
    }

    /// A fixed-width table of the figures, fault kinds, violations and the
    /// verdict, for a terminal.
    pub fn summary_table(&self) -> String {
        let s = &self.stats;
        let mut out = String::new();
        let rule = "-".repeat(78);
        let _ = writeln!(out, "{}", "=".repeat(78));
        let _ = writeln!(
            out,
            " chaos check: {}   ({} failing, {} guaranteed, {} informational violations)",
            self.verdict.label(),
            self.failing_violations,
            self.guaranteed_violations,
            self.unguaranteed_violations
        );
        let _ = writeln!(out, "{rule}");
        let pct = |n: u64, r: f64| format!("{} ({:.1}%)", thousands(n), r * 100.0);
        let rows: [(&str, String, &str, String); 11] = [
            (
                "wall duration",
                format!("{:.1} s", s.wall_s),
                "events",
                thousands(s.events),
            ),
            (
                "acquire attempts",
                thousands(s.attempts),
                "acquisitions",
                thousands(s.acquisitions),
            ),
            (
                "failed attempts",
                thousands(s.failed),
                "token-less holds",
                thousands(s.token_less_holds),
            ),
            (
                "renewals",
                thousands(s.renewals),
                "losses reported",
                thousands(s.losses_reported),
            ),
            (
                "hold p50 / p99",
                format!("{:.1} / {:.1} ms", s.hold_p50_ms, s.hold_p99_ms),
                "hold max",
                format!("{:.1} ms", s.hold_max_ms),
            ),
            (
                "attempts in faults",
                pct(s.attempts_during_fault, s.attempts_during_fault_ratio),
                "won in faults",
                pct(
                    s.acquisitions_during_fault,
                    s.acquisitions_during_fault_ratio,
                ),
            ),
            (
                "fenced accepted",
                thousands(s.fenced_writes_accepted),
                "fenced refused",
                thousands(s.fenced_writes_rejected),
            ),
            (
                "unfenced writes",
                thousands(s.unfenced_writes),
                "orphan writes",
                thousands(s.orphan_writes),
            ),
            (
                "killed holds",
                thousands(s.killed_holds),
                "killed not followed",
                thousands(s.killed_holds_not_followed),
            ),
            (
                "free after kill max",
                s.free_after_kill_max_ms
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.0} ms")),
                "",
                String::new(),
            ),
            (
                "lost upd. fenced",
                thousands(s.lost_updates_fenced),
                "lost upd. unfenced",
                thousands(s.lost_updates_unfenced),
            ),
        ];
        for (a, av, b, bv) in rows {
            let _ = writeln!(out, " {a:<19}{av:>18}    {b:<19}{bv:>17}");
        }
        if !s.final_seen {
            let _ = writeln!(
                out,
                " (no final event: final counters and keys left not checked)"
            );
        }

        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, " {:<30}{:>14}", "lock name", "acquisitions");
        for (key, n) in &s.acquisitions_per_key {
            let _ = writeln!(out, " {:<30}{:>14}", clip(key, 30), thousands(*n));
        }

        let _ = writeln!(out, "{rule}");
        let _ = writeln!(
            out,
            " {:<24}{:>7}{:>11}{:>17}{:>17}",
            "fault kind", "count", "total s", "attempts during", "won during"
        );
        if s.faults_per_kind.is_empty() {
            let _ = writeln!(out, " (no faults)");
        }
        for k in &s.faults_per_kind {
            let _ = writeln!(
                out,
                " {:<24}{:>7}{:>11.1}{:>17}{:>17}",
                clip(&k.kind, 24),
                thousands(k.count),
                k.total_s,
                thousands(k.attempts_during),
                thousands(k.acquisitions_during)
            );
        }

        let _ = writeln!(out, "{rule}");
        let _ = writeln!(
            out,
            " {:<24}{:>12}{:>14}{:>12}",
            "violation kind", "guaranteed", "fails run", "count"
        );
        for c in &self.violation_counts {
            let _ = writeln!(
                out,
                " {:<24}{:>12}{:>14}{:>12}",
                c.kind.name(),
                if c.guaranteed { "yes" } else { "no" },
                if c.fails_run { "yes" } else { "no" },
                thousands(c.count)
            );
        }
        let failing: Vec<&Violation> = self
            .violations
            .iter()
            .filter(|v| v.kind.fails_run(&self.floors))
            .take(10)
            .collect();
        if !failing.is_empty() {
            let _ = writeln!(out, " first failing violations:");
            for v in failing {
                let _ = writeln!(
                    out,
                    "   {:>9.3} s  {} on {}",
                    v.start_s,
                    v.kind.name(),
                    v.key
                );
                for line in wrap(&clip(&v.detail, 300), 70) {
                    let _ = writeln!(out, "       {line}");
                }
            }
        }

        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, " verdict: {}", self.verdict.label());
        for r in &self.reasons {
            let _ = writeln!(out, "   - {r}");
        }
        let _ = writeln!(out, "{}", "=".repeat(78));
        out
    }
}

/// Reconstructs the holds of a history, sorted by lock name, then start,
/// then id.
pub fn holds(events: &[Event]) -> Vec<Hold> {
    let kills = kills(events);
    let mut builders: Vec<HoldBuilder<'_>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for e in events {
        let (hold, key) = match &e.what {
            What::Won { hold, key, .. }
            | What::Token { hold, key, .. }
            | What::Renew { hold, key, .. }
            | What::Lost { hold, key, .. }
            | What::Release { hold, key, .. } => (hold.as_str(), key.as_str()),
            _ => continue,
        };
        let i = *index.entry(hold).or_insert_with(|| {
            builders.push(HoldBuilder::new(hold, key));
            builders.len() - 1
        });
        builders[i].add(e);
    }
    let mut holds: Vec<Hold> = builders
        .into_iter()
        .filter_map(|b| b.finish(&kills))
        .collect();
    holds.sort_by(|a, b| (&a.key, a.start, &a.id).cmp(&(&b.key, b.start, &b.id)));
    holds
}

/// The faults of a history, sorted by start. A fault never ended lasts to
/// the last event. Fault ids are unique in a run; the events need not be
/// in time order.
pub fn faults(events: &[Event]) -> Vec<FaultSpan> {
    let t_end = events.iter().map(|e| e.t).max().unwrap_or(0);
    let mut ends: HashMap<u32, Nanos> = HashMap::new();
    for e in events {
        if let What::FaultEnd { fault } = &e.what {
            ends.entry(*fault).or_insert(e.t);
        }
    }
    let mut spans: Vec<FaultSpan> = events
        .iter()
        .filter_map(|e| match &e.what {
            What::FaultStart {
                fault,
                kind,
                target,
                detail,
            } => {
                let end = ends.get(fault).copied();
                Some(FaultSpan {
                    fault: *fault,
                    kind: kind.clone(),
                    target: target.clone(),
                    detail: detail.clone(),
                    start: e.t,
                    end: end.unwrap_or(t_end).max(e.t),
                    ended: end.is_some(),
                })
            }
            _ => None,
        })
        .collect();
    spans.sort_by_key(|f| (f.start, f.fault));
    spans
}

/// Checks a history against the lock's guarantees and the coverage
/// `floors`.
pub fn check(events: &[Event], floors: &Floors) -> CheckReport {
    let t0 = events.iter().map(|e| e.t).min().unwrap_or(0);
    let t_end = events.iter().map(|e| e.t).max().unwrap_or(0);
    let holds = holds(events);
    let faults = faults(events);
    let mut found = Found::new(t0);
    let mut stats = Stats {
        events: events.len() as u64,
        wall_s: secs(t_end, t0),
        ..Stats::default()
    };

    // Counts and the times of attempts and wins.
    let mut attempt_times = Vec::new();
    let mut win_times = Vec::new();
    let mut last_final: Option<Final<'_>> = None;
    for e in events {
        match &e.what {
            What::AcquireStart { .. } => attempt_times.push(e.t),
            What::Won { key, .. } => {
                win_times.push(e.t);
                *stats.acquisitions_per_key.entry(key.clone()).or_default() += 1;
            }
            What::Failed { .. } => stats.failed += 1,
            What::Renew { .. } => stats.renewals += 1,
            What::Lost { .. } => stats.losses_reported += 1,
            What::Final {
                fenced,
                unfenced,
                keys_left,
            } if last_final.as_ref().is_none_or(|f| e.t >= f.t) => {
                last_final = Some(Final {
                    t: e.t,
                    fenced,
                    unfenced,
                    keys_left,
                });
            }
            _ => {}
        }
    }
    stats.attempts = attempt_times.len() as u64;
    stats.acquisitions = win_times.len() as u64;
    stats.final_seen = last_final.is_some();

    // Faults: overall and per kind.
    stats.faults = faults.len() as u64;
    let all = Spans::new(faults.iter().map(|f| (f.start, f.end)));
    stats.attempts_during_fault = all.count_inside(&attempt_times);
    stats.acquisitions_during_fault = all.count_inside(&win_times);
    stats.attempts_during_fault_ratio = ratio(stats.attempts_during_fault, stats.attempts);
    stats.acquisitions_during_fault_ratio =
        ratio(stats.acquisitions_during_fault, stats.acquisitions);
    let mut by_kind: BTreeMap<&str, Vec<&FaultSpan>> = BTreeMap::new();
    for f in &faults {
        by_kind.entry(f.kind.as_str()).or_default().push(f);
    }
    for (kind, spans) in &by_kind {
        let union = Spans::new(spans.iter().map(|f| (f.start, f.end)));
        stats.faults_per_kind.push(FaultKindStats {
            kind: kind.to_string(),
            count: spans.len() as u64,
            total_s: spans.iter().map(|f| (f.end - f.start) as f64).sum::<f64>() / 1e9,
            attempts_during: union.count_inside(&attempt_times),
            acquisitions_during: union.count_inside(&win_times),
        });
    }

    // Holds: figures, overlaps and tokens, per key.
    let mut durations: Vec<Nanos> = holds.iter().map(|h| h.end - h.start).collect();
    durations.sort_unstable();
    stats.hold_p50_ms = percentile(&durations, 0.50) as f64 / 1e6;
    stats.hold_p99_ms = percentile(&durations, 0.99) as f64 / 1e6;
    stats.hold_max_ms = durations.last().copied().unwrap_or(0) as f64 / 1e6;
    stats.token_less_holds = holds.iter().filter(|h| h.token.is_none()).count() as u64;
    stats.killed_holds = holds.iter().filter(|h| h.ended_by == EndedBy::Kill).count() as u64;
    for key_holds in holds.chunk_by(|a, b| a.key == b.key) {
        let kills = key_holds.iter().filter_map(|h| {
            h.killed
                .filter(|_| h.ended_by == EndedBy::Kill)
                .map(|at| (h, at))
        });
        for (killed, at) in kills {
            // Holds of a key are sorted by start.
            let next = key_holds[key_holds.partition_point(|h| h.start <= at)..]
                .iter()
                .find(|h| h.worker != killed.worker);
            match next {
                Some(next) => {
                    let gap = (next.start - at) as f64 / 1e6;
                    stats.free_after_kill_max_ms =
                        Some(stats.free_after_kill_max_ms.map_or(gap, |max| max.max(gap)));
                }
                None => stats.killed_holds_not_followed += 1,
            }
        }
        check_overlaps(key_holds, &mut found);
        check_tokens(key_holds, &mut found);
    }

    // Writes.
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
            let what = match target {
                Target::Fenced => "fenced",
                Target::Unfenced => "unfenced",
            };
            found.push(
                ViolationKind::WriteOutsideHold,
                key,
                (h.end, e.t),
                vec![h.id.clone()],
                format!(
                    "{} wrote {what} {key} at {:.3} s, {:.1} ms after its hold ended ({})",
                    h.id,
                    secs(e.t, t0),
                    (e.t - h.end) as f64 / 1e6,
                    h.ended_by.name()
                ),
            );
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
    let [fenced_writes, unfenced_writes] = accepted;
    stats.lost_updates_fenced = check_lost_updates(
        fenced_writes,
        last_final.as_ref().map(|f| (f.fenced, f.t)),
        ViolationKind::FencedLostUpdate,
        &mut found,
    );
    stats.lost_updates_unfenced = check_lost_updates(
        unfenced_writes,
        last_final.as_ref().map(|f| (f.unfenced, f.t)),
        ViolationKind::UnfencedLostUpdate,
        &mut found,
    );
    if let Some(Final { t, keys_left, .. }) = last_final {
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

    // Coverage and verdict.
    let mut coverage_problems = Vec::new();
    if stats.acquisitions < floors.min_acquisitions {
        coverage_problems.push(format!(
            "only {} acquisitions (floor {})",
            stats.acquisitions, floors.min_acquisitions
        ));
    }
    if stats.faults < floors.min_faults {
        coverage_problems.push(format!(
            "only {} faults injected (floor {})",
            stats.faults, floors.min_faults
        ));
    }
    for kind in &floors.required_kinds {
        if !by_kind.contains_key(kind.as_str()) {
            coverage_problems.push(format!("no fault of required kind {kind}"));
        }
    }
    if stats.attempts_during_fault_ratio < floors.min_during_fault_ratio {
        coverage_problems.push(format!(
            "{:.1}% of acquire attempts started during a fault (floor {:.1}%)",
            stats.attempts_during_fault_ratio * 100.0,
            floors.min_during_fault_ratio * 100.0
        ));
    }

    let violation_counts: Vec<KindCount> = ViolationKind::ALL
        .iter()
        .map(|&kind| KindCount {
            kind,
            guaranteed: kind.guaranteed(),
            fails_run: kind.fails_run(floors),
            count: found.counts[kind.index()],
            listed: found.kept[kind.index()].len() as u64,
        })
        .collect();
    let sum = |f: &dyn Fn(&KindCount) -> bool| -> u64 {
        violation_counts
            .iter()
            .filter(|c| f(c))
            .map(|c| c.count)
            .sum()
    };
    let failing_violations = sum(&|c| c.fails_run);
    let guaranteed_violations = sum(&|c| c.guaranteed);
    let unguaranteed_violations = sum(&|c| !c.guaranteed);

    let mut reasons: Vec<String> = violation_counts
        .iter()
        .filter(|c| c.fails_run && c.count > 0)
        .map(|c| format!("{} {} violation(s)", c.count, c.kind.name()))
        .collect();
    let verdict = if failing_violations > 0 {
        Verdict::Fail
    } else if !coverage_problems.is_empty() {
        Verdict::Invalid
    } else {
        Verdict::Pass
    };
    reasons.extend(coverage_problems.iter().map(|p| format!("coverage: {p}")));

    let violations = found.into_violations();

    CheckReport {
        verdict,
        reasons,
        coverage_problems,
        floors: floors.clone(),
        t0,
        t_end,
        stats,
        failing_violations,
        guaranteed_violations,
        unguaranteed_violations,
        violation_counts,
        violations,
    }
}

/// The data of a history's last [`What::Final`] event.
struct Final<'a> {
    t: Nanos,
    fenced: &'a [(String, u64)],
    unfenced: &'a [(String, u64)],
    keys_left: &'a [String],
}

/// The violations found so far: all counted, the
/// [`MAX_REPORTED_PER_KIND`] earliest (by start) of each kind kept.
struct Found {
    t0: Nanos,
    counts: [u64; 6],
    /// Per kind, a max-heap on (start, arrival): its top is the kept
    /// violation to drop when an earlier one comes.
    kept: [BinaryHeap<Kept>; 6],
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
    fn new(t0: Nanos) -> Found {
        Found {
            t0,
            counts: [0; 6],
            kept: Default::default(),
            arrivals: 0,
        }
    }

    /// Whether a violation of `kind` starting at `start` would be kept.
    fn wants(&self, kind: ViolationKind, start: Nanos) -> bool {
        let kept = &self.kept[kind.index()];
        kept.len() < MAX_REPORTED_PER_KIND || kept.peek().is_some_and(|k| start < k.order.0)
    }

    /// Counts `n` violations of `kind` without listing them.
    fn count(&mut self, kind: ViolationKind, n: u64) {
        self.counts[kind.index()] += n;
    }

    /// Counts a violation of `kind` on `key` over `(start, end)`, and keeps
    /// it if it is among the earliest of its kind so far.
    fn push(
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
    fn into_violations(self) -> Vec<Violation> {
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
fn check_overlaps(holds: &[Hold], found: &mut Found) {
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
fn check_tokens(holds: &[Hold], found: &mut Found) {
    let mut max: Option<(u64, &Hold)> = None;
    for b in holds {
        let Some(token) = b.token else { continue };
        match max {
            Some((m, a)) if token <= m => {
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
            _ => max = Some((token, b)),
        }
    }
}

struct AcceptedWrite<'a> {
    key: &'a str,
    read: u64,
    t: Nanos,
    hold: &'a str,
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

/// Spans merged into disjoint, sorted intervals (inclusive bounds).
struct Spans(Vec<(Nanos, Nanos)>);

impl Spans {
    fn new(spans: impl Iterator<Item = (Nanos, Nanos)>) -> Spans {
        let mut spans: Vec<(Nanos, Nanos)> = spans.collect();
        spans.sort_unstable();
        let mut merged: Vec<(Nanos, Nanos)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        Spans(merged)
    }

    fn contains(&self, t: Nanos) -> bool {
        // The last span starting at or before t.
        let i = self.0.partition_point(|&(s, _)| s <= t);
        i > 0 && t <= self.0[i - 1].1
    }

    fn count_inside(&self, times: &[Nanos]) -> u64 {
        times.iter().filter(|&&t| self.contains(t)).count() as u64
    }
}

/// Worker kills, per worker, sorted.
fn kills(events: &[Event]) -> HashMap<&str, Vec<Nanos>> {
    let mut kills: HashMap<&str, Vec<Nanos>> = HashMap::new();
    for e in events {
        if let What::FaultStart { kind, target, .. } = &e.what
            && kind == CLIENT_CRASH
        {
            kills.entry(target.as_str()).or_default().push(e.t);
        }
    }
    for times in kills.values_mut() {
        times.sort_unstable();
    }
    kills
}

struct HoldBuilder<'a> {
    id: &'a str,
    key: &'a str,
    won: Option<(Nanos, &'a str)>,
    deadline: Nanos,
    released: Option<Nanos>,
    token: Option<u64>,
    renewals: u32,
    lost: bool,
}

impl<'a> HoldBuilder<'a> {
    fn new(id: &'a str, key: &'a str) -> HoldBuilder<'a> {
        HoldBuilder {
            id,
            key,
            won: None,
            deadline: 0,
            released: None,
            token: None,
            renewals: 0,
            lost: false,
        }
    }

    fn add(&mut self, e: &'a Event) {
        match &e.what {
            What::Won { key, deadline, .. } => {
                if self.won.is_none_or(|(t, _)| e.t < t) {
                    self.won = Some((e.t, e.src.as_str()));
                    self.key = key;
                }
                self.deadline = self.deadline.max(*deadline);
            }
            What::Token { token, .. } => {
                self.token.get_or_insert(*token);
            }
            What::Renew { deadline, .. } => {
                self.renewals += 1;
                self.deadline = self.deadline.max(*deadline);
            }
            What::Lost { deadline, .. } => {
                self.lost = true;
                self.deadline = self.deadline.max(*deadline);
            }
            What::Release { deadline, .. } => {
                self.released = Some(self.released.map_or(e.t, |r| r.min(e.t)));
                self.deadline = self.deadline.max(*deadline);
            }
            _ => {}
        }
    }

    fn finish(self, kills: &HashMap<&str, Vec<Nanos>>) -> Option<Hold> {
        let (start, worker) = self.won?;
        let killed = kills.get(worker).and_then(|times| {
            let i = times.partition_point(|&t| t < start);
            times.get(i).copied()
        });
        let mut end = self.deadline;
        let mut ended_by = EndedBy::Deadline;
        if let Some(r) = self.released
            && r <= end
        {
            (end, ended_by) = (r, EndedBy::Release);
        }
        if let Some(k) = killed
            && k < end
        {
            (end, ended_by) = (k, EndedBy::Kill);
        }
        Some(Hold {
            id: self.id.to_string(),
            key: self.key.to_string(),
            worker: worker.to_string(),
            start,
            end: end.max(start),
            ended_by,
            deadline: self.deadline,
            released: self.released,
            killed,
            token: self.token,
            renewals: self.renewals,
            lost: self.lost,
        })
    }
}

fn describe(h: &Hold, t0: Nanos) -> String {
    format!(
        "{} [{:.3} s, {:.3} s, {}]",
        h.id,
        secs(h.start, t0),
        secs(h.end, t0),
        h.ended_by.name()
    )
}

/// `t` in seconds after `t0`.
pub(super) fn secs(t: Nanos, t0: Nanos) -> f64 {
    t.saturating_sub(t0) as f64 / 1e9
}

fn ratio(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        n as f64 / total as f64
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
fn percentile(sorted: &[Nanos], p: f64) -> Nanos {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `1234567` as `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `s` broken at spaces into lines of at most `width` characters (longer
/// words get a line of their own).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `s` cut to at most `n` characters, with `…` when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::chaos::synth::{self, Builder, ms};

    fn clean() -> Builder {
        let mut b = Builder::new();
        let mut k0 = (0, 0);
        let mut k1 = (0, 0);
        b.clean_hold("k0", "w0-1", 10.0, 30.0, 1, &mut k0)
            .clean_hold("k1", "w1-1", 12.0, 40.0, 1, &mut k1)
            .clean_hold("k0", "w1-2", 31.0, 50.0, 2, &mut k0)
            .clean_hold("k0", "w2-1", 50.0, 70.0, 3, &mut k0)
            .clean_hold("k1", "w0-2", 41.0, 60.0, 2, &mut k1)
            .final_values(
                ms(200.0),
                &[("k0", 3), ("k1", 2)],
                &[("k0", 3), ("k1", 2)],
                &[],
            );
        b
    }

    fn run(b: &Builder) -> CheckReport {
        check(&b.sorted(), &Floors::none())
    }

    #[test]
    fn a_clean_history_passes() {
        let report = run(&clean());
        assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
        assert!(report.violations.is_empty());
        assert!(report.reasons.is_empty());
        let s = &report.stats;
        assert_eq!((s.attempts, s.acquisitions, s.failed), (5, 5, 0));
        assert_eq!(s.acquisitions_per_key["k0"], 3);
        assert_eq!(s.fenced_writes_accepted, 5);
        assert_eq!(s.unfenced_writes, 5);
        assert_eq!(s.token_less_holds, 0);
        assert!(s.final_seen);
        // Touching intervals (release at 50, next won at 50) do not overlap.
        assert_eq!(report.count(ViolationKind::Overlap), 0);
    }

    #[test]
    fn overlapping_holds_fail() {
        let mut b = clean();
        let mut v = (3, 3);
        b.clean_hold("k0", "w3-1", 65.0, 80.0, 4, &mut v);
        let report = run(&b);
        assert_eq!(report.verdict, Verdict::Fail);
        assert_eq!(report.count(ViolationKind::Overlap), 1);
        let o = &report.violations[0];
        assert_eq!(o.kind, ViolationKind::Overlap);
        assert_eq!(o.holds, ["w2-1", "w3-1"]);
        assert_eq!((o.start, o.end), (ms(65.0), ms(70.0)));
        assert!(o.detail.contains("5.0 ms"), "{}", o.detail);
        assert!(report.reasons[0].contains("overlap"));
    }

    #[test]
    fn a_killed_holder_s_interval_ends_at_the_kill() {
        // w0-1 never releases; its deadline is 100 ms after winning.
        let base = |b: &mut Builder| {
            b.attempt(ms(0.0), "k0", "w0-1")
                .won(ms(1.0), "k0", "w0-1", ms(101.0));
        };
        // A kill before the win does not end it.
        let mut b = Builder::new();
        base(&mut b);
        b.fault(ms(0.5), 1, CLIENT_CRASH, "w0")
            .fault_end(ms(0.7), 1)
            .won(ms(50.0), "k0", "w1-1", ms(150.0));
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::Overlap), 1);
        assert_eq!(report.stats.killed_holds, 0);
        assert_eq!(report.stats.free_after_kill_max_ms, None);
        assert_eq!(report.stats.killed_holds_not_followed, 0);
        // Killed at 20 ms: a win at 30 ms is fine, one at 10 ms is not.
        // The first frees the key 10 ms after the kill; after the kill,
        // the second is followed by no win.
        for (won, overlaps, free, not_followed) in [(30.0, 0, Some(10.0), 0), (10.0, 1, None, 1)] {
            let mut b = Builder::new();
            base(&mut b);
            b.fault(ms(20.0), 1, CLIENT_CRASH, "w0")
                .fault_end(ms(500.0), 1)
                .won(ms(won), "k0", "w1-1", ms(won + 100.0));
            let report = run(&b);
            assert_eq!(report.count(ViolationKind::Overlap), overlaps, "{won}");
            assert_eq!(report.stats.killed_holds, 1);
            let free_ms = report.stats.free_after_kill_max_ms;
            assert_eq!(free_ms.map(|v| (v * 1e3).round() / 1e3), free, "{won}");
            assert_eq!(report.stats.killed_holds_not_followed, not_followed);
            let table = report.summary_table();
            let shown = free.map_or("-".to_string(), |v| format!("{v:.0} ms"));
            assert!(
                table.contains(&format!("free after kill max{shown:>18}")),
                "{table}"
            );
            let h = holds(&b.sorted());
            assert_eq!((h[0].end, h[0].ended_by), (ms(20.0), EndedBy::Kill));
        }
        // A crash of another worker ends nothing.
        let mut b = Builder::new();
        base(&mut b);
        b.fault(ms(20.0), 1, CLIENT_CRASH, "w5")
            .won(ms(30.0), "k0", "w1-1", ms(130.0));
        assert_eq!(run(&b).count(ViolationKind::Overlap), 1);
    }

    #[test]
    fn the_interval_ends_at_the_earlier_of_release_and_deadline() {
        // Released before the deadline: ends at the release.
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .release(ms(40.0), "k0", "w0-1", ms(100.0))
            .won(ms(50.0), "k0", "w1-1", ms(150.0));
        let h = holds(&b.sorted());
        assert_eq!((h[0].end, h[0].ended_by), (ms(40.0), EndedBy::Release));
        assert_eq!(run(&b).count(ViolationKind::Overlap), 0);
        // Released after its deadline (a paused holder): ends at the
        // deadline, so a win after the deadline is no overlap.
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .won(ms(120.0), "k0", "w1-1", ms(220.0))
            .release(ms(500.0), "k0", "w0-1", ms(100.0));
        let h = holds(&b.sorted());
        assert_eq!((h[0].end, h[0].ended_by), (ms(100.0), EndedBy::Deadline));
        assert_eq!(run(&b).count(ViolationKind::Overlap), 0);
        // But a win before that deadline is one.
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .won(ms(90.0), "k0", "w1-1", ms(190.0))
            .release(ms(500.0), "k0", "w0-1", ms(100.0));
        assert_eq!(run(&b).count(ViolationKind::Overlap), 1);
    }

    #[test]
    fn renewals_extend_the_interval() {
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .renew(ms(33.0), "k0", "w0-1", ms(133.0))
            .renew(ms(66.0), "k0", "w0-1", ms(166.0))
            .lost(ms(120.0), "k0", "w0-1", ms(166.0))
            .won(ms(150.0), "k0", "w1-1", ms(250.0));
        let report = run(&b);
        let h = holds(&b.sorted());
        assert_eq!(h[0].deadline, ms(166.0));
        assert_eq!(h[0].renewals, 2);
        assert!(h[0].lost);
        // The loss notice does not end the interval: the deadline does.
        assert_eq!(report.count(ViolationKind::Overlap), 1);
        assert_eq!(report.stats.renewals, 2);
        assert_eq!(report.stats.losses_reported, 1);
        // A Lost deadline alone also counts as a reported deadline.
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .lost(ms(50.0), "k0", "w0-1", ms(140.0))
            .won(ms(120.0), "k0", "w1-1", ms(220.0));
        assert_eq!(run(&b).count(ViolationKind::Overlap), 1);
    }

    #[test]
    fn tokens_must_increase_in_won_order() {
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .token(ms(0.1), "k0", "w0-1", 5)
            .release(ms(10.0), "k0", "w0-1", ms(100.0))
            .won(ms(20.0), "k0", "w1-1", ms(120.0))
            .release(ms(30.0), "k0", "w1-1", ms(120.0))
            .won(ms(40.0), "k0", "w2-1", ms(140.0))
            .token(ms(40.1), "k0", "w2-1", 5)
            .release(ms(50.0), "k0", "w2-1", ms(140.0))
            .won(ms(60.0), "k0", "w3-1", ms(160.0))
            .token(ms(60.1), "k0", "w3-1", 3)
            .release(ms(70.0), "k0", "w3-1", ms(160.0))
            .won(ms(80.0), "k0", "w4-1", ms(180.0))
            .token(ms(80.1), "k0", "w4-1", 6)
            // Another key's tokens are independent.
            .won(ms(90.0), "k1", "w5-1", ms(190.0))
            .token(ms(90.1), "k1", "w5-1", 1);
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::TokenRegression), 2);
        assert_eq!(report.count(ViolationKind::Overlap), 0);
        assert_eq!(report.stats.token_less_holds, 1);
        let regressions: Vec<&Vec<String>> = report
            .violations
            .iter()
            .filter(|v| v.kind == ViolationKind::TokenRegression)
            .map(|v| &v.holds)
            .collect();
        assert_eq!(regressions, [&vec!["w0-1", "w2-1"], &vec!["w0-1", "w3-1"]]);
        assert_eq!(report.verdict, Verdict::Fail);
    }

    #[test]
    fn fenced_lost_updates_fail() {
        // Two accepted writes read 2.
        let mut b = clean();
        b.won(ms(100.0), "k0", "w3-1", ms(200.0))
            .write(
                ms(101.0),
                "k0",
                "w3-1",
                Target::Fenced,
                Some(9),
                2,
                true,
                None,
            )
            .release(ms(110.0), "k0", "w3-1", ms(200.0));
        let report = run(&b);
        assert_eq!(report.verdict, Verdict::Fail);
        let lost: Vec<&Violation> = report
            .violations
            .iter()
            .filter(|v| v.kind == ViolationKind::FencedLostUpdate)
            .collect();
        // The duplicate read; it explains the final value (3) below the 4
        // accepted writes, so that is not reported again.
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!(lost[0].holds, ["w2-1", "w3-1"]);
        assert_eq!(report.stats.lost_updates_fenced, 1);
        // A shortfall beyond the duplicates is.
        b.final_values(ms(300.0), &[("k0", 2)], &[], &[]);
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::FencedLostUpdate), 2);
        let last = report
            .violations
            .iter()
            .rfind(|v| v.kind == ViolationKind::FencedLostUpdate);
        let detail = &last.unwrap().detail;
        assert!(
            detail.contains("ended at 2 after 4 accepted writes: 2 lost, 1 of"),
            "{detail}"
        );
        assert_eq!(report.stats.lost_updates_fenced, 2);
        // Refused writes are not updates.
        let mut b = clean();
        b.won(ms(100.0), "k0", "w3-1", ms(200.0)).write(
            ms(101.0),
            "k0",
            "w3-1",
            Target::Fenced,
            Some(1),
            2,
            false,
            Some(3),
        );
        let report = run(&b);
        assert_eq!(report.verdict, Verdict::Pass);
        assert_eq!(report.stats.fenced_writes_rejected, 1);
        // A final value below the accepted writes alone is a loss.
        let mut b = clean();
        b.final_values(ms(300.0), &[("k0", 2)], &[], &[]);
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::FencedLostUpdate), 1);
        assert_eq!(report.verdict, Verdict::Fail);
    }

    #[test]
    fn keys_left_fail() {
        let mut b = clean();
        b.final_values(ms(300.0), &[], &[], &["n2:k0", "n4:k1"]);
        let report = run(&b);
        assert_eq!(report.verdict, Verdict::Fail);
        assert_eq!(report.count(ViolationKind::KeysLeft), 2);
        let v = &report.violations[0];
        assert_eq!(v.key, "k0");
        assert!(v.detail.contains("n2"), "{}", v.detail);
    }

    /// A holder paused past its deadline writes the unfenced counter late.
    fn late_unfenced_writer() -> Builder {
        let mut b = Builder::new();
        b.won(ms(0.0), "k0", "w0-1", ms(100.0))
            .token(ms(0.1), "k0", "w0-1", 1)
            .won(ms(110.0), "k0", "w1-1", ms(210.0))
            .token(ms(110.1), "k0", "w1-1", 2)
            .write(
                ms(111.0),
                "k0",
                "w1-1",
                Target::Unfenced,
                None,
                0,
                true,
                None,
            )
            .write(
                ms(112.0),
                "k0",
                "w1-1",
                Target::Fenced,
                Some(2),
                0,
                true,
                None,
            )
            .release(ms(120.0), "k0", "w1-1", ms(210.0))
            // w0-1 read both before its pause; it resumes at 300 ms.
            .write(
                ms(300.0),
                "k0",
                "w0-1",
                Target::Unfenced,
                None,
                0,
                true,
                None,
            )
            .write(
                ms(300.5),
                "k0",
                "w0-1",
                Target::Fenced,
                Some(1),
                0,
                false,
                Some(2),
            )
            .release(ms(301.0), "k0", "w0-1", ms(100.0))
            .final_values(ms(400.0), &[("k0", 1)], &[("k0", 1)], &[]);
        b
    }

    #[test]
    fn unfenced_lost_updates_fail_only_when_protected() {
        let b = late_unfenced_writer();
        let report = run(&b);
        assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
        assert_eq!(report.count(ViolationKind::UnfencedLostUpdate), 1);
        assert_eq!(report.count(ViolationKind::WriteOutsideHold), 1);
        assert_eq!(report.count(ViolationKind::FencedLostUpdate), 0);
        assert_eq!(report.guaranteed_violations, 0);
        assert_eq!(report.unguaranteed_violations, 2);
        assert_eq!(report.failing_violations, 0);
        assert_eq!(report.stats.lost_updates_unfenced, 1);
        let late = report
            .violations
            .iter()
            .find(|v| v.kind == ViolationKind::WriteOutsideHold)
            .unwrap();
        assert!(!late.guaranteed);
        assert_eq!((late.start, late.end), (ms(100.0), ms(300.0)));

        let floors = Floors {
            unfenced_is_protected: true,
            ..Floors::none()
        };
        let report = check(&b.sorted(), &floors);
        assert_eq!(report.verdict, Verdict::Fail);
        assert_eq!(report.failing_violations, 1);
        assert_eq!(report.reasons, ["1 unfenced_lost_update violation(s)"]);
    }

    #[test]
    fn coverage_below_a_floor_is_invalid() {
        let mut b = clean();
        b.fault(ms(5.0), 1, "node_pause", "n1")
            .fault_end(ms(20.0), 1)
            .fault(ms(45.0), 2, "net_delay", "n0");
        let events = b.sorted();
        let ok = Floors {
            min_acquisitions: 5,
            min_faults: 2,
            required_kinds: vec!["node_pause".into(), "net_delay".into()],
            // Attempts at 9, 11, 30, 40, 49 ms: 9 and 11 in the pause,
            // 49 in the unterminated delay.
            min_during_fault_ratio: 0.6,
            unfenced_is_protected: false,
        };
        let report = check(&events, &ok);
        assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
        assert_eq!(report.stats.attempts_during_fault, 3);
        assert!((report.stats.attempts_during_fault_ratio - 0.6).abs() < 1e-9);
        assert_eq!(report.stats.acquisitions_during_fault, 3);
        let pause = &report.stats.faults_per_kind[1];
        assert_eq!((pause.kind.as_str(), pause.count), ("node_pause", 1));
        assert_eq!(pause.attempts_during, 2);
        assert!((pause.total_s - 0.015).abs() < 1e-9);

        let short = [
            Floors {
                min_acquisitions: 6,
                ..ok.clone()
            },
            Floors {
                min_faults: 3,
                ..ok.clone()
            },
            Floors {
                required_kinds: vec!["partition".into()],
                ..ok.clone()
            },
            Floors {
                min_during_fault_ratio: 0.61,
                ..ok.clone()
            },
        ];
        for floors in short {
            let report = check(&events, &floors);
            assert_eq!(report.verdict, Verdict::Invalid, "{floors:?}");
            assert_eq!(report.coverage_problems.len(), 1, "{floors:?}");
            assert!(report.reasons[0].starts_with("coverage: "));
        }
        // A violation makes it a failure whatever the coverage.
        let mut v = (3, 3);
        b.clean_hold("k0", "w3-1", 65.0, 80.0, 4, &mut v);
        let report = check(
            &b.sorted(),
            &Floors {
                min_acquisitions: 1000,
                ..ok
            },
        );
        assert_eq!(report.verdict, Verdict::Fail);
        assert_eq!(report.coverage_problems.len(), 1);
        assert!(
            report.reasons[0].contains("overlap"),
            "{:?}",
            report.reasons
        );
        assert!(
            report
                .reasons
                .last()
                .unwrap()
                .starts_with("coverage: only 6")
        );
    }

    #[test]
    fn all_overlaps_are_counted_but_the_list_is_capped() {
        // 60 holds all overlapping each other: 1,770 pairs.
        let mut b = Builder::new();
        for i in 0..60 {
            b.won(ms(i as f64), "k0", &format!("w{i}-1"), ms(1000.0));
        }
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::Overlap), 60 * 59 / 2);
        let listed = report
            .violations
            .iter()
            .filter(|v| v.kind == ViolationKind::Overlap)
            .count();
        assert_eq!(listed, MAX_REPORTED_PER_KIND);
        assert_eq!(
            report.violation_counts[0].listed,
            MAX_REPORTED_PER_KIND as u64
        );
    }

    #[test]
    fn the_earliest_violations_are_listed() {
        // k0, checked first, has 60 holds all overlapping from 1 s on:
        // 1,770 pairs. k1 has one overlap, earlier than all of them.
        let mut b = Builder::new();
        for i in 0..60 {
            b.won(ms(1000.0 + i as f64), "k0", &format!("w{i}-1"), ms(5000.0));
        }
        b.won(ms(10.0), "k1", "w60-1", ms(110.0))
            .won(ms(20.0), "k1", "w61-1", ms(120.0));
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::Overlap), 60 * 59 / 2 + 1);
        let listed: Vec<&Violation> = report
            .violations
            .iter()
            .filter(|v| v.kind == ViolationKind::Overlap)
            .collect();
        assert_eq!(listed.len(), MAX_REPORTED_PER_KIND);
        // Listed by time: the k1 overlap first.
        assert_eq!(listed[0].key, "k1");
        assert_eq!(listed[0].holds, ["w60-1", "w61-1"]);
        assert!(listed.windows(2).all(|w| w[0].start <= w[1].start));
        // Then the 999 earliest of k0: the 990 pairs of the holds won by
        // 1,044 ms, and 9 of the 45 the hold won at 1,045 ms makes.
        assert!(listed.iter().all(|v| v.start <= ms(1045.0)));
        let at_1045 = listed.iter().filter(|v| v.start == ms(1045.0)).count();
        assert_eq!(at_1045, 9);
        // Seconds from the first event (k1's first win, at 10 ms).
        assert!(
            (listed[0].start_s - 0.010).abs() < 1e-9,
            "{}",
            listed[0].start_s
        );
        assert!(
            (listed[1].start_s - 0.991).abs() < 1e-9,
            "{}",
            listed[1].start_s
        );
    }

    #[test]
    fn a_read_of_the_largest_value_does_not_overflow() {
        let mut b = Builder::new();
        for (i, t) in [(0, 10.0), (1, 20.0)] {
            let hold = format!("w{i}-1");
            b.won(ms(t), "k0", &hold, ms(t + 5.0)).write(
                ms(t + 1.0),
                "k0",
                &hold,
                Target::Unfenced,
                None,
                u64::MAX - 1,
                true,
                None,
            );
        }
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::UnfencedLostUpdate), 1);
        // The builder logs `read + 1`; the checker must not compute it.
        let mut events = b.sorted();
        for e in &mut events {
            if let What::Write { read, wrote, .. } = &mut e.what {
                (*read, *wrote) = (Some(u64::MAX), Some(u64::MAX));
            }
        }
        let report = check(&events, &Floors::none());
        let lost = &report.violations[0];
        assert_eq!(lost.kind, ViolationKind::UnfencedLostUpdate);
        assert!(
            lost.detail.contains("read 18446744073709551615"),
            "{}",
            lost.detail
        );
    }

    #[test]
    fn the_report_serialises_and_prints() {
        let report = run(&late_unfenced_writer());
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.contains("\"verdict\":\"pass\""), "{json}");
        assert!(json.contains("\"kind\":\"unfenced_lost_update\""));
        let back: CheckReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        let table = report.summary_table();
        for needle in ["verdict: PASS", "unfenced_lost_update", "lock name"] {
            assert!(table.contains(needle), "{needle}\n{table}");
        }
        // Fixed width: no line longer than the rules, also with violations.
        assert!(table.lines().all(|l| l.chars().count() <= 78), "{table}");
        let mut b = clean();
        let mut v = (3, 3);
        b.clean_hold("k0", "w3-1", 65.0, 80.0, 4, &mut v);
        let table = run(&b).summary_table();
        assert!(table.contains("first failing violations"), "{table}");
        assert!(table.lines().all(|l| l.chars().count() <= 78), "{table}");
    }

    #[test]
    fn a_realistic_run_is_checked_quickly() {
        let events = synth::generate(&synth::Config::realistic());
        let started = std::time::Instant::now();
        let report = check(&events, &Floors::none());
        let took = started.elapsed();
        println!("{} events checked in {took:?}", events.len());
        // A few hundred milliseconds in a debug build; the bound only
        // catches a quadratic slip.
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
        println!("{}", report.summary_table());
        assert!(
            report.stats.acquisitions > 15_000,
            "{}",
            report.stats.acquisitions
        );
        assert_eq!(report.count(ViolationKind::Overlap), 1);
        assert_eq!(report.count(ViolationKind::TokenRegression), 0);
        assert_eq!(report.count(ViolationKind::FencedLostUpdate), 0);
        assert_eq!(report.verdict, Verdict::Fail);
    }

    #[test]
    fn the_order_of_events_does_not_matter() {
        let events = synth::generate(&synth::Config::realistic());
        let mut reversed = events.clone();
        reversed.reverse();
        let (a, b) = (
            check(&events, &Floors::none()),
            check(&reversed, &Floors::none()),
        );
        assert_eq!(a.stats, b.stats);
        assert_eq!(a.violation_counts, b.violation_counts);
        assert_eq!(a.verdict, b.verdict);
    }

    /// Holds as (key, start offset, length, how it ends) in ns.
    fn schedule_events(holds: &[(usize, u64, u64, u8)]) -> Vec<Event> {
        let mut b = Builder::new();
        for (i, &(key, start, len, ending)) in holds.iter().enumerate() {
            let (key, id) = (format!("k{key}"), format!("w{i}-1"));
            let (start, end) = (synth::T0 + start, synth::T0 + start + len);
            match ending {
                // Released well before its deadline.
                0 => b.won(start, &key, &id, end + 1_000_000).release(
                    end,
                    &key,
                    &id,
                    end + 1_000_000,
                ),
                // Expired (released late).
                1 => b
                    .won(start, &key, &id, end)
                    .release(end + 50_000_000, &key, &id, end),
                // Killed.
                _ => b.won(start, &key, &id, end + 1_000_000).fault(
                    end,
                    i as u32,
                    CLIENT_CRASH,
                    &format!("w{i}"),
                ),
            };
        }
        b.sorted()
    }

    /// Back-to-back holds per key (gaps may be zero): disjoint intervals.
    fn disjoint() -> impl Strategy<Value = Vec<(usize, u64, u64, u8)>> {
        prop::collection::vec((0..3usize, 0..5_000u64, 1..20_000u64, 0..3u8), 1..60).prop_map(
            |raw| {
                let mut next = [0u64; 3];
                raw.into_iter()
                    .map(|(key, gap, len, ending)| {
                        let start = next[key] + gap;
                        next[key] = start + len;
                        (key, start, len, ending)
                    })
                    .collect()
            },
        )
    }

    proptest! {
        #[test]
        fn disjoint_schedules_never_overlap(holds in disjoint()) {
            let report = check(&schedule_events(&holds), &Floors::none());
            prop_assert_eq!(report.count(ViolationKind::Overlap), 0);
            prop_assert_eq!(report.verdict, Verdict::Pass);
        }

        #[test]
        fn shifting_a_hold_into_another_overlaps(
            holds in disjoint(),
            pick in any::<prop::sample::Index>(),
            other in any::<prop::sample::Index>(),
            into in any::<prop::sample::Index>(),
        ) {
            let mut holds = holds;
            let i = pick.index(holds.len());
            let same_key: Vec<usize> = (0..holds.len())
                .filter(|&j| j != i && holds[j].0 == holds[i].0)
                .collect();
            prop_assume!(!same_key.is_empty());
            let j = same_key[other.index(same_key.len())];
            // Move j to start strictly inside i's interval.
            let (_, start_i, len_i, _) = holds[i];
            holds[j].1 = start_i + into.index(len_i as usize) as u64;
            let report = check(&schedule_events(&holds), &Floors::none());
            prop_assert!(report.count(ViolationKind::Overlap) >= 1);
            let (a, b) = (format!("w{i}-1"), format!("w{j}-1"));
            let found = report.violations.iter().any(|v| {
                v.kind == ViolationKind::Overlap && v.holds.contains(&a) && v.holds.contains(&b)
            });
            prop_assert!(found, "{} and {} not reported", a, b);
            prop_assert_eq!(report.verdict, Verdict::Fail);
        }
    }
}
