//! Waiting for the name, and saying why. The library's own wait loop does
//! the waiting (wake-ups on release notices, backoff), one second at a
//! time: after each second that ends without the lock, the last attempt's
//! refusal says why, and a line goes to stderr when that reason changes
//! (held by another owner, nodes quarantined, nodes unreachable). A wait
//! with every node down is therefore never silent.

use std::time::{Duration, Instant};

use quorumlock::{Error, MultiRwLock, NodeErrorKind, NodeOutcome, NodeReports, Wait};

use crate::args::Mode;
use crate::connect::Inspector;
use crate::run::primitive::{Held, NAMED, Service};
use crate::shown;

/// How long each turn of the library's wait loop lasts: the first line
/// comes after this much waiting, and a change of reason is told within
/// about this long.
const TURN: Duration = Duration::from_secs(1);

/// Who waits, for what, and whether to say why.
pub struct Waiting<'a> {
    pub service: &'a Service,
    pub name: &'a str,
    /// `None`: until the name is won.
    pub budget: Option<Duration>,
    pub quiet: bool,
    /// Reads the holder's owner from the nodes, for the reason line.
    pub inspector: Inspector,
}

impl Waiting<'_> {
    /// Acquires the name within the budget, telling why it waits.
    pub async fn acquire(mut self) -> Result<Held, Error> {
        let began = Instant::now();
        // Connected first (bounded by the connect timeout): a fresh process
        // must not spend its one `--nonblock` attempt's node timeout on
        // connecting. A node that fails here fails the attempt, which says so.
        self.service.lock().warm_up().await;
        let end = self.budget.and_then(|b| began.checked_add(b));
        let mut attempts = 0u32;
        let mut picture = Picture::default();
        let mut told: Option<Reason> = None;
        loop {
            let left = end.map(|e| e.saturating_duration_since(Instant::now()));
            let turn = left.map_or(TURN, |l| l.min(TURN));
            let last = match self.service.acquire(self.name, Wait::up_to(turn)).await {
                Ok(guard) => return Ok(guard),
                Err(Error::WaitBudgetExhausted {
                    attempts: made,
                    last,
                    ..
                }) => {
                    attempts = attempts.saturating_add(made);
                    last
                }
                Err(other) => return Err(other),
            };
            if end.is_some_and(|e| Instant::now() >= e) {
                return Err(Error::WaitBudgetExhausted {
                    key: self.name.to_owned(),
                    attempts,
                    waited: began.elapsed(),
                    last,
                });
            }
            if self.quiet {
                continue;
            }
            let reason = self.reason(&mut picture, &last).await;
            if told.as_ref() != Some(&reason) {
                eprintln!(
                    "{}",
                    shown::line(&format!(
                        "quorumlock: waiting {:.0} s for {}: {}",
                        began.elapsed().as_secs_f64(),
                        shown::name(self.name),
                        reason.text
                    ))
                );
                told = Some(reason);
            }
        }
    }

    /// Why the last attempt was refused, with what the nodes said before.
    async fn reason(&mut self, picture: &mut Picture, last: &Error) -> Reason {
        let Some(reports) = last.node_reports() else {
            // The text carries times: the kind of error is the reason.
            let key = format!("{:?}", std::mem::discriminant(last));
            return Reason {
                key,
                text: last.to_string(),
            };
        };
        picture.update(reports);
        let holders = picture.holders();
        let owners = if holders.is_empty() {
            Vec::new()
        } else {
            let keys = self.service.refusing_keys(self.name);
            self.inspector.owners(&keys, &holders).await
        };
        picture.reason(self.service.mode(), &owners)
    }
}

/// What one node last said to an attempt.
#[derive(Clone, Debug)]
enum Said {
    /// Held by another owner (the key's time to live there).
    Held(Option<Duration>),
    /// Free, but others queue for it ahead of us.
    QueueAhead,
    /// Casts no vote for this long.
    Quarantined(Duration),
    Failed(NodeErrorKind),
    /// Won (the attempt failed elsewhere).
    Won,
}

/// What each node last said: a node the last attempt did not wait for
/// (it was decided before that node answered) keeps its earlier answer,
/// so that the reason does not flicker with the order of the replies.
#[derive(Default)]
struct Picture {
    nodes: Vec<(String, Option<Said>)>,
}

impl Picture {
    fn update(&mut self, reports: &NodeReports) {
        if self.nodes.len() != reports.len() {
            self.nodes = reports.iter().map(|r| (r.node.clone(), None)).collect();
        }
        for (slot, report) in self.nodes.iter_mut().zip(reports.iter()) {
            let said = match &report.outcome {
                NodeOutcome::Won => Said::Won,
                NodeOutcome::HeldByOther { pttl } => Said::Held(*pttl),
                NodeOutcome::WaitersAhead => Said::QueueAhead,
                NodeOutcome::Failed(e) if e.kind() == NodeErrorKind::Quarantined => {
                    Said::Quarantined(e.quarantine_left().unwrap_or_default())
                }
                NodeOutcome::Failed(e) => Said::Failed(e.kind()),
                _ => continue,
            };
            slot.1 = Some(said);
        }
    }

    /// The nodes (their index in the configuration) that last said
    /// another owner holds the name.
    fn holders(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| matches!(self.nodes[i].1, Some(Said::Held(_))))
            .collect()
    }

    /// What the nodes said that `pick` picks, with each node's name.
    fn said<T>(&self, pick: impl Fn(&Said) -> Option<T>) -> Vec<(&str, T)> {
        self.nodes
            .iter()
            .filter_map(|(node, said)| Some((node.as_str(), pick(said.as_ref()?)?)))
            .collect()
    }

    /// The reason, from what the nodes said and the holders' owner
    /// tokens as the nodes gave them (see [`Inspector::owners`]).
    fn reason(&self, mode: Mode, owners: &[(Vec<u8>, u32)]) -> Reason {
        let total = self.nodes.len();
        let mut parts: Vec<(String, String)> = Vec::new();
        let held = self.said(|s| match s {
            Said::Held(ttl) => Some(*ttl),
            _ => None,
        });
        if !held.is_empty() {
            let ttl = held.iter().map(|(_, ttl)| *ttl).max().flatten();
            parts.push(held_by(mode, owners, ttl));
        }
        if !self
            .said(|s| matches!(s, Said::QueueAhead).then_some(()))
            .is_empty()
        {
            let text = match mode {
                // The only waiters a reader meets: writers, queued on
                // every reader slot.
                Mode::Reader => "a writer waits for it, and goes first",
                _ => "free, but others queue for it ahead",
            };
            parts.push(("others queue ahead".to_owned(), text.to_owned()));
        }
        let quarantined = self.said(|s| match s {
            Said::Quarantined(left) => Some(*left),
            _ => None,
        });
        if !quarantined.is_empty() {
            let left = quarantined
                .iter()
                .map(|(_, l)| *l)
                .max()
                .unwrap_or_default();
            let nodes: Vec<&str> = quarantined.iter().map(|(n, _)| *n).collect();
            parts.push((
                "quarantined".to_owned(),
                format!(
                    "{} of {total} nodes quarantined, voting in {:.0} s ({}; brand-new servers: see `quorumlock adopt --help`)",
                    nodes.len(),
                    left.as_secs_f64().ceil(),
                    nodes.join(", ")
                ),
            ));
        }
        let failed = self.said(|s| match s {
            Said::Failed(kind) => Some(*kind),
            _ => None,
        });
        if !failed.is_empty() {
            let mut kinds: Vec<String> = failed.iter().map(|(_, k)| k.to_string()).collect();
            kinds.sort();
            kinds.dedup();
            let each: Vec<String> = failed.iter().map(|(n, k)| format!("{n}: {k}")).collect();
            parts.push((
                format!("failed: {}", kinds.join(", ")),
                format!(
                    "{} of {total} nodes failed ({})",
                    failed.len(),
                    each.join(", ")
                ),
            ));
        }
        if parts.is_empty() {
            parts.push((
                "no quorum yet".to_owned(),
                "no quorum yet: too few nodes answered in time".to_owned(),
            ));
        }
        let (keys, texts): (Vec<String>, Vec<String>) = parts.into_iter().unzip();
        Reason {
            key: keys.join("; "),
            text: texts.join("; "),
        }
    }
}

/// The key and text of "held by another owner": who holds what `mode`
/// waits for (owner tokens as the nodes gave them, each with how many of
/// the keys read it holds), and the longest time to live its key has on a
/// node. Owners show their first 8 characters, as `status` shows them:
/// enough to tell holders apart, far too few to act as the owner. The
/// key names one holder (a new one is news), not a changing crowd of
/// readers or permit holders.
fn held_by(mode: Mode, owners: &[(Vec<u8>, u32)], ttl: Option<Duration>) -> (String, String) {
    let short = |token: &[u8]| shown::bytes(&token[..token.len().min(8)]);
    let expires = |what: &str| match ttl {
        Some(ttl) => format!(
            "{what} expires in {:.1} s unless renewed",
            ttl.as_secs_f64()
        ),
        None => format!("{what} has no expiry"),
    };
    let listed = |more: bool| {
        let mut list: Vec<String> = owners
            .iter()
            .take(NAMED as usize)
            .map(|(owner, _)| short(owner))
            .collect();
        if more || owners.len() > NAMED as usize {
            list.push("…".to_owned());
        }
        list.join(", ")
    };
    let one = |what: &str, owner: Option<&[u8]>| {
        let who = match owner {
            Some(token) => format!("{what} {}", short(token)),
            None => format!("another {what}"),
        };
        (
            format!("held by {who}"),
            format!("held by {who} ({})", expires("its key")),
        )
    };
    match mode {
        Mode::Mutex => one("owner", owners.first().map(|(o, _)| o.as_slice())),
        Mode::Permit(k) => (
            "all permits held".to_owned(),
            if owners.is_empty() {
                format!(
                    "all {k} permits held ({})",
                    expires("the soonest permit's key")
                )
            } else {
                format!(
                    "all {k} permits held, by owners {} ({})",
                    listed(k as usize > owners.len()),
                    expires("the soonest permit's key")
                )
            },
        ),
        Mode::Reader | Mode::Writer => {
            // A writer holds every reader slot with one owner token.
            let writer = owners
                .iter()
                .find(|(_, slots)| *slots == MultiRwLock::READER_SLOTS);
            match writer {
                Some((owner, _)) => one("writer", Some(owner)),
                None if owners.is_empty() => one("owner", None),
                None => (
                    "held by readers".to_owned(),
                    format!(
                        "held by {} reader(s), owners {} ({})",
                        owners.len(),
                        listed(false),
                        expires("a key")
                    ),
                ),
            }
        }
    }
}

/// Why a wait goes on: `key` tells one reason from another (another
/// holder, another kind of trouble), `text` is what the line says (with
/// counts and times that change).
#[derive(Debug)]
struct Reason {
    key: String,
    text: String,
}

impl PartialEq for Reason {
    fn eq(&self, other: &Reason) -> bool {
        self.key == other.key
    }
}
