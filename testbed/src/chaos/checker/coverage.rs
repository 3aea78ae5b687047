//! What the run exercised: the figures of [`Stats`] that are not
//! violations (attempts, faults, holds, kills), and the coverage
//! [`Floors`] a run must reach for its verdict to be a pass.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::holds::{EndedBy, FaultSpan, Hold};
use crate::chaos::history::{Event, Mode, Nanos, What};

/// How much a run must have exercised for its verdict to be
/// [`Verdict::Pass`](super::Verdict::Pass). Below any floor the verdict is
/// [`Verdict::Invalid`](super::Verdict::Invalid).
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
    /// Read holds of read-write lock names (among the acquisitions).
    #[serde(default)]
    pub reads: u64,
    /// Write holds of read-write lock names (among the acquisitions).
    #[serde(default)]
    pub writes: u64,
    /// Permit holds of semaphore names (among the acquisitions).
    #[serde(default)]
    pub permits: u64,
    /// The most read holds of one read-write lock name at one instant.
    #[serde(default)]
    pub readers_at_once_max: u64,
    /// The most permit holds of one semaphore name at one instant.
    #[serde(default)]
    pub permits_at_once_max: u64,
    /// The K of that semaphore (the largest its holders took permits with).
    #[serde(default)]
    pub permits_k: u32,
    /// Attempts started while any fault was active.
    pub attempts_during_fault: u64,
    /// `attempts_during_fault / attempts` (0 without attempts).
    pub attempts_during_fault_ratio: f64,
    /// Acquisitions made while any fault was active.
    pub acquisitions_during_fault: u64,
    /// `acquisitions_during_fault / acquisitions` (0 without any).
    pub acquisitions_during_fault_ratio: f64,
    /// Attempts that won, by the lock services' own counters, as the
    /// workers logged them ([`What::Services`]; a killed worker's last
    /// seconds are missing).
    #[serde(default)]
    pub services_acquired: u64,
    /// Of those, the ones decided on grants.
    #[serde(default)]
    pub granted: u64,
    /// Releases that handed the name to a waiter of the same lock service.
    #[serde(default)]
    pub handoffs: u64,
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

/// When the acquire attempts started and the acquisitions were made.
pub(super) struct Times {
    attempts: Vec<Nanos>,
    wins: Vec<Nanos>,
}

/// Counts the attempts, acquisitions (also per key), failures, renewals
/// and losses into `stats`; returns the times of attempts and wins.
pub(super) fn count_events(events: &[Event], stats: &mut Stats) -> Times {
    let mut times = Times {
        attempts: Vec::new(),
        wins: Vec::new(),
    };
    for e in events {
        match &e.what {
            What::AcquireStart { .. } => times.attempts.push(e.t),
            What::Won { key, mode, .. } => {
                times.wins.push(e.t);
                *stats.acquisitions_per_key.entry(key.clone()).or_default() += 1;
                match mode {
                    None => {}
                    Some(Mode::Read { .. }) => stats.reads += 1,
                    Some(Mode::Write) => stats.writes += 1,
                    Some(Mode::Permit { .. }) => stats.permits += 1,
                }
            }
            What::Failed { .. } => stats.failed += 1,
            What::Renew { .. } => stats.renewals += 1,
            What::Lost { .. } => stats.losses_reported += 1,
            What::Services {
                acquired,
                granted,
                handoffs,
            } => {
                stats.services_acquired += *acquired;
                stats.granted += *granted;
                stats.handoffs += *handoffs;
            }
            _ => {}
        }
    }
    stats.attempts = times.attempts.len() as u64;
    stats.acquisitions = times.wins.len() as u64;
    times
}

/// The fault figures: overall and per kind, with the attempts and wins
/// made while a fault was active.
pub(super) fn fault_figures(faults: &[FaultSpan], times: &Times, stats: &mut Stats) {
    stats.faults = faults.len() as u64;
    let all = Spans::new(faults.iter().map(|f| (f.start, f.end)));
    stats.attempts_during_fault = all.count_inside(&times.attempts);
    stats.acquisitions_during_fault = all.count_inside(&times.wins);
    stats.attempts_during_fault_ratio = ratio(stats.attempts_during_fault, stats.attempts);
    stats.acquisitions_during_fault_ratio =
        ratio(stats.acquisitions_during_fault, stats.acquisitions);
    let mut by_kind: BTreeMap<&str, Vec<&FaultSpan>> = BTreeMap::new();
    for f in faults {
        by_kind.entry(f.kind.as_str()).or_default().push(f);
    }
    for (kind, spans) in &by_kind {
        let union = Spans::new(spans.iter().map(|f| (f.start, f.end)));
        stats.faults_per_kind.push(FaultKindStats {
            kind: kind.to_string(),
            count: spans.len() as u64,
            total_s: spans.iter().map(|f| (f.end - f.start) as f64).sum::<f64>() / 1e9,
            attempts_during: union.count_inside(&times.attempts),
            acquisitions_during: union.count_inside(&times.wins),
        });
    }
}

/// The hold figures: interval percentiles, token-less and killed holds,
/// and how soon a killed holder's lock went to another worker.
pub(super) fn hold_figures(holds: &[Hold], stats: &mut Stats) {
    let mut durations: Vec<Nanos> = holds.iter().map(|h| h.end - h.start).collect();
    durations.sort_unstable();
    stats.hold_p50_ms = percentile(&durations, 0.50) as f64 / 1e6;
    stats.hold_p99_ms = percentile(&durations, 0.99) as f64 / 1e6;
    stats.hold_max_ms = durations.last().copied().unwrap_or(0) as f64 / 1e6;
    stats.token_less_holds = holds.iter().filter(|h| h.token.is_none()).count() as u64;
    stats.killed_holds = holds.iter().filter(|h| h.ended_by == EndedBy::Kill).count() as u64;
    for key_holds in holds.chunk_by(|a, b| a.key == b.key) {
        free_after_kill(key_holds, stats);
    }
}

/// For each hold of `key_holds` (one key, sorted by start) that its
/// worker's kill ended: the time to the next hold by another worker.
fn free_after_kill(key_holds: &[Hold], stats: &mut Stats) {
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
}

/// The floors `stats` does not reach, one line each.
pub(super) fn problems(stats: &Stats, floors: &Floors) -> Vec<String> {
    let mut problems = Vec::new();
    if stats.acquisitions < floors.min_acquisitions {
        problems.push(format!(
            "only {} acquisitions (floor {})",
            stats.acquisitions, floors.min_acquisitions
        ));
    }
    if stats.faults < floors.min_faults {
        problems.push(format!(
            "only {} faults injected (floor {})",
            stats.faults, floors.min_faults
        ));
    }
    for kind in &floors.required_kinds {
        if !stats.faults_per_kind.iter().any(|k| k.kind == *kind) {
            problems.push(format!("no fault of required kind {kind}"));
        }
    }
    if stats.attempts_during_fault_ratio < floors.min_during_fault_ratio {
        problems.push(format!(
            "{:.1}% of acquire attempts started during a fault (floor {:.1}%)",
            stats.attempts_during_fault_ratio * 100.0,
            floors.min_during_fault_ratio * 100.0
        ));
    }
    problems
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
