//! The book a run keeps of its faults: ids, start and end in the history,
//! the faults active now (for the progress line), and the problems met
//! while injecting (noted in the history at the end).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::faults::Lane;
use super::history::{HistoryWriter, What};
use super::mix::count_in;
use super::workers::Workers;

/// The faults of one run.
pub struct FaultBook {
    log: HistoryWriter,
    next: AtomicU32,
    active: Mutex<BTreeMap<u32, String>>,
    problems: Mutex<Vec<String>>,
}

impl FaultBook {
    /// A book that writes to `log`.
    pub fn new(log: HistoryWriter) -> FaultBook {
        FaultBook {
            log,
            next: AtomicU32::new(1),
            active: Mutex::new(BTreeMap::new()),
            problems: Mutex::new(Vec::new()),
        }
    }

    /// Logs a fault's start; returns its id.
    pub fn start(&self, kind: &str, target: &str, detail: String) -> u32 {
        let fault = self.next.fetch_add(1, Ordering::SeqCst);
        self.active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fault, format!("{kind} {target}"));
        let _ = self.log.log(What::FaultStart {
            fault,
            kind: kind.to_string(),
            target: target.to_string(),
            detail,
        });
        fault
    }

    /// Logs a fault's end.
    pub fn end(&self, fault: u32) {
        let _ = self.log.log(What::FaultEnd { fault });
        self.active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fault);
    }

    /// A note in the history (what a fault found out, say).
    pub fn note(&self, text: String) {
        let _ = self.log.log(What::Note { text });
    }

    /// Remembers a problem met while injecting.
    pub fn problem(&self, text: String) {
        self.problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(text);
    }

    /// Writes every problem to the history as a note.
    pub fn note_problems(&self) {
        for problem in self
            .problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            self.note(format!("problem: {problem}"));
        }
    }

    /// The problems met so far.
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Faults started so far.
    pub fn started(&self) -> u32 {
        self.next.load(Ordering::SeqCst) - 1
    }

    fn active(&self) -> Vec<String> {
        self.active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

/// Prints a progress line every 5 s until `end`: acquisitions so far (read
/// from the workers' histories), faults, and the faults active now.
pub fn progress(book: &FaultBook, workers: &Workers, end: Instant, duration: Duration) {
    let start = Instant::now();
    let mut offsets: BTreeMap<PathBuf, u64> = BTreeMap::new();
    let mut won = 0u64;
    while Instant::now() < end {
        let next = Instant::now() + Duration::from_secs(5);
        while Instant::now() < next.min(end) {
            thread::sleep(Duration::from_millis(100));
        }
        for path in workers.histories() {
            let from = offsets.get(&path).copied().unwrap_or(0);
            let (n, at) = count_in(&path, from);
            won += n;
            offsets.insert(path, at);
        }
        let secs = start.elapsed().as_secs_f64();
        let active = book.active();
        eprintln!(
            "[{:>4.0}s/{:.0}s] acquisitions {won:>6} ({:>4.0}/s) · faults {:>3} · now: {}",
            secs,
            duration.as_secs_f64(),
            won as f64 / secs.max(0.001),
            book.started(),
            if active.is_empty() {
                "none".to_string()
            } else {
                active.join(", ")
            }
        );
    }
}

/// The kinds of each lane that has any (node, link, client), with the
/// lane's own seed drawn from the run's.
pub fn by_lane<K: Copy>(kinds: &[K], lane_of: impl Fn(K) -> Lane, seed: u64) -> Vec<(Vec<K>, u64)> {
    [Lane::Node, Lane::Link, Lane::Client]
        .into_iter()
        .enumerate()
        .filter_map(|(i, lane)| {
            let of_lane: Vec<K> = kinds
                .iter()
                .copied()
                .filter(|k| lane_of(*k) == lane)
                .collect();
            let lane_seed = seed.wrapping_mul(31).wrapping_add(i as u64);
            (!of_lane.is_empty()).then_some((of_lane, lane_seed))
        })
        .collect()
}
