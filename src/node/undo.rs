//! Calls that undo a write (a release, a rollback, a waiter giving up its
//! queue places) are never dropped (DESIGN rule 12).
//!
//! * An [`Undo`] dropped by its caller before its end goes on in a task of
//!   its own: a caller that stops waiting for a slow node (a release's
//!   node timeout, a dropped `release()` future) stops *waiting*, never
//!   *sending*.
//! * An undo is sent on a connection however long it has been silent: it
//!   waits there, in order, behind what it undoes, and runs when the node
//!   answers (`Node::send`). Group commit never skips one
//!   (`node::group_commit`).
//! * An undo that meets no connection (the node is down or restarting) is
//!   sent again, with the connect backoff, until it gets through or until
//!   the key it undoes must have expired: a write cannot land after the
//!   connection that carried it is gone, so its key outlives the first
//!   failure by the key's TTL at most. That TTL is the only bound, and the
//!   caller's report says so.
//!
//! What is never sent is a call whose write was never handed to the node:
//! a release skips a node that is not healthy when the entry never reached
//! it ([`crate::keys::Reached`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::Node;
use super::connection::{MAX_CONNECT_BACKOFF, MIN_CONNECT_BACKOFF};
use crate::background::{Background, Tracked};
use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Entry;
use crate::scripts::release::ReleaseReply;

/// A future that runs to its end: dropped unfinished, it goes on in a task
/// of its own (with no Tokio runtime left to run it, it ends there).
/// Counted in its lock service's [`Background`] until it ends.
pub(crate) struct Undo<T: Send + 'static> {
    call: Option<BoxFuture<'static, T>>,
    tracked: Option<Tracked>,
}

impl<T: Send + 'static> Undo<T> {
    pub(crate) fn new(
        background: &Arc<Background>,
        call: impl Future<Output = T> + Send + 'static,
    ) -> Undo<T> {
        Undo {
            call: Some(call.boxed()),
            tracked: Some(background.track()),
        }
    }
}

impl<T: Send + 'static> Future for Undo<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        self.tracked = None;
        Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for Undo<T> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let tracked = self.tracked.take();
            runtime.spawn(async move {
                let _tracked = tracked;
                call.await;
            });
        }
    }
}

/// Whether an undo that failed this way is sent again: the node was not
/// reached (down, restarting, loading, or the connect timed out). Any
/// other answer is final: the node answered, or refuses for a reason a
/// retry cannot change.
fn sent_again(e: &NodeError) -> bool {
    matches!(
        e.kind(),
        NodeErrorKind::Unreachable | NodeErrorKind::Busy | NodeErrorKind::Timeout
    )
}

impl Node {
    /// Gives back `entry` on this node (`scripts/release.lua`; `leave`: its
    /// ticket's queue places too), as an [`Undo`]. A first attempt that
    /// cannot reach the node is reported, and the release is sent again in
    /// the background until it gets through or `lives` (the TTL of what it
    /// undoes) has passed since.
    pub(crate) fn release(
        self: &Arc<Self>,
        entry: Entry,
        leave: bool,
        lives: Duration,
    ) -> Undo<Result<ReleaseReply, NodeError>> {
        let node = Arc::clone(self);
        Undo::new(&self.background, async move {
            match node.release_once(&entry, leave).await {
                Err(e) if sent_again(&e) => {
                    let until = Instant::now() + lives;
                    let again = Arc::clone(&node).release_until(entry, leave, until);
                    node.background.spawn(again);
                    Err(e.noting(format!(
                        "sent again in the background until it gets through, for {} ms at most \
                         (the key's TTL: nothing it undoes can outlive that)",
                        lives.as_millis()
                    )))
                }
                result => result,
            }
        })
    }

    /// Sends the release again, with the connect backoff, until the node
    /// answers or `until`.
    async fn release_until(self: Arc<Self>, entry: Entry, leave: bool, until: Instant) {
        let mut wait = MIN_CONNECT_BACKOFF;
        loop {
            tokio::time::sleep_until((Instant::now() + wait).min(until)).await;
            if Instant::now() >= until {
                tracing::debug!(node = %self.name(), key = %entry.keys, "a release never got through; its key has expired by its TTL");
                return;
            }
            match self.release_once(&entry, leave).await {
                Err(e) if sent_again(&e) => wait = (wait * 2).min(MAX_CONNECT_BACKOFF),
                _ => return,
            }
        }
    }
}
