//! What the history says happened: the holds (with the end of each one's
//! interval, see the [module documentation](super)), the fault spans and
//! the final state. The lowest layer of the checker: it judges nothing.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::chaos::history::{Event, Mode, Nanos, What};

/// The fault kind that kills a worker process; its target is the worker id.
pub const CLIENT_CRASH: &str = "client_crash";

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
    pub(super) fn name(self) -> &'static str {
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
    /// The nodes (0-based, configuration order) its acquire reported held,
    /// so that a violation names where both holders believed they held.
    pub nodes: Vec<usize>,
    /// A read-write lock's read or write side, or a semaphore's permit;
    /// `None` for a mutex's hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
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

/// The data of a history's last [`What::Final`] event.
pub(super) struct Final<'a> {
    pub(super) t: Nanos,
    pub(super) fenced: &'a [(String, u64)],
    pub(super) unfenced: &'a [(String, u64)],
    pub(super) keys_left: &'a [String],
}

/// The history's last [`What::Final`] event (of two at the same time, the
/// later one in `events`), if it has one.
pub(super) fn last_final(events: &[Event]) -> Option<Final<'_>> {
    let mut last: Option<Final<'_>> = None;
    for e in events {
        if let What::Final {
            fenced,
            unfenced,
            keys_left,
        } = &e.what
            && last.as_ref().is_none_or(|f| e.t >= f.t)
        {
            last = Some(Final {
                t: e.t,
                fenced,
                unfenced,
                keys_left,
            });
        }
    }
    last
}

/// `t` in seconds after `t0`.
pub(in crate::chaos) fn secs(t: Nanos, t0: Nanos) -> f64 {
    t.saturating_sub(t0) as f64 / 1e9
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
    nodes: &'a [usize],
    mode: Option<Mode>,
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
            nodes: &[],
            mode: None,
        }
    }

    fn add(&mut self, e: &'a Event) {
        match &e.what {
            What::Won {
                key,
                deadline,
                nodes,
                mode,
                ..
            } => {
                if self.won.is_none_or(|(t, _)| e.t < t) {
                    self.won = Some((e.t, e.src.as_str()));
                    self.key = key;
                    self.nodes = nodes;
                    self.mode = *mode;
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
            nodes: self.nodes.to_vec(),
            mode: self.mode,
        })
    }
}
