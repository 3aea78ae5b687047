//! `extend.lua`: compare-and-expire of every key of an entry.

use std::sync::LazyLock;

use super::{Args, Call, Script, text};
use crate::keys::Entry;

/// Compare-and-expire.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::EXTEND));

/// Sets the TTL of every key of `entry` to `ttl_ms` where it is ours; the
/// reply is an [`OwnerCheck`](super::reply::OwnerCheck).
pub(crate) struct Extend {
    pub(crate) entry: Entry,
    pub(crate) ttl_ms: u64,
}

impl Call for Extend {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// The lock keys.
    fn keys(&self, out: &mut Args<'_>) {
        out.names(&self.entry.keys);
    }

    /// Token, entry id, TTL.
    fn args(&self, out: &mut Args<'_>) {
        let entry = &self.entry;
        out.arg(&*entry.token).arg(&*entry.id).arg(self.ttl_ms);
    }
}
