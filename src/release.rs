//! Giving a lock back: the rollback of a failed attempt, the release of a
//! guard, and the handoff of a released name to a waiter of the same
//! [`MultiLock`](crate::MultiLock).
//!
//! Two rules hold for all three:
//!
//! * **They reach every node that may carry the entry**, also one slower
//!   than the node timeout: what is not answered in time is finished in
//!   the background (bounded), never dropped, because a dropped call that
//!   was not yet written would be skipped.
//! * **They never overtake the write they undo**: each is queued on the
//!   node's one ordered connection after the request it undoes (see
//!   [`crate::node`]), so a rollback cannot run before a late acquire.

use tokio::time::Instant;

use crate::clock::Stamp;
use crate::core::Core;
use crate::error::NodeError;
use crate::fanout::{End, fan_out, fan_out_announcing};
use crate::keys::Entry;
use crate::node::{AcquireReply, ReleaseReply};
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
/// to: all but those that answered "held by another" (the script writes
/// nothing then). Nodes that answered are responsive: wait for their
/// release (one round trip) so the next attempt finds them clean. Nodes
/// that did not answer may still run our acquire later; their release is
/// queued behind it and a background task sees it through. `announce`:
/// publish a release notice where the name became free.
pub(crate) async fn rollback(
    core: &Core,
    entry: &Entry,
    replies: &[Option<Result<AcquireReply, NodeError>>],
    announce: bool,
) {
    // (node, whether it answered the acquire) for every node that may
    // carry our entry: all but those that answered "held by another".
    let targets: Vec<(usize, bool)> = replies
        .iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r, Some(Ok(AcquireReply::Held { .. }))))
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
        |j| core.nodes[targets[j].0].release(entry.clone(), announce),
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
    // Only over connections that are up: a handoff call still waiting for
    // its connection could be sent after the waiter's rollback and take the
    // name for nobody. The waiter then retries on the release notice. Nor
    // with a suspect node: a handoff waits for every node (the waiter's
    // answers come through it), and a plain release does not wait for one.
    if core
        .nodes
        .iter()
        .all(|n| n.is_connected() && !n.is_suspect())
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
    let mut tally = ReleaseTally::new(core.nodes.len());
    // A suspect node (its last call timed out, nothing answered since) is
    // sent the release like every node but not waited for: a paused node
    // then costs one node timeout in all, not one per release.
    let awaited: Vec<bool> = core.nodes.iter().map(|n| !n.is_suspect()).collect();
    let mut waiting = awaited.iter().filter(|a| **a).count();
    let deadline = if waiting == 0 {
        Instant::now()
    } else {
        Instant::now() + core.config.node_timeout
    };
    let (end, unfinished) = fan_out_announcing(
        core.nodes.len(),
        deadline,
        |i| core.nodes[i].release(entry.clone(), true),
        // Queued on every node: a waiter of this lock service may attempt
        // now, its requests run after the release.
        || wake.released(&entry.keys),
        |i, reply| {
            tally.record(i, reply);
            if awaited[i] {
                waiting -= 1;
            }
            waiting == 0
        },
    )
    .await;
    // A release must reach every node, also one slower than the deadline.
    unfinished.finish_in_background(core.background_bound(), "release");
    tally.finish_skipping(core, end, &awaited)
}

/// [`release`] that takes the name for the next waiter of this lock
/// service in the same script call on each node, and forwards that
/// waiter's part of each answer to it.
async fn release_handing_over(core: &Core, entry: &Entry, next: Handoff) -> ReleaseReport {
    bump(&core.counters.released);
    bump(&core.counters.handoffs);
    let n = core.nodes.len();
    let ttl_ms = core.ttl_ms();
    let mut tally = ReleaseTally::new(n);
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
            tally.record(i, released);
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
        // queued behind the handoff on every node, and announce it.
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
    answered: Vec<bool>,
}

impl ReleaseTally {
    fn new(n: usize) -> ReleaseTally {
        ReleaseTally {
            report: ReleaseReport {
                released: 0,
                kept: 0,
                not_held: 0,
                failed: Vec::new(),
                was_held: false,
            },
            answered: vec![false; n],
        }
    }

    fn record(&mut self, i: usize, reply: Result<ReleaseReply, NodeError>) {
        self.answered[i] = true;
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
    }

    /// The report; nodes that did not answer by the deadline count as
    /// timed out.
    fn finish(mut self, core: &Core, end: End) -> ReleaseReport {
        if end == End::DeadlinePassed {
            for (node, _) in core.nodes.iter().zip(&self.answered).filter(|(_, a)| !**a) {
                self.report.failed.push(core.timeout_error(node));
            }
        }
        self.report
    }

    /// [`finish`](Self::finish) for a round that did not wait for the
    /// nodes not `awaited`: those that had not answered are reported as
    /// not waited for (their release goes on in the background).
    fn finish_skipping(mut self, core: &Core, end: End, awaited: &[bool]) -> ReleaseReport {
        for ((node, answered), awaited) in core.nodes.iter().zip(&self.answered).zip(awaited) {
            if *answered {
                continue;
            }
            if *awaited {
                if end == End::DeadlinePassed {
                    self.report.failed.push(core.timeout_error(node));
                }
            } else {
                self.report.failed.push(core.not_waited_for(node));
            }
        }
        self.report
    }
}
