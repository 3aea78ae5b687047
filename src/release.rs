//! Giving a lock back: the rollback of a failed attempt, the release of a
//! guard, and the handoff of a released name to a waiter of the same
//! [`MultiLock`](crate::MultiLock).
//!
//! Two rules hold for all three:
//!
//! * **They reach every node that may carry the entry** (every node a
//!   write of it was handed to, [`crate::keys::Reached`]), also one slower
//!   than the node timeout or silent: a caller waits up to the node timeout
//!   (not at all for a suspect node), and what is not answered by then
//!   goes on by itself ([`crate::node::Undo`]): it is never dropped, never
//!   skipped, and waits on a silent node's connection until the node
//!   answers. One that finds no connection (the node is down) is sent again
//!   until it gets through or its key must have expired (the key's TTL
//!   after that first failure): the TTL is the only bound, and the report
//!   names the node and says so.
//! * **They never overtake the write they undo**: each is queued on the
//!   node's one ordered connection after the request it undoes (see
//!   [`crate::node`]), so a rollback cannot run before a late acquire; one
//!   sent again goes out on a new connection only once the old one is gone,
//!   and a write cannot land after that.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Stamp;
use crate::core::Core;
use crate::error::NodeError;
use crate::fanout::{End, fan_out, fan_out_announcing};
use crate::keys::{Entry, KeySet, Ticket};
use crate::node::Readiness;
use crate::scripts::acquire::AcquireReply;
use crate::scripts::handoff::Handoff as HandoffCall;
use crate::scripts::release::ReleaseReply;
use crate::stats::bump;
use crate::wake::{Handoff, HandoffEvent, Wake};

/// What [`LockGuard::release`](crate::LockGuard::release) did on the nodes.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{LockConfig, MultiLock};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let report = lock.try_acquire("job").await?.release().await;
/// assert!(report.was_held);
/// // Every node took its release, or is in `failed` (too slow for the node
/// // timeout: its release goes on in the background).
/// assert_eq!(report.released + report.not_held + report.failed.len(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Nodes where this hold was found and given back.
    pub released: usize,
    /// Of those, nodes where the key stays because the same owner holds it
    /// through other holds (re-entry); on the others it was deleted.
    pub kept: usize,
    /// Nodes that did not carry our token (expired, or never won).
    pub not_held: usize,
    /// Nodes that failed or did not answer within the node timeout, and
    /// suspect nodes the release did not wait for (a call to them timed
    /// out and nothing has answered since; their release goes on in the
    /// background). Their key, if any, expires by its TTL.
    pub failed: Vec<NodeError>,
    /// Whether the guard was still within its validity when the release
    /// began, i.e. the lock was exclusively ours up to this release.
    pub was_held: bool,
}

/// Releases a failed attempt's entry on every node it may have written
/// to: every node its acquire was handed to, but those that refused it
/// (held by another, or waiters queued ahead: the script writes no lock
/// key then). Nodes that answered are responsive: wait for their release
/// (one round trip) so the next attempt finds them clean. Nodes that did
/// not answer may still run our acquire later; their release is queued
/// behind it and goes on by itself, for `ttl` (the acquire's TTL) at most
/// when it finds no connection. A key some waiter marked meanwhile is
/// announced as it goes (`scripts/release.lua`).
pub(crate) async fn rollback(
    core: &Core,
    entry: &Entry,
    replies: &[Option<Result<AcquireReply, NodeError>>],
    ttl: Duration,
) {
    // (node, whether it answered the acquire) for every node that may
    // carry our entry. Read after the round's cutoff passed (or its calls
    // were dropped): no call marks a node later (see `Reached`).
    let targets: Vec<(usize, bool)> = replies
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            entry.reached.has(*i) && !matches!(r, Some(Ok(reply)) if reply.refused().is_some())
        })
        .map(|(i, r)| (i, r.is_some()))
        .collect();
    // Where the attempt won, a grant its call was made there (which the
    // attempt counted as its own hold) goes back with it: a waiter short of
    // a quorum lets the others have those nodes. Elsewhere the call keeps
    // what it was granted (`call::Grants::forget`).
    // (Built only for an entry that has such a grant hold: most
    // rollbacks send the entry as it is.)
    let won = |i: usize| matches!(replies[i], Some(Ok(AcquireReply::Won { .. })));
    let without_grant = (!entry.other_grant_hold().is_empty()).then(|| Entry {
        ticket: entry.ticket.as_ref().map(|t| Ticket {
            grant: None,
            ..t.clone()
        }),
        ..entry.clone()
    });
    let mut awaited = targets.iter().filter(|(_, answered)| *answered).count();
    let deadline = if awaited == 0 {
        Instant::now()
    } else {
        Instant::now() + core.config.node_timeout
    };
    // Unfinished calls are dropped: each goes on by itself (`Undo`).
    let _ = fan_out(
        targets.len(),
        deadline,
        |j| {
            let i = targets[j].0;
            let entry = match &without_grant {
                Some(without) if !won(i) => without,
                _ => entry,
            };
            core.nodes[i].release(entry.clone(), false, ttl)
        },
        |j, reply| {
            if let Err(error) = reply {
                tracing::debug!(%error, "rollback failed on a node");
            }
            if targets[j].1 {
                awaited -= 1;
            }
            awaited == 0
        },
    )
    .await;
}

/// Sends the release script for `entry` to every node that may carry it
/// (every node a write of it reached) and to every healthy node, and
/// waits for each answer up to the node timeout (not for a suspect node);
/// hands the name over to a waiter of this lock service when one sleeps on
/// it. `ttl`: the TTL the keys were last given, which bounds how long a
/// release that finds no connection is sent again.
pub(crate) async fn release(
    core: &Core,
    wake: &Wake,
    entry: &Entry,
    ttl: Duration,
) -> ReleaseReport {
    let readiness: Vec<Readiness> = core.nodes.iter().map(|n| n.readiness()).collect();
    // Only over connections that are up: a handoff call still waiting for
    // its connection could be sent after the waiter's rollback and take the
    // name for nobody. The waiter then retries on the release notice. Nor
    // with a suspect node: a handoff waits for every node (the waiter's
    // answers come through it), and a plain release does not wait for one.
    if readiness.iter().all(|r| *r == Readiness::Healthy)
        && let Some(next) = wake.take_handoff(&entry.keys)
    {
        // Stamped before anything is sent: the waiter's validity counts
        // from here.
        if next
            .events
            .send(HandoffEvent::Started(Stamp::now()))
            .is_ok()
        {
            return release_handing_over(core, entry, next, ttl).await;
        }
    }
    bump(&core.counters.released);
    // A node no write of ours ever reached carries nothing of ours: it is
    // sent the release only while healthy (a call costs it nothing then),
    // so a paused or dead node does not collect releases of guards that
    // never reached it.
    let targets: Vec<usize> = (0..core.nodes.len())
        .filter(|&i| entry.reached.has(i) || readiness[i] == Readiness::Healthy)
        .collect();
    // A suspect node (its last call timed out, nothing answered since) is
    // sent the release but not waited for: a paused node then costs one
    // node timeout in all, not one per release.
    let mut tally = ReleaseTally::new(core.nodes.len(), |i| match readiness[i] {
        _ if !targets.contains(&i) => Awaiting::Unreached,
        Readiness::Suspect => Awaiting::No,
        _ => Awaiting::Yes,
    });
    let began = Instant::now();
    let (end, _unfinished) = fan_out_announcing(
        targets.len(),
        tally.deadline(core),
        |j| core.nodes[targets[j]].release(entry.clone(), true, ttl),
        // Queued on every node: a waiter of this lock service may attempt
        // now, its requests run after the release.
        || wake.released(&entry.keys),
        |j, reply| tally.record(targets[j], reply),
    )
    .await;
    if tally.announced {
        // A waiter of another process was told: let it take the name
        // before this lock service takes it again (see `Wake::step_aside`).
        wake.step_aside(&entry.keys, step_aside_for(core, began.elapsed()));
    }
    // Calls still unanswered are dropped here: each goes on by itself
    // (`Undo`), also past the deadline.
    tally.finish(core, end)
}

/// How long this lock service leaves a name it released to the waiter it
/// told: long enough for the notice to reach the waiter and its attempt
/// to reach the nodes (two release rounds, at least 0.5 ms), and never
/// longer than a node timeout. (In the bench's 8 processes on one name,
/// one round to four, or at least 0.5 to 5 ms, all keep the spread of
/// acquisitions between processes within 2; the longer, the more the
/// lock sits idle when nobody takes it.)
fn step_aside_for(core: &Core, round: Duration) -> Duration {
    (round * 2)
        .max(Duration::from_micros(500))
        .min(core.config.node_timeout)
}

/// [`release`] that takes the name for the next waiter of this lock
/// service in the same script call on each node, and forwards that
/// waiter's part of each answer to it.
async fn release_handing_over(
    core: &Core,
    entry: &Entry,
    next: Handoff,
    ttl: Duration,
) -> ReleaseReport {
    bump(&core.counters.released);
    bump(&core.counters.handoffs);
    let n = core.nodes.len();
    let ttl_ms = core.ttl_ms();
    let mut tally = ReleaseTally::new(n, |_| Awaiting::Yes);
    let mut waiter_gone = false;
    let events = &next.events;
    let (end, unfinished) = fan_out(
        n,
        Instant::now() + core.config.node_timeout,
        |i| {
            core.nodes[i].handoff(HandoffCall {
                from: entry.clone(),
                to: next.entry.clone(),
                ttl_ms,
            })
        },
        |i, reply| {
            let (released, acquired) = match reply {
                Ok((released, acquired)) => (Ok(released), acquired),
                Err(e) => (Err(e.clone()), Err(e)),
            };
            // Every answer is forwarded: the round goes on to the end.
            let _ = tally.record(i, released);
            waiter_gone |= events.send(HandoffEvent::Reply(i, acquired)).is_err();
            false
        },
    )
    .await;
    unfinished.finish_in_background(&core.background, core.background_bound(), "release");
    waiter_gone |= events.send(HandoffEvent::Ended(end)).is_err();
    let report = tally.finish(core, end);
    if waiter_gone {
        // The waiter stopped waiting before it could decide (its future
        // was dropped): nobody owns what was taken for it. Give it back,
        // queued behind the handoff on every node it reached; each call
        // goes on by itself.
        for (i, node) in core.nodes.iter().enumerate() {
            if next.entry.reached.has(i) {
                drop(node.release(next.entry.clone(), true, ttl));
            }
        }
    }
    report
}

/// Gives up `ticket`'s places in the waiter queues of `keys` on every
/// node: an acquire call that stops waiting without the lock, so that a
/// name it waited for is not held back for anyone until its places lapse.
/// Waits for the nodes that answer within the node timeout (a caller that
/// gave up may retry at once); the rest finish in the background.
pub(crate) async fn leave_queues(core: &Core, keys: &Arc<KeySet>, ticket: &Ticket) {
    let lives = Duration::from_millis(core.queue_lease_ms());
    // Unfinished calls go on by themselves (`Undo`).
    let _ = fan_out(
        core.nodes.len(),
        Instant::now() + core.config.node_timeout,
        |i| core.nodes[i].leave_queues(Arc::clone(keys), ticket.clone(), lives),
        |_, _| false,
    )
    .await;
}

/// [`leave_queues`] in a task of its own: for an acquire call dropped
/// while it waited. Needs a Tokio runtime; does nothing without one (the
/// places then lapse).
pub(crate) fn leave_queues_in_background(core: &Arc<Core>, keys: &Arc<KeySet>, ticket: &Ticket) {
    let background = Arc::clone(&core.background);
    let (core, keys, ticket) = (Arc::clone(core), Arc::clone(keys), ticket.clone());
    background.spawn(async move { leave_queues(&core, &keys, &ticket).await });
}

/// An operator's release of `name` on every node, whatever its owner
/// (see [`MultiLock::force_release`](crate::MultiLock::force_release)):
/// each node's answer, or a timeout for a node that did not answer within
/// the node timeout. Those are finished in the background (bounded), like
/// a release: a paused node must not hang the operator's call.
pub(crate) async fn force_release(
    core: &Core,
    name: &str,
    marker_ms: u64,
) -> Vec<Result<bool, NodeError>> {
    let mut results: Vec<Option<Result<bool, NodeError>>> = vec![None; core.nodes.len()];
    let (_, unfinished) = fan_out(
        core.nodes.len(),
        Instant::now() + core.config.node_timeout,
        |i| {
            let (node, name) = (core.nodes[i].clone(), name.to_owned());
            async move { node.force_release(&name, marker_ms).await }
        },
        |i, reply| {
            results[i] = Some(reply);
            false
        },
    )
    .await;
    unfinished.finish_in_background(&core.background, core.background_bound(), "force release");
    results
        .into_iter()
        .zip(&core.nodes)
        .map(|(result, node)| result.unwrap_or_else(|| Err(core.timeout_error(node))))
        .collect()
}

/// A release round's answers, counted into its report.
struct ReleaseTally {
    report: ReleaseReport,
    /// Some node told a waiter (one that marked a key) of the release.
    announced: bool,
    nodes: Vec<Awaiting>,
    /// Awaited nodes that have not answered yet.
    waiting: usize,
}

/// Where one node of a release round stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    /// Its answer is waited for, up to the node timeout.
    Yes,
    /// A suspect node: sent the release, not waited for.
    No,
    /// Not sent: no write of the entry ever reached it, and it is not
    /// healthy (it carries nothing of ours).
    Unreached,
    Answered,
}

impl ReleaseTally {
    /// A round over `n` nodes, node `i` standing as `awaiting(i)`.
    fn new(n: usize, awaiting: impl Fn(usize) -> Awaiting) -> ReleaseTally {
        let nodes: Vec<Awaiting> = (0..n).map(awaiting).collect();
        ReleaseTally {
            report: ReleaseReport {
                released: 0,
                kept: 0,
                not_held: 0,
                failed: Vec::new(),
                was_held: false,
            },
            announced: false,
            waiting: nodes.iter().filter(|a| **a == Awaiting::Yes).count(),
            nodes,
        }
    }

    /// Now when no node is waited for, else the node timeout from now.
    fn deadline(&self, core: &Core) -> Instant {
        if self.waiting == 0 {
            Instant::now()
        } else {
            Instant::now() + core.config.node_timeout
        }
    }

    /// Counts node `i`'s answer; `true` once every awaited node answered.
    fn record(&mut self, i: usize, reply: Result<ReleaseReply, NodeError>) -> bool {
        if std::mem::replace(&mut self.nodes[i], Awaiting::Answered) == Awaiting::Yes {
            self.waiting -= 1;
        }
        let report = &mut self.report;
        match reply {
            Ok(ReleaseReply::Freed) => report.released += 1,
            Ok(ReleaseReply::Announced) => {
                report.released += 1;
                self.announced = true;
            }
            Ok(ReleaseReply::Kept) => {
                report.released += 1;
                report.kept += 1;
            }
            Ok(ReleaseReply::NotOurs) => report.not_held += 1,
            Err(e) => report.failed.push(e),
        }
        self.waiting == 0
    }

    /// The report: awaited nodes that did not answer by the deadline count
    /// as timed out; suspect ones that had not answered, as not waited for
    /// (their release goes on in the background); nodes never reached, as
    /// not held.
    fn finish(mut self, core: &Core, end: End) -> ReleaseReport {
        for (node, awaiting) in core.nodes.iter().zip(&self.nodes) {
            match awaiting {
                Awaiting::Yes if end == End::DeadlinePassed => {
                    self.report.failed.push(core.timeout_error(node));
                }
                Awaiting::No => self.report.failed.push(core.not_waited_for(node)),
                Awaiting::Unreached => self.report.not_held += 1,
                _ => {}
            }
        }
        self.report
    }
}
