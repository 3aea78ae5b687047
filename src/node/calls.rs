//! The script calls a lock makes on a node: how each goes out (batched or
//! alone, resent or not, which entries it marks reached) and what a young
//! node's answer means for it. What each call writes and what its reply
//! means is its script module's ([`crate::scripts`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::send::{Cutoff, How, NOTHING, Resend};
use super::{Node, Undo};
use crate::epoch::ServerHistory;
use crate::error::NodeError;
use crate::keys::{Entry, KeySet, Ticket};
use crate::scripts::acquire::{Acquire, AcquireReply};
use crate::scripts::adopt::Adopt;
use crate::scripts::batch::Member;
use crate::scripts::extend::Extend;
use crate::scripts::fence::RaiseFence;
use crate::scripts::force_release::ForceRelease;
use crate::scripts::handoff::{Handoff, HandoffReply};
use crate::scripts::read_fences::{FenceRead, ReadFences};
use crate::scripts::release::{Release, ReleaseReply};
use crate::scripts::renew::{Renew, RenewItem, RenewReply};
use crate::scripts::reply::OwnerCheck;
use crate::stats::bump;

impl Node {
    /// Runs the acquire script for every key of the entry (see
    /// [`Acquire`]), through the node's group commit. Not sent at all once
    /// `cutoff` has passed.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        call: Acquire,
        cutoff: Arc<Cutoff>,
    ) -> impl Future<Output = Result<AcquireReply, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let (keys, reads_fences) = (call.entry.keys.len(), call.reads_fences);
            let reply = node.batched(Member::Acquire(call), Some(cutoff)).await?;
            AcquireReply::parse(reply, keys, reads_fences).map_err(|e| node.bad(e))
        }
    }

    /// Runs the release script once: gives back this entry on every key,
    /// and publishes a release notice for each key that became free if a
    /// waiter marked it or waits in its queue. `leave`: the entry's ticket
    /// gives up its places in the queues too (a guard's release; a
    /// rollback's waiter still waits). Callers use
    /// [`release`](Self::release), which never drops it.
    pub(super) async fn release_once(
        self: &Arc<Self>,
        entry: &Entry,
        leave: bool,
    ) -> Result<ReleaseReply, NodeError> {
        let call = Member::Release(Release {
            entry: entry.clone(),
            leave,
        });
        let reply = self.batched(call, None).await?;
        ReleaseReply::parse(&reply).map_err(|e| self.bad(e))
    }

    /// Gives up the places of `ticket` in the waiter queues of `keys` (an
    /// acquire call that stops waiting without the lock): the release
    /// script with an entry that holds nothing, never dropped; `lives`:
    /// how long a place outlives its waiter's last attempt.
    pub(crate) fn leave_queues(
        self: &Arc<Self>,
        keys: Arc<KeySet>,
        ticket: Ticket,
        lives: Duration,
    ) -> Undo<Result<ReleaseReply, NodeError>> {
        self.release(Entry::places_only(keys, ticket), true, lives)
    }

    /// Runs the handoff script: gives back `from` (one name) and takes the
    /// name for `to` where that left it free.
    pub(crate) fn handoff(
        self: &Arc<Self>,
        call: Handoff,
    ) -> impl Future<Output = Result<(ReleaseReply, Result<AcquireReply, NodeError>), NodeError>>
    + Send
    + 'static {
        let node = Arc::clone(self);
        async move {
            // Never resent: a resend on a new connection could run after the
            // waiter's rollback (sent on that connection too) and take the
            // name for a waiter that gave up. A plain release of our own entry
            // is sent instead: a release cannot be overtaken by anything.
            let how = How {
                resend: Resend::Never,
                reached: &|| call.to.reached.mark(node.index),
                ..How::plain()
            };
            let (young, reply) = match node.vote(&call, how).await {
                Ok(reply) => reply,
                // Not sent, or not known to have run: our own entry is given
                // back by a plain release, which goes out whatever happened
                // (a second release of an entry already gone changes
                // nothing).
                Err(e) => {
                    let lives = Duration::from_millis(call.ttl_ms);
                    let _ = node.release(call.from, true, lives).await;
                    return Err(e);
                }
            };
            let HandoffReply { released, acquired } =
                HandoffReply::parse(reply).map_err(|e| node.bad(e))?;
            // A young node released and took the name all the same; only
            // its vote for the waiter does not count.
            let acquired = match young {
                Some(left) => Err(node.quarantined(left)),
                None => Ok(acquired),
            };
            Ok((released, acquired))
        }
    }

    /// Runs the compare-and-expire script; [`OwnerCheck::Ours`] when every
    /// key is ours and lives at least the call's TTL now.
    pub(crate) fn extend(
        self: &Arc<Self>,
        call: Extend,
    ) -> impl Future<Output = Result<OwnerCheck, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reached = || call.entry.reached.mark(node.index);
            let reply = node.voting(&call, &reached).await?;
            OwnerCheck::parse(reply).map_err(|e| node.bad(e))
        }
    }

    /// Raises the fencing counters of the entry's keys (see
    /// [`RaiseFence`]); [`OwnerCheck::Ours`] when every counter is at
    /// least the token.
    pub(crate) fn raise_fence(
        self: &Arc<Self>,
        call: RaiseFence,
    ) -> impl Future<Output = Result<OwnerCheck, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reached = || call.entry.reached.mark(node.index);
            let reply = node.voting(&call, &reached).await?;
            RaiseFence::parse(reply).map_err(|e| node.bad(e))
        }
    }

    /// Reads the fencing counters of `keys` (`None`: the node has none).
    pub(crate) fn read_fences(
        self: &Arc<Self>,
        keys: Arc<KeySet>,
    ) -> impl Future<Output = Result<FenceRead, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let count = keys.len();
            let reply = node.voting(&ReadFences { keys }, NOTHING).await?;
            FenceRead::parse(reply, count).map_err(|e| node.bad(e))
        }
    }

    /// Runs the renew script once for every item of a watchdog group (the
    /// watchdog keeps groups to about
    /// [`RENEW_CHUNK`](crate::scripts::renew::RENEW_CHUNK) keys) and
    /// returns one reply per item, in order.
    pub(crate) fn renew(
        self: &Arc<Self>,
        items: Arc<[RenewItem]>,
    ) -> impl Future<Output = Result<Vec<RenewReply>, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            bump(&node.counters.renew_calls);
            // A renewal re-takes a key a node lost: a write of each entry.
            let reached = || {
                for item in items.iter() {
                    item.entry.reached.mark(node.index);
                }
            };
            let count = items.len();
            let call = Renew {
                items: Arc::clone(&items),
            };
            let reply = node.voting(&call, &reached).await?;
            RenewReply::parse(reply, count).map_err(|e| node.bad(e))
        }
    }

    /// Deletes the lock key `name` whatever its owner, keeps any renewal
    /// from re-taking it for `marker_ms`, and announces the release
    /// (`scripts/force_release.lua`). `true` if a key was there.
    pub(crate) async fn force_release(
        self: &Arc<Self>,
        name: &str,
        marker_ms: u64,
    ) -> Result<bool, NodeError> {
        let call = ForceRelease { name, marker_ms };
        let result = self.script(&call, How::plain()).await;
        self.count_failure(&result, None);
        ForceRelease::parse(result?).map_err(|e| self.bad(e))
    }

    /// Adopts this node if it is empty: its epoch starts at once
    /// ([`NodeErrorKind::NotEmpty`](crate::error::NodeErrorKind::NotEmpty)
    /// otherwise).
    pub(crate) async fn adopt(self: &Arc<Self>) -> Result<(), NodeError> {
        let (mut conn, _) = self.connection().await?;
        let history = ServerHistory::read(&mut conn)
            .await
            .map_err(|e| self.error(&e))?;
        let identity = history.identity();
        let call = Adopt {
            identity: &identity,
            durable: self.durable,
        };
        let result = self.script(&call, How::plain()).await;
        self.count_failure(&result, None);
        Adopt::parse(result?).map_err(|e| self.bad(e))
    }
}
