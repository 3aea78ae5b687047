//! The [`CheckReport`]: the verdict drawn from the violations found and the
//! coverage problems, and its summary table for a terminal.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::coverage::{Floors, Stats};
use super::rules::{Found, Violation, ViolationKind};
use crate::chaos::history::Nanos;
use crate::table::{Align, Table, clip};

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
    /// [`MAX_REPORTED_PER_KIND`](super::MAX_REPORTED_PER_KIND) earliest by
    /// start.
    pub violations: Vec<Violation>,
}

/// The width of the summary table's rules; no line is longer.
const WIDTH: usize = 78;

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
        let rule = format!("{}\n", "-".repeat(WIDTH));
        let mut out = String::new();
        let _ = writeln!(out, "{}", "=".repeat(WIDTH));
        let _ = writeln!(
            out,
            " chaos check: {}   ({} failing, {} guaranteed, {} informational violations)",
            self.verdict.label(),
            self.failing_violations,
            self.guaranteed_violations,
            self.unguaranteed_violations
        );
        out += &rule;
        out += &self.figures_table();
        out += &rule;
        out += &self.keys_table();
        out += &rule;
        out += &self.fault_kinds_table();
        out += &rule;
        out += &self.violations_table();
        out += &self.first_failing();
        out += &rule;
        let _ = writeln!(out, " verdict: {}", self.verdict.label());
        for r in &self.reasons {
            let _ = writeln!(out, "   - {r}");
        }
        let _ = writeln!(out, "{}", "=".repeat(WIDTH));
        out
    }

    /// The run's figures, two to a line.
    fn figures_table(&self) -> String {
        // Fixed widths, the second pair set off by two more spaces
        // (1 + 19 + 2 + 16 + 2 + 21 + 2 + 15 = 78): the columns stay put
        // from run to run.
        let mut table = Table::new([Align::Left, Align::Right, Align::Left, Align::Right])
            .indent(1)
            .min_widths([19, 16, 21, 15]);
        let figures = figures(&self.stats);
        for [(a, av), (b, bv)] in figures.as_chunks::<2>().0 {
            table.row([a.to_string(), av.clone(), format!("  {b}"), bv.clone()]);
        }
        if !self.stats.final_seen {
            table.text(" (no final event: final counters and keys left not checked)");
        }
        table.render()
    }

    /// Acquisitions per lock name.
    fn keys_table(&self) -> String {
        let mut table = Table::new([Align::Left, Align::Right])
            .indent(1)
            .min_widths([30, 12])
            .header(["lock name", "acquisitions"]);
        for (key, n) in &self.stats.acquisitions_per_key {
            table.row([clip(key, 30), thousands(*n)]);
        }
        table.render()
    }

    /// Per fault kind: how many, for how long, and what happened during.
    fn fault_kinds_table(&self) -> String {
        let right = Align::Right;
        let mut table = Table::new([Align::Left, right, right, right, right])
            .indent(1)
            .min_widths([24, 5, 9, 15, 15])
            .header([
                "fault kind",
                "count",
                "total s",
                "attempts during",
                "won during",
            ]);
        let kinds = &self.stats.faults_per_kind;
        if kinds.is_empty() {
            table.text(" (no faults)");
        }
        for k in kinds {
            table.row([
                clip(&k.kind, 24),
                thousands(k.count),
                format!("{:.1}", k.total_s),
                thousands(k.attempts_during),
                thousands(k.acquisitions_during),
            ]);
        }
        table.render()
    }

    /// Per violation kind: whether it is guaranteed, fails the run, and
    /// how many were found.
    fn violations_table(&self) -> String {
        let right = Align::Right;
        let mut table = Table::new([Align::Left, right, right, right])
            .indent(1)
            .min_widths([24, 10, 12, 10])
            .header(["violation kind", "guaranteed", "fails run", "count"]);
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
        for c in &self.violation_counts {
            table.row([
                c.kind.name().to_string(),
                yes_no(c.guaranteed),
                yes_no(c.fails_run),
                thousands(c.count),
            ]);
        }
        table.render()
    }

    /// The first ten violations that fail the run, their details wrapped.
    fn first_failing(&self) -> String {
        let mut out = String::new();
        let failing: Vec<&Violation> = self
            .violations
            .iter()
            .filter(|v| v.kind.fails_run(&self.floors))
            .take(10)
            .collect();
        if failing.is_empty() {
            return out;
        }
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
        out
    }
}

/// The run's figures as (label, value), in the order of the summary
/// table, two to a line; the last of a line may be empty.
fn figures(s: &Stats) -> [(&'static str, String); 28] {
    let pct = |n: u64, r: f64| format!("{} ({:.1}%)", thousands(n), r * 100.0);
    let free_after_kill = s
        .free_after_kill_max_ms
        .map_or_else(|| "-".to_string(), |v| format!("{v:.0} ms"));
    let permits_at_once = if s.permits_k > 0 {
        format!("{} of K {}", s.permits_at_once_max, s.permits_k)
    } else {
        thousands(s.permits_at_once_max)
    };
    [
        ("wall duration", format!("{:.1} s", s.wall_s)),
        ("events", thousands(s.events)),
        ("acquire attempts", thousands(s.attempts)),
        ("acquisitions", thousands(s.acquisitions)),
        ("reads", thousands(s.reads)),
        ("writes", thousands(s.writes)),
        ("permits", thousands(s.permits)),
        ("permits at once max", permits_at_once),
        ("failed attempts", thousands(s.failed)),
        ("token-less holds", thousands(s.token_less_holds)),
        ("renewals", thousands(s.renewals)),
        ("losses reported", thousands(s.losses_reported)),
        (
            "hold p50 / p99",
            format!("{:.1} / {:.1} ms", s.hold_p50_ms, s.hold_p99_ms),
        ),
        ("hold max", format!("{:.1} ms", s.hold_max_ms)),
        (
            "attempts in faults",
            pct(s.attempts_during_fault, s.attempts_during_fault_ratio),
        ),
        (
            "won in faults",
            pct(
                s.acquisitions_during_fault,
                s.acquisitions_during_fault_ratio,
            ),
        ),
        ("fenced accepted", thousands(s.fenced_writes_accepted)),
        ("fenced refused", thousands(s.fenced_writes_rejected)),
        ("unfenced writes", thousands(s.unfenced_writes)),
        ("orphan writes", thousands(s.orphan_writes)),
        ("killed holds", thousands(s.killed_holds)),
        (
            "killed not followed",
            thousands(s.killed_holds_not_followed),
        ),
        ("free after kill max", free_after_kill),
        ("readers at once max", thousands(s.readers_at_once_max)),
        ("lost upd. fenced", thousands(s.lost_updates_fenced)),
        ("lost upd. unfenced", thousands(s.lost_updates_unfenced)),
        (
            "won on grants",
            format!(
                "{} of {}",
                thousands(s.granted),
                thousands(s.services_acquired)
            ),
        ),
        ("handoffs", thousands(s.handoffs)),
    ]
}

/// The report on what was `found` and the `coverage_problems` of a run
/// from `t0` to `t_end` with `stats`: the counts per kind, the verdict and
/// its reasons.
pub(super) fn conclude(
    floors: &Floors,
    (t0, t_end): (Nanos, Nanos),
    stats: Stats,
    found: Found,
    coverage_problems: Vec<String>,
) -> CheckReport {
    let violation_counts: Vec<KindCount> = ViolationKind::ALL
        .iter()
        .map(|&kind| KindCount {
            kind,
            guaranteed: kind.guaranteed(),
            fails_run: kind.fails_run(floors),
            count: found.counted(kind),
            listed: found.listed(kind),
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
        violations: found.into_violations(),
    }
}

/// `1234567` as `1,234,567`.
pub(in crate::chaos) fn thousands(n: u64) -> String {
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
