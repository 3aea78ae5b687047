//! The script calls a lock makes on a node: each writes its script's keys
//! and arguments and reads its reply into a typed answer
//! ([`super::replies`]). How a call goes out is [`super::send`]'s job.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use super::group_commit::Batched;
use super::replies::{AcquireReply, FenceRead, OwnerCheck, ReleaseReply, RenewReply, pttl};
use super::send::{Cutoff, How, NOTHING, Resend};
use super::{Node, Undo};
use crate::epoch::ServerHistory;
use crate::error::NodeError;
use crate::keys::{Entry, KeySet, Reached, Ticket};
use crate::scripts;
use crate::stats::bump;

/// Lock keys per renew script call (the watchdog's group size): large
/// enough that 10,000 locks take a few dozen calls per node, small enough
/// that one call holds the server for well under a millisecond.
pub(crate) const RENEW_CHUNK: usize = 256;

/// One guard of a watchdog group.
#[derive(Clone)]
pub(crate) struct RenewItem {
    pub(crate) entry: Entry,
    pub(crate) ttl_ms: u64,
}

impl Node {
    /// Runs the acquire script for every key of the entry. `waits`: the
    /// caller waits for a release notice, so a key found held is marked
    /// and its release announces itself; an entry with a ticket also takes
    /// (or keeps) a place in the names' waiter queues for `lease_ms`
    /// (`scripts/acquire.lua`, `scripts/queue.lua`). Not sent at all once
    /// `cutoff` has passed.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        entry: Entry,
        ttl_ms: u64,
        waits: bool,
        lease_ms: u64,
        cutoff: Arc<Cutoff>,
    ) -> impl Future<Output = Result<AcquireReply, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let m = entry.keys.len();
            let call = Batched::Acquire {
                entry,
                ttl_ms,
                waits,
                lease_ms,
            };
            let reply = node.batched(call, Some(cutoff)).await?;
            match reply {
                Value::Array(items) => match items.as_slice() {
                    [Value::Int(1), fences @ ..] if fences.len() == 2 * m => node
                        .readings(fences)
                        .map(|fences| AcquireReply::Won { fences }),
                    // -1: the holder set no expiry.
                    [Value::Int(0), Value::Int(ms @ -1..), Value::Int(_)] => {
                        Ok(AcquireReply::Held { pttl: pttl(*ms) })
                    }
                    [Value::Int(0), Value::Int(-2), Value::Int(_)] => Ok(AcquireReply::Queued),
                    _ => Err(node.unexpected(Value::Array(items))),
                },
                other => Err(node.unexpected(other)),
            }
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
        let call = Batched::Release {
            entry: entry.clone(),
            leave,
        };
        match self.batched(call, None).await? {
            Value::Int(0) => Ok(ReleaseReply::NotOurs),
            Value::Int(1) => Ok(ReleaseReply::Freed),
            Value::Int(2) => Ok(ReleaseReply::Kept),
            other => Err(self.unexpected(other)),
        }
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
        let entry = Entry {
            keys,
            token: Arc::from(""),
            id: Arc::from(""),
            ticket: Some(ticket),
            reached: Arc::new(Reached::new(0)),
        };
        self.release(entry, true, lives)
    }

    /// Runs the handoff script: gives back `from` (one name) and takes the
    /// name for `to` where that left it free.
    pub(crate) fn handoff(
        self: &Arc<Self>,
        from: Entry,
        to: Entry,
        ttl_ms: u64,
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
                reached: &|| to.reached.mark(node.index),
                ..How::plain()
            };
            let (young, reply) = match node
                .vote(&scripts::HANDOFF, how, |cmd| {
                    with_fences_and_queues(cmd, &from.keys);
                    cmd.arg(&*from.token)
                        .arg(&*from.id)
                        .arg(queue_id(&from, true))
                        .arg(&*to.token)
                        .arg(&*to.id)
                        .arg(queue_id(&to, true))
                        .arg(ttl_ms);
                })
                .await
            {
                Ok(reply) => reply,
                // Not sent, or not known to have run: our own entry is given
                // back by a plain release, which goes out whatever happened
                // (a second release of an entry already gone changes
                // nothing).
                Err(e) => {
                    let lives = Duration::from_millis(ttl_ms);
                    let _ = node.release(from, true, lives).await;
                    return Err(e);
                }
            };
            let Value::Array(items) = reply else {
                return Err(node.unexpected(reply));
            };
            let released = match items.first() {
                Some(Value::Int(0)) => ReleaseReply::NotOurs,
                Some(Value::Int(1)) => ReleaseReply::Freed,
                Some(Value::Int(2)) => ReleaseReply::Kept,
                _ => return Err(node.unexpected(Value::Array(items))),
            };
            let acquired = match items.get(1..) {
                Some([Value::Int(1), value, current]) => AcquireReply::Won {
                    fences: node.readings(&[value.clone(), current.clone()])?,
                },
                Some([Value::Int(0), Value::Int(ms @ -1..)]) => {
                    AcquireReply::Held { pttl: pttl(*ms) }
                }
                _ => return Err(node.unexpected(Value::Array(items))),
            };
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
    /// key is ours and lives at least `ttl_ms` now.
    pub(crate) fn extend(
        self: &Arc<Self>,
        entry: Entry,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<OwnerCheck, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .voting(
                    &scripts::EXTEND,
                    &|| entry.reached.mark(node.index),
                    |cmd| {
                        with_keys(cmd, &entry.keys);
                        cmd.arg(&*entry.token).arg(&*entry.id).arg(ttl_ms);
                    },
                )
                .await?;
            node.owner_check(reply)
        }
    }

    /// Raises the fencing counters of the entry's keys to `token` if every
    /// key is still ours or absent (an absent key is re-taken first, for
    /// `heal_ms`); [`OwnerCheck::Ours`] when it did (every counter is
    /// `>= token`).
    pub(crate) fn raise_fence(
        self: &Arc<Self>,
        entry: Entry,
        token: u64,
        heal_ms: u64,
    ) -> impl Future<Output = Result<OwnerCheck, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .voting(&scripts::FENCE, &|| entry.reached.mark(node.index), |cmd| {
                    with_fences(cmd, &entry.keys);
                    cmd.arg(&*entry.token)
                        .arg(token)
                        .arg(&*entry.id)
                        .arg(heal_ms);
                })
                .await?;
            match reply {
                // Raised after re-taking an absent key: as good as ours.
                Value::Int(2) => Ok(OwnerCheck::Ours),
                other => node.owner_check(other),
            }
        }
    }

    /// Reads the fencing counters of `keys` (`None`: the node has none).
    pub(crate) fn read_fences(
        self: &Arc<Self>,
        keys: Arc<KeySet>,
    ) -> impl Future<Output = Result<FenceRead, NodeError>> + Send + 'static {
        let node = Arc::clone(self);
        async move {
            let reply = node
                .voting(&scripts::READ_FENCES, NOTHING, |cmd| {
                    cmd.arg(keys.len()).arg(keys.fences());
                })
                .await?;
            let Value::Array(items) = reply else {
                return Err(node.unexpected(reply));
            };
            match items.as_slice() {
                [Value::Int(time_us), readings @ ..]
                    if readings.len() == 2 * keys.len() && *time_us >= 0 =>
                {
                    Ok(FenceRead {
                        time_us: time_us.unsigned_abs(),
                        readings: node.readings(readings)?,
                    })
                }
                _ => Err(node.unexpected(Value::Array(items))),
            }
        }
    }

    /// Runs the renew script once for every item of a watchdog group (the
    /// watchdog keeps groups to about [`RENEW_CHUNK`] keys) and returns one
    /// reply per item, in order.
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
            let reply = node
                .voting(&scripts::RENEW, &reached, |cmd: &mut Cmd| {
                    let keys: usize = items.iter().map(|i| i.entry.keys.len()).sum();
                    cmd.arg(keys);
                    for item in items.iter() {
                        names(cmd, &item.entry.keys);
                    }
                    for item in items.iter() {
                        cmd.arg(&*item.entry.token)
                            .arg(&*item.entry.id)
                            .arg(item.ttl_ms)
                            .arg(item.entry.keys.len());
                    }
                })
                .await?;
            match reply {
                Value::Array(codes) if codes.len() == items.len() => codes
                    .into_iter()
                    .map(|code| match code {
                        Value::Int(1) => Ok(RenewReply::Renewed),
                        Value::Int(2) => Ok(RenewReply::Healed),
                        Value::Int(0 | -1) => Ok(RenewReply::NotOurs),
                        other => Err(node.unexpected(other)),
                    })
                    .collect(),
                other => Err(node.unexpected(other)),
            }
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
        let result = self
            .script(&scripts::FORCE_RELEASE, How::plain(), |cmd| {
                cmd.arg(1).arg(name).arg(marker_ms);
            })
            .await;
        self.count_failure(&result, None);
        let reply = result?;
        match reply {
            Value::Int(n @ 0..=1) => Ok(n == 1),
            other => Err(self.unexpected(other)),
        }
    }

    /// Adopts this node if it is empty: its epoch starts at once
    /// ([`NodeErrorKind::NotEmpty`](crate::error::NodeErrorKind::NotEmpty) otherwise).
    pub(crate) async fn adopt(self: &Arc<Self>) -> Result<(), NodeError> {
        let (mut conn, _) = self.connection().await?;
        let history = ServerHistory::read(&mut conn)
            .await
            .map_err(|e| self.error(&e))?;
        let identity = history.identity();
        let result = self
            .script(&scripts::ADOPT, How::plain(), |cmd| {
                cmd.arg(0).arg(&identity).arg(u8::from(self.durable));
            })
            .await;
        self.count_failure(&result, None);
        let reply = result?;
        match reply {
            Value::Int(1) => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }
}

/// `numkeys` and the lock keys of a script that touches only those.
pub(super) fn with_keys(cmd: &mut Cmd, keys: &KeySet) {
    cmd.arg(keys.len());
    names(cmd, keys);
}

pub(super) fn names(cmd: &mut Cmd, keys: &KeySet) {
    for name in keys.names() {
        cmd.arg(&**name);
    }
}

/// `numkeys`, the lock keys, then their fencing counters.
pub(super) fn with_fences(cmd: &mut Cmd, keys: &KeySet) {
    cmd.arg(2 * keys.len());
    names(cmd, keys);
    cmd.arg(keys.fences());
}

/// `numkeys`, the lock keys, their fencing counters, their waiter queues
/// and the queues' leases.
pub(super) fn with_fences_and_queues(cmd: &mut Cmd, keys: &KeySet) {
    cmd.arg(4 * keys.len());
    fences_and_queues(cmd, keys);
}

/// The lock keys, their fencing counters, their waiter queues and the
/// queues' leases (the acquire and handoff scripts' keys).
pub(super) fn fences_and_queues(cmd: &mut Cmd, keys: &KeySet) {
    names(cmd, keys);
    cmd.arg(keys.fences());
    cmd.arg(keys.queues());
}

/// The lock keys, their waiter queues and the queues' leases (the release
/// script's keys).
pub(super) fn queues(cmd: &mut Cmd, keys: &KeySet) {
    names(cmd, keys);
    cmd.arg(keys.queues());
}

/// The queue id whose places a script gives up: the entry's ticket's when
/// `leave`, else none ('').
pub(super) fn queue_id(entry: &Entry, leave: bool) -> &str {
    match &entry.ticket {
        Some(ticket) if leave => &ticket.id,
        _ => "",
    }
}
