//! `fence.lua`: raises the fencing counters of an entry's keys while the
//! keys are ours.

use std::sync::LazyLock;

use redis::Value;

use super::reply::{BadReply, OwnerCheck};
use super::{Args, Call, Script, text};
use crate::keys::Entry;

/// Raises the fencing counters to a token while the keys are ours.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::FENCE));

/// Raises the counters of `entry`'s keys to `token` if every key is still
/// ours or absent (an absent key is re-taken first, for `heal_ms`).
pub(crate) struct RaiseFence {
    pub(crate) entry: Entry,
    pub(crate) token: u64,
    pub(crate) heal_ms: u64,
}

impl Call for RaiseFence {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// The lock keys, their fencing counters, their force-release markers.
    fn keys(&self, out: &mut Args<'_>) {
        let keys = &self.entry.keys;
        out.names(keys).each(keys.fences()).each(keys.forced());
    }

    /// Owner token, the fencing token, entry id, the TTL of a re-take.
    fn args(&self, out: &mut Args<'_>) {
        let entry = &self.entry;
        out.arg(&*entry.token)
            .arg(self.token)
            .arg(&*entry.id)
            .arg(self.heal_ms);
    }
}

impl RaiseFence {
    /// [`OwnerCheck::Ours`] when every counter is now `>= token`: `1`, or
    /// `2` (raised after re-taking an absent key: as good as ours).
    pub(crate) fn parse(reply: Value) -> Result<OwnerCheck, BadReply> {
        match reply {
            Value::Int(2) => Ok(OwnerCheck::Ours),
            other => OwnerCheck::parse(other),
        }
    }
}
