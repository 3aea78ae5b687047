//! Giving a lock back: the rollback of a failed attempt, the release of a
//! guard, and the handoff of a released name to a waiter of the same
//! [`MultiLock`](crate::MultiLock).
//!
//! Two rules hold for all three:
//!
//! * **They reach every node that may carry the entry**, also one slower
//!   than the node timeout: what is not answered in time is finished in
//!   the background (bounded), never dropped, because a dropped call that
//!   was not yet written would be skipped. The bound still holds: a call
//!   that waited past it for its node's turn (group commit, see
//!   [`crate::node`]), or that meets a node silent past the connect
//!   timeout, is not sent, and the key expires by its TTL.
//! * **They never overtake the write they undo**: each is queued on the
//!   node's one ordered connection after the request it undoes (see
//!   [`crate::node`]), so a rollback cannot run before a late acquire.

use std::sync::Arc;

use tokio::time::Instant;

use crate::clock::Stamp;
use crate::core::Core;
use crate::error::NodeError;
use crate::fanout::{End, fan_out, fan_out_announcing};
use crate::keys::{Entry, KeySet, Ticket};
use crate::node::{AcquireReply, Readiness, ReleaseReply};
use crate::stats::bump;
use crate::wake::{Handoff, HandoffEvent, Wake};

/// What [`LockGuard::release`](crate::LockGuard::release) did on the nodes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{LockConfig, MultiLock};
///
/// let testbed = quorumlock_testbed::Testbed::start(3)?; // 3 local redis-servers
/// let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).build()?);
/// let report = lock.try_acquire("job").await?.release().await;
/// assert!(report.was_held);
/// assert!(report.released >= 2 && report.failed.is_empty());
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
/// to: all but those that refused it (held by another, or waiters queued
/// ahead: the script writes no lock key then). Nodes that answered are responsive: wait for their
/// release (one round trip) so the next attempt finds them clean. Nodes
/// that did not answer may still run our acquire later; their release is
/// queued behind it and a background task sees it through. A key some
/// waiter marked meanwhile is announced as it goes (`scripts/release.lua`).
pub(crate) async fn rollback(
    core: &Core,
    entry: &Entry,
    replies: &[Option<Result<AcquireReply, NodeError>>],
) {
    // (node, whether it answered the acquire) for every node that may
    // carry our entry: all but those that refused (nothing written).
    let targets: Vec<(usize, bool)> = replies
        .iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r, Some(Ok(reply)) if reply.refused().is_some()))
        .map(|(i, r)| (i, r.is_some()))
        .collect();
    let mut awaited = targets.iter().filter(|(_, answered)| *answered).count();
    let deadline = if awaited == 0 {
        Instant::now()
    } else {
        Instant::now() + core.config.node_timeout
    };
    let (_, unfinished) = fan_out(
        targets.len(),
        deadline,
        |j| core.nodes[targets[j].0].release(entry.clone(), false),
        |j, reply| {
            if let Err(error) = reply {
                tracing::debug!(%error, "rollback failed on a node; its key expires by its TTL");
            }
            if targets[j].1 {
                awaited -= 1;
            }
            awaited == 0
        },
    )
    .await;
    unfinished.finish_in_background(core.background_bound(), "rollback");
}

/// Sends the release script for `entry` to every node and waits for each
/// answer up to the node timeout; hands the name over to a waiter of this
/// lock service when one sleeps on it.
pub(crate) async fn release(core: &Core, wake: &Wake, entry: &Entry) -> ReleaseReport {
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
            return release_handing_over(core, entry, next).await;
        }
    }
    bump(&core.counters.released);
    // A suspect node (its last call timed out, nothing answered since) is
    // sent the release like every node but not waited for: a paused node
    // then costs one node timeout in all, not one per release.
    let mut tally = ReleaseTally::new(readiness.iter().map(|r| *r != Readiness::Suspect));
    let (end, unfinished) = fan_out_announcing(
        core.nodes.len(),
        tally.deadline(core),
        |i| core.nodes[i].release(entry.clone(), true),
        // Queued on every node: a waiter of this lock service may attempt
        // now, its requests run after the release.
        || wake.released(&entry.keys),
        |i, reply| tally.record(i, reply),
    )
    .await;
    // A release must reach every node, also one slower than the deadline.
    unfinished.finish_in_background(core.background_bound(), "release");
    tally.finish(core, end)
}

/// [`release`] that takes the name for the next waiter of this lock
/// service in the same script call on each node, and forwards that
/// waiter's part of each answer to it.
async fn release_handing_over(core: &Core, entry: &Entry, next: Handoff) -> ReleaseReport {
    bump(&core.counters.released);
    bump(&core.counters.handoffs);
    let n = core.nodes.len();
    let ttl_ms = core.ttl_ms();
    let mut tally = ReleaseTally::new((0..n).map(|_| true));
    let mut waiter_gone = false;
    let events = &next.events;
    let (end, unfinished) = fan_out(
        n,
        Instant::now() + core.config.node_timeout,
        |i| core.nodes[i].handoff(entry.clone(), next.entry.clone(), ttl_ms),
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
    unfinished.finish_in_background(core.background_bound(), "release");
    waiter_gone |= events.send(HandoffEvent::Ended(end)).is_err();
    let report = tally.finish(core, end);
    if waiter_gone {
        // The waiter stopped waiting before it could decide (its future
        // was dropped): nobody owns what was taken for it. Give it back,
        // queued behind the handoff on every node.
        let (_, unfinished) = fan_out(
            n,
            Instant::now(),
            |i| core.nodes[i].release(next.entry.clone(), true),
            |_, _| false,
        )
        .await;
        unfinished.finish_in_background(core.background_bound(), "handoff rollback");
    }
    report
}

/// Gives up `ticket`'s places in the waiter queues of `keys` on every
/// node: an acquire call that stops waiting without the lock, so that a
/// name it waited for is not held back for anyone until its places lapse.
/// Waits for the nodes that answer within the node timeout (a caller that
/// gave up may retry at once); the rest finish in the background.
pub(crate) async fn leave_queues(core: &Core, keys: &Arc<KeySet>, ticket: &Ticket) {
    let (_, unfinished) = fan_out(
        core.nodes.len(),
        Instant::now() + core.config.node_timeout,
        |i| core.nodes[i].leave_queues(Arc::clone(keys), ticket.clone()),
        |_, _| false,
    )
    .await;
    unfinished.finish_in_background(core.background_bound(), "leave queues");
}

/// [`leave_queues`] in a task of its own: for an acquire call dropped
/// while it waited. Needs a Tokio runtime; does nothing without one (the
/// places then lapse).
pub(crate) fn leave_queues_in_background(core: &Arc<Core>, keys: &Arc<KeySet>, ticket: &Ticket) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (core, keys, ticket) = (Arc::clone(core), Arc::clone(keys), ticket.clone());
    runtime.spawn(async move { leave_queues(&core, &keys, &ticket).await });
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
    unfinished.finish_in_background(core.background_bound(), "force release");
    results
        .into_iter()
        .zip(&core.nodes)
        .map(|(result, node)| result.unwrap_or_else(|| Err(core.timeout_error(node))))
        .collect()
}

/// A release round's answers, counted into its report.
struct ReleaseTally {
    report: ReleaseReport,
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
    Answered,
}

impl ReleaseTally {
    /// A round over one node per item, waiting for those that are `true`.
    fn new(awaited: impl Iterator<Item = bool>) -> ReleaseTally {
        let nodes: Vec<Awaiting> = awaited
            .map(|a| if a { Awaiting::Yes } else { Awaiting::No })
            .collect();
        ReleaseTally {
            report: ReleaseReport {
                released: 0,
                kept: 0,
                not_held: 0,
                failed: Vec::new(),
                was_held: false,
            },
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
    /// (their release goes on in the background).
    fn finish(mut self, core: &Core, end: End) -> ReleaseReport {
        for (node, awaiting) in core.nodes.iter().zip(&self.nodes) {
            match awaiting {
                Awaiting::Yes if end == End::DeadlinePassed => {
                    self.report.failed.push(core.timeout_error(node));
                }
                Awaiting::No => self.report.failed.push(core.not_waited_for(node)),
                _ => {}
            }
        }
        self.report
    }
}
