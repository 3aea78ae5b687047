//! `handoff.lua`: gives back one hold and takes the name for the next
//! waiter of the same lock service where that left it free.

use std::sync::LazyLock;

use redis::Value;

use super::acquire::AcquireReply;
use super::release::ReleaseReply;
use super::reply::{BadReply, pttl, readings};
use super::{Args, Call, Script, queue_id, text};
use crate::keys::Entry;

/// Release one hold and take the freed lock for the next waiter.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::HANDOFF));

/// Gives back `from` (one name) and takes the name for `to` for `ttl_ms`.
pub(crate) struct Handoff {
    pub(crate) from: Entry,
    pub(crate) to: Entry,
    pub(crate) ttl_ms: u64,
}

impl Call for Handoff {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// The lock key, its fencing counter, its waiter queue and the queue's
    /// leases.
    fn keys(&self, out: &mut Args<'_>) {
        let keys = &self.from.keys;
        out.names(keys).each(keys.fences()).each(keys.queues());
    }

    /// The releasing hold and its queue id, then the next owner's, then
    /// the TTL, then the releasing call's grant hold ('' none).
    fn args(&self, out: &mut Args<'_>) {
        let (from, to) = (&self.from, &self.to);
        out.arg(&*from.hold)
            .arg(queue_id(from, true))
            .arg(&*to.hold)
            .arg(queue_id(to, true))
            .arg(self.ttl_ms)
            .arg(from.other_grant_hold());
    }
}

/// What the handoff did: the release, and the next owner's acquire.
pub(crate) struct HandoffReply {
    pub(crate) released: ReleaseReply,
    pub(crate) acquired: AcquireReply,
}

impl HandoffReply {
    /// `{r, 1, value, current}` taken, `{r, 0, pttl}` not, with `r` as
    /// the release script answers.
    pub(crate) fn parse(reply: Value) -> Result<HandoffReply, BadReply> {
        let Value::Array(items) = reply else {
            return Err(BadReply::Unexpected(reply));
        };
        let unexpected = |items: &[Value]| BadReply::Unexpected(Value::Array(items.to_vec()));
        let Some(released) = items.first() else {
            return Err(unexpected(&items));
        };
        let released = ReleaseReply::parse(released).map_err(|_| unexpected(&items))?;
        let acquired = match &items[1..] {
            [Value::Int(1), fences @ ..] if fences.len() == 2 => AcquireReply::Won {
                fences: Some(readings(fences)?),
            },
            [Value::Int(0), Value::Int(ms @ -1..)] => AcquireReply::Held { pttl: pttl(*ms) },
            _ => return Err(unexpected(&items)),
        };
        Ok(HandoffReply { released, acquired })
    }
}
