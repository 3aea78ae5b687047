//! The failover chaos suite: a workload of worker processes contending for
//! a few lock names, faults injected under them, a history of everything
//! that happened, and a checker that can fail.
//!
//! - [`history`]: the event log (one JSON line per event, `CLOCK_MONOTONIC`).
//! - [`worker`] / [`workers`]: the client processes and their management;
//!   [`hold_log`]: how every client logs a hold (mutex, read-write lock,
//!   semaphore).
//! - [`cluster`]: the lock nodes (behind proxies) and the resource server.
//! - [`faults`] / [`mix`]: the fault kinds the lock must survive, and the
//!   run that injects them.
//! - [`docker_faults`] / [`docker_mix`]: the same run on the docker
//!   testbed's containers, with container-level faults ([`book`] keeps
//!   the faults of a run; [`node_spec`] lets a worker name a Sentinel
//!   group as a node).
//! - [`controls`]: deterministic schedules that break the algorithm's
//!   assumptions on purpose; the checker must catch every one.
//! - [`checker`] / [`timeline`]: the verdict, `report.json` and
//!   `timeline.svg`.
//!
//! The checker works on any history, so it can be tried on a hand-made
//! one: two holders of one name whose intervals meet fail the check.
//!
//! ```
//! use quorumlock_testbed::chaos::checker::{check, Floors, Verdict, ViolationKind};
//! use quorumlock_testbed::chaos::history::{Event, What};
//!
//! let ms = 1_000_000; // history stamps are nanoseconds
//! let event = |t, src: &str, what| Event { t, src: src.into(), what };
//! let won = |hold: &str, deadline| What::Won {
//!     key: "order".into(),
//!     hold: hold.into(),
//!     deadline,
//!     nodes: vec![0, 1, 2],
//!     mode: None,
//!     owner: None,
//! };
//! let history = vec![
//!     event(0, "A", won("A-1", 1_000 * ms)),
//!     // B wins while A's validity still runs: the lock was broken.
//!     event(400 * ms, "B", won("B-1", 1_400 * ms)),
//! ];
//! let report = check(&history, &Floors::none());
//! assert_eq!(report.verdict, Verdict::Fail);
//! assert_eq!(report.count(ViolationKind::Overlap), 1);
//! ```

use std::io;
use std::path::{Path, PathBuf};

pub mod book;
pub mod checker;
pub mod cluster;
pub mod controls;
pub mod docker_faults;
pub mod docker_mix;
pub mod faults;
pub mod history;
pub mod hold_log;
pub mod mix;
pub mod node_spec;
pub mod timeline;
pub mod worker;
pub mod workers;

#[cfg(test)]
mod synth;

use checker::{CheckReport, Floors};

/// Why a chaos run could not be carried out (as opposed to a run that
/// found violations, which is a [`CheckReport`]).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// Starting, faulting or inspecting a server failed.
    #[error(transparent)]
    Testbed(#[from] crate::TestbedError),
    /// A file of the run could not be written or read.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        source: io::Error,
    },
    /// A worker process could not be managed.
    #[error("worker: {0}")]
    Worker(String),
    /// A bad setting, named with its value.
    #[error("{0}")]
    Options(String),
    /// A control's schedule did not go as planned (a setup step failed).
    #[error("control {control}: {step}")]
    Schedule {
        /// The control.
        control: String,
        /// The step that went wrong.
        step: String,
    },
}

impl ChaosError {
    /// A closure that wraps an I/O error with `context`, for `map_err`.
    pub fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> ChaosError {
        let context = context.into();
        move |source| ChaosError::Io { context, source }
    }
}

/// Merges the run's history files into `dir/history.jsonl`, checks it,
/// and writes `dir/report.json` and `dir/timeline.svg`.
pub fn finish(dir: &Path, inputs: &[PathBuf], floors: &Floors) -> Result<CheckReport, ChaosError> {
    let inputs: Vec<&Path> = inputs
        .iter()
        .map(PathBuf::as_path)
        .filter(|p| p.exists())
        .collect();
    let merged = dir.join("history.jsonl");
    let events = history::merge(&inputs, &merged).map_err(ChaosError::io(format!(
        "merging the history into {}",
        merged.display()
    )))?;
    report(dir, &events, floors)
}

/// Checks a stored run again: reads `dir/history.jsonl` (left as it is)
/// and rewrites `dir/report.json` and `dir/timeline.svg`.
pub fn recheck(dir: &Path, floors: &Floors) -> Result<CheckReport, ChaosError> {
    let path = dir.join("history.jsonl");
    let events =
        history::read(&path).map_err(ChaosError::io(format!("reading {}", path.display())))?;
    report(dir, &events, floors)
}

/// Checks `events` and writes `dir/report.json` and `dir/timeline.svg`.
fn report(
    dir: &Path,
    events: &[history::Event],
    floors: &Floors,
) -> Result<CheckReport, ChaosError> {
    let report = checker::check(events, floors);
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| ChaosError::io("encoding report.json")(io::Error::other(e)))?;
    std::fs::write(dir.join("report.json"), json).map_err(ChaosError::io("writing report.json"))?;
    let svg = timeline::render_svg(events, &report);
    std::fs::write(dir.join("timeline.svg"), svg)
        .map_err(ChaosError::io("writing timeline.svg"))?;
    Ok(report)
}
