//! `release.lua`: gives back one hold on every key of an entry.

use std::sync::LazyLock;

use redis::Value;

use super::reply::BadReply;
use super::{Args, Call, Script, queue_id, text};
use crate::keys::Entry;

/// Compare-and-delete of one hold; the key goes with its last hold, and the
/// node announces that it is free.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::RELEASE));

/// A release of `entry`. `leave`: the entry's ticket gives up its places
/// in the waiter queues too (a guard's release; a rollback's waiter still
/// waits).
pub(crate) struct Release {
    pub(crate) entry: Entry,
    pub(crate) leave: bool,
}

impl Call for Release {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        false
    }

    /// The lock keys, their waiter queues and the queues' leases.
    fn keys(&self, out: &mut Args<'_>) {
        out.names(&self.entry.keys).each(self.entry.keys.queues());
    }

    /// Token, entry id, and the queue id whose places it gives up.
    fn args(&self, out: &mut Args<'_>) {
        let entry = &self.entry;
        out.arg(&*entry.token)
            .arg(&*entry.id)
            .arg(queue_id(entry, self.leave));
    }
}

/// A node's answer to the release script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// No key carried our token.
    NotOurs,
    /// Our entry is gone and the keys with it.
    Freed,
    /// As `Freed`, and a waiter that had marked a key was told.
    Announced,
    /// Our entry is gone; the owner's other holds keep the keys.
    Kept,
}

impl ReleaseReply {
    /// `0` not ours, `1` freed, `2` kept, `3` freed and announced.
    pub(crate) fn parse(reply: &Value) -> Result<ReleaseReply, BadReply> {
        match reply {
            Value::Int(0) => Ok(ReleaseReply::NotOurs),
            Value::Int(1) => Ok(ReleaseReply::Freed),
            Value::Int(2) => Ok(ReleaseReply::Kept),
            Value::Int(3) => Ok(ReleaseReply::Announced),
            other => Err(BadReply::Unexpected(other.clone())),
        }
    }
}
