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

impl Release {
    /// Its kind (`release.lua`): `l` also leaves the ticket's places in
    /// the waiter queues, `r` only gives back the hold.
    /// A rollback of an attempt of a call that may have been granted the
    /// name is an `l` too, with no queue id: the grant goes back with it.
    pub(crate) fn kind(&self) -> &'static str {
        if self.long() { "l" } else { "r" }
    }

    /// Whether it takes the `l` kind's arguments.
    fn long(&self) -> bool {
        self.entry.ticket.is_some() && (self.leave || !self.entry.other_grant_hold().is_empty())
    }

    /// Its arguments after the kind: the hold; for `l`, the queue id whose
    /// places it gives up ('' a rollback's: its waiter still waits) and the
    /// call's grant hold, given back too when it is not the hold ('' none).
    pub(crate) fn kind_args(&self, out: &mut Args<'_>) {
        out.arg(&*self.entry.hold);
        if self.long() {
            out.arg(queue_id(&self.entry, self.leave))
                .arg(self.entry.other_grant_hold());
        }
    }
}

impl Call for Release {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        false
    }

    /// The lock keys (the script names their queues).
    fn keys(&self, out: &mut Args<'_>) {
        out.names(&self.entry.keys);
    }

    /// The kind, then its arguments.
    fn args(&self, out: &mut Args<'_>) {
        out.arg(self.kind());
        self.kind_args(out);
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
