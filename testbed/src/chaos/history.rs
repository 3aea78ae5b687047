//! The history of a chaos run: one JSON line per event, stamped with
//! `CLOCK_MONOTONIC`, which every process on the machine shares, so the
//! lines of all workers and of the fault injector merge into one timeline.
//!
//! Each process appends to its own file with one `write` per line, so a
//! worker killed with `SIGKILL` loses nothing it had already logged. The
//! run merges the files into `history.jsonl`, sorted by time.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_MONOTONIC`, shared by every process of a run.
pub type Nanos = u64;

/// The current time on `CLOCK_MONOTONIC`, in nanoseconds.
pub fn now() -> Nanos {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // The kernel never returns negative fields for this clock.
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened (`CLOCK_MONOTONIC`, ns).
    pub t: Nanos,
    /// Who logged it: a worker id such as `w3`, or `chaos` for the injector.
    pub src: String,
    /// What happened.
    #[serde(flatten)]
    pub what: What,
}

/// Which protected value a [`What::Write`] went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The fenced counter: reads and writes carry the fencing token and the
    /// resource refuses a token below the largest it has seen.
    Fenced,
    /// The plain counter: `GET` then `SET`, protected by the lock alone.
    Unfenced,
}

/// What a hold of a [`MultiRwLock`](quorumlock::MultiRwLock) or a
/// [`MultiSemaphore`](quorumlock::MultiSemaphore) is (a mutex hold has
/// none): what the checker judges it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The read side of a read-write lock name: one of its reader slots.
    /// Readers share; no writer may overlap one.
    Read {
        /// The reader slot held.
        slot: u32,
    },
    /// The write side of a read-write lock name (every reader slot):
    /// overlaps no other hold of the name.
    Write,
    /// One permit of a semaphore name, taken as one of `permits`: at most
    /// that many holds of the name overlap.
    Permit {
        /// The slot held (below `permits`).
        slot: u32,
        /// The K the holder took its permit with.
        permits: u32,
    },
}

impl Mode {
    /// The one slot the hold has (a reader's, a permit's); `None` for a
    /// writer, which has every slot.
    pub fn slot(self) -> Option<u32> {
        match self {
            Mode::Read { slot } | Mode::Permit { slot, .. } => Some(slot),
            Mode::Write => None,
        }
    }

    /// `read`, `write` or `permit`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Read { .. } => "read",
            Mode::Write => "write",
            Mode::Permit { .. } => "permit",
        }
    }
}

/// The kinds of event. Holds are named by `hold`, unique in the run
/// (`<worker>-<sequence>`); an attempt that wins keeps its id as the hold id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum What {
    /// A worker process started.
    WorkerStart {
        /// Its pid.
        pid: u32,
    },
    /// An acquire call is about to be made.
    AcquireStart {
        /// The lock name.
        key: String,
        /// The attempt's id (the hold id if it wins).
        hold: String,
        /// The owner token the call acquires as (every attempt of it
        /// writes this token), so that a key found on a node is traced to
        /// its call. Absent in histories from before it was logged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    /// The acquire returned a guard. Stamped after it returned.
    Won {
        /// The lock name.
        key: String,
        /// The hold id.
        hold: String,
        /// The guard's validity deadline at that moment (`now + validity`).
        deadline: Nanos,
        /// Indexes (0-based, configuration order) of the nodes held.
        nodes: Vec<usize>,
        /// What the hold is when it is not a mutex's: a read-write lock's
        /// read or write side, or a semaphore's permit. Absent for a mutex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<Mode>,
        /// The owner token of the attempt that won, for a call whose
        /// attempts each write a token of their own (a semaphore's or a
        /// read-write lock's, which take no owner): the prober's findings
        /// are traced to the call through it. Absent when the
        /// [`What::AcquireStart`] named the owner.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    /// The acquire returned an error.
    Failed {
        /// The lock name.
        key: String,
        /// The attempt's id.
        hold: String,
        /// The error, as displayed.
        error: String,
    },
    /// The hold's fencing token.
    Token {
        /// The lock name.
        key: String,
        /// The hold id.
        hold: String,
        /// The token.
        token: u64,
    },
    /// The fencing token could not be established; the hold writes nothing
    /// to the fenced counter.
    TokenFailed {
        /// The lock name.
        key: String,
        /// The hold id.
        hold: String,
        /// The error, as displayed.
        error: String,
    },
    /// The watchdog renewed the hold: its deadline moved.
    Renew {
        /// The lock name.
        key: String,
        /// The hold id.
        hold: String,
        /// The new validity deadline.
        deadline: Nanos,
    },
    /// The guard reported the lock lost (before its deadline).
    Lost {
        /// The lock name.
        key: String,
        /// The hold id.
        hold: String,
        /// The deadline the hold had when the loss was reported.
        deadline: Nanos,
        /// The loss notice, as displayed.
        reason: String,
    },
    /// The holder stops working under the lock and calls release. Stamped
    /// before the release is sent.
    Release {
        /// The lock name.
        key: String,
        /// The hold id.
        hold: String,
        /// The validity deadline at that moment.
        deadline: Nanos,
        /// Whether the guard still believed it held the lock.
        held: bool,
    },
    /// One read-modify-write on a protected counter, logged when the write
    /// (or the fenced read) was answered.
    Write {
        /// The lock name (each name protects its own pair of counters).
        key: String,
        /// The hold id.
        hold: String,
        /// Which counter.
        target: Target,
        /// The fencing token sent, for the fenced counter.
        token: Option<u64>,
        /// The value read (`None` if a fenced read was refused).
        read: Option<u64>,
        /// The value written (`read + 1`), `None` if nothing was written.
        wrote: Option<u64>,
        /// Whether the resource stored it.
        accepted: bool,
        /// For a refused fenced read or write: the largest token the
        /// resource had seen.
        last: Option<u64>,
    },
    /// A fault began.
    FaultStart {
        /// Its id in this run.
        fault: u32,
        /// Its kind, e.g. `node_pause` (see the chaos module).
        kind: String,
        /// What it hit: `n3`, `w2`, `n5:master`, ...
        target: String,
        /// Human-readable parameters (`delay 40ms ±20ms`, `rate 1.015`).
        detail: String,
    },
    /// A fault ended (the node is back, the link healed, ...).
    FaultEnd {
        /// The id from its [`What::FaultStart`].
        fault: u32,
    },
    /// A lock key found on a node by the run's prober, which reads every
    /// name on every node it can reach directly, a few times a second.
    Probe {
        /// The node (0-based, configuration order).
        node: usize,
        /// The lock name.
        key: String,
        /// The key's owner token.
        owner: String,
        /// The key's remaining TTL in ms (`PTTL`).
        pttl_ms: i64,
    },
    /// What the run found on the nodes and the resource once it was quiet.
    Final {
        /// Per lock name: the fenced counter's value.
        fenced: Vec<(String, u64)>,
        /// Per lock name: the unfenced counter's value.
        unfenced: Vec<(String, u64)>,
        /// Lock keys still on a node after the quiet period, as
        /// `n<i>:<key>` (fencing counters excluded: they never expire).
        keys_left: Vec<String>,
    },
    /// The lock settings every worker of the run uses, logged once at its
    /// start, so that the checker can judge what depends on them.
    Settings {
        /// How long a node restarted without its data casts no vote
        /// (`LockConfig`'s quarantine, in ms).
        quarantine_ms: u64,
    },
    /// What a worker's lock services counted since its previous such event
    /// (every 2 s, and when it stops of its own accord; a killed worker's
    /// last seconds are lost with it): how the acquisitions were won.
    Services {
        /// Attempts that won (`LockStats::acquired`).
        acquired: u64,
        /// Attempts decided on grants: releases of other processes took
        /// the name for the waiting call (`LockStats::granted`).
        granted: u64,
        /// Releases that handed the name to a waiter of the same lock
        /// service (`LockStats::handoffs`).
        handoffs: u64,
    },
    /// Free-form progress note (phase changes, control steps).
    Note {
        /// The text.
        text: String,
    },
}

/// Appends events to one process's history file, one `write` per line.
/// Cheap to clone; clones share the file.
#[derive(Clone, Debug)]
pub struct HistoryWriter {
    src: Arc<str>,
    file: Arc<Mutex<File>>,
}

impl HistoryWriter {
    /// Creates (or appends to) `path`; events are logged as `src`.
    pub fn create(path: &Path, src: &str) -> io::Result<HistoryWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(HistoryWriter {
            src: Arc::from(src),
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Logs `what` stamped now.
    pub fn log(&self, what: What) -> io::Result<()> {
        self.log_at(now(), what)
    }

    /// Logs `what` with a stamp taken earlier.
    pub fn log_at(&self, t: Nanos, what: What) -> io::Result<()> {
        let event = Event {
            t,
            src: self.src.to_string(),
            what,
        };
        let mut line = serde_json::to_vec(&event).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(&line)
    }
}

/// Reads a history file. Every line is written with one `write` ending in a
/// newline, so only a final piece without its newline can have been torn
/// (a process killed mid-write): it is kept if it parses and skipped if not.
/// Any newline-terminated bad line, including one that is not UTF-8, is an
/// error naming its number.
pub fn read(path: &Path) -> io::Result<Vec<Event>> {
    let bytes = std::fs::read(path)?;
    let mut pieces: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // The piece after the last newline: empty if the file ends with one,
    // otherwise a line whose write may have been cut short.
    let tail = pieces.pop().unwrap_or_default();
    let bad = |number: usize, e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: line {number}: {e}", path.display()),
        )
    };
    let mut events = Vec::with_capacity(pieces.len() + 1);
    for (i, piece) in pieces.iter().enumerate() {
        let line = std::str::from_utf8(piece).map_err(|e| bad(i + 1, &e))?;
        if line.trim().is_empty() {
            continue;
        }
        events.push(serde_json::from_str::<Event>(line).map_err(|e| bad(i + 1, &e))?);
    }
    if let Ok(event) = serde_json::from_slice::<Event>(tail) {
        events.push(event);
    }
    Ok(events)
}

/// Merges history files into one list sorted by time (stable for equal
/// stamps), and writes it to `out` as JSON lines.
pub fn merge(inputs: &[&Path], out: &Path) -> io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for path in inputs {
        events.extend(read(path)?);
    }
    events.sort_by_key(|e| e.t);
    let mut file = io::BufWriter::new(File::create(out)?);
    for event in &events {
        serde_json::to_writer(&mut file, event).map_err(io::Error::other)?;
        file.write_all(b"\n")?;
    }
    file.flush()?;
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(t: Nanos, text: &str) -> Event {
        Event {
            t,
            src: "w1".to_string(),
            what: What::Note {
                text: text.to_string(),
            },
        }
    }

    fn line(event: &Event) -> Vec<u8> {
        let mut line = serde_json::to_vec(event).unwrap();
        line.push(b'\n');
        line
    }

    /// Writes `bytes` to a fresh file and reads it back.
    fn read_bytes(bytes: &[u8]) -> io::Result<Vec<Event>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w1.jsonl");
        std::fs::write(&path, bytes).unwrap();
        read(&path)
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let first = note(1, "first");
        let mut bytes = line(&first);
        let second = line(&note(2, "second"));
        bytes.extend_from_slice(&second[..second.len() / 2]);
        assert_eq!(read_bytes(&bytes).unwrap(), vec![first]);
    }

    #[test]
    fn a_last_line_missing_only_its_newline_is_kept() {
        let (first, second) = (note(1, "first"), note(2, "second"));
        let mut bytes = line(&first);
        let tail = line(&second);
        bytes.extend_from_slice(&tail[..tail.len() - 1]);
        assert_eq!(read_bytes(&bytes).unwrap(), vec![first, second]);
    }

    #[test]
    fn a_bad_terminated_last_line_is_an_error() {
        let mut bytes = line(&note(1, "first"));
        bytes.extend_from_slice(b"{\"t\":2,\"src\":\"w1\"\n");
        let err = read_bytes(&bytes).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn a_bad_line_in_the_middle_is_an_error() {
        let mut bytes = line(&note(1, "first"));
        bytes.extend_from_slice(b"garbage\n");
        bytes.extend_from_slice(&line(&note(3, "third")));
        let err = read_bytes(&bytes).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn a_terminated_line_that_is_not_utf8_is_an_error() {
        let mut bytes = line(&note(1, "first"));
        bytes.extend_from_slice(b"{\"t\":2,\xff}\n");
        let err = read_bytes(&bytes).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn a_torn_multibyte_character_is_tolerated() {
        let first = note(1, "first");
        let mut bytes = line(&first);
        let torn = line(&note(2, "é"));
        // Cut between the two bytes of `é`.
        let cut = torn.windows(2).position(|w| w == "é".as_bytes()).unwrap() + 1;
        bytes.extend_from_slice(&torn[..cut]);
        assert!(std::str::from_utf8(&bytes).is_err());
        assert_eq!(read_bytes(&bytes).unwrap(), vec![first]);
    }

    #[test]
    fn a_won_event_with_a_mode_round_trips() {
        for mode in [
            None,
            Some(Mode::Read { slot: 7 }),
            Some(Mode::Write),
            Some(Mode::Permit {
                slot: 1,
                permits: 3,
            }),
        ] {
            let event = Event {
                t: 5,
                src: "w1".into(),
                what: What::Won {
                    key: "rw0".into(),
                    hold: "w1-3".into(),
                    deadline: 9,
                    nodes: vec![0, 2],
                    mode,
                    owner: mode.map(|_| "0af1".to_string()),
                },
            };
            let bytes = line(&event);
            assert_eq!(read_bytes(&bytes).unwrap(), vec![event]);
        }
        // A mutex's win says nothing of either.
        let plain =
            r#"{"t":1,"src":"w1","ev":"won","key":"k0","hold":"w1-1","deadline":2,"nodes":[0]}"#;
        let events = read_bytes(format!("{plain}\n").as_bytes()).unwrap();
        assert!(matches!(
            &events[0].what,
            What::Won {
                mode: None,
                owner: None,
                ..
            }
        ));
    }

    #[test]
    fn blank_lines_are_skipped() {
        let (first, second) = (note(1, "first"), note(2, "second"));
        let mut bytes = line(&first);
        bytes.extend_from_slice(b"\n  \n");
        bytes.extend_from_slice(&line(&second));
        assert_eq!(read_bytes(&bytes).unwrap(), vec![first, second]);
    }
}
