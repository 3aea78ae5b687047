//! `batch.lua`: the acquires and releases queued for one node, in one call
//! and in their order (the node's group commit).

use std::sync::LazyLock;

use redis::{ServerError, Value};

use super::acquire::Acquire;
use super::release::Release;
use super::reply::BadReply;
use super::{Args, Call, Script, counts, text};

/// Group commit: each member runs its own script's body; the epoch check
/// runs once for the batch.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::BATCH));

/// A call that may go in a batch.
pub(crate) enum Member {
    Acquire(Acquire),
    Release(Release),
}

impl Member {
    /// The call itself.
    fn call(&self) -> &dyn Call {
        match self {
            Member::Acquire(acquire) => acquire,
            Member::Release(release) => release,
        }
    }

    /// Its header in a batch: the script's letter, its keys and its
    /// arguments (`batch.lua`), counted as they are written.
    fn header(&self) -> String {
        let letter = match self {
            Member::Acquire(_) => 'a',
            Member::Release(_) => 'r',
        };
        let (keys, args) = counts(self.call());
        format!("{letter}{keys} {args}")
    }
}

/// A member sent alone runs its own script.
impl Call for Member {
    fn script(&self) -> &'static Script {
        self.call().script()
    }

    fn votes(&self) -> bool {
        self.call().votes()
    }

    fn keys(&self, out: &mut Args<'_>) {
        self.call().keys(out);
    }

    fn args(&self, out: &mut Args<'_>) {
        self.call().args(out);
    }
}

/// Two or more members in one call. It votes (the epoch check runs once,
/// and a member's reply is unwrapped as its own script's would be).
pub(crate) struct Batch<'a>(pub(crate) &'a [Member]);

impl Call for Batch<'_> {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// Every member's keys, member after member.
    fn keys(&self, out: &mut Args<'_>) {
        for member in self.0 {
            member.keys(out);
        }
    }

    /// How many members, their headers, then every member's arguments.
    fn args(&self, out: &mut Args<'_>) {
        out.arg(self.0.len());
        for member in self.0 {
            out.arg(member.header());
        }
        for member in self.0 {
            member.args(out);
        }
    }
}

impl Batch<'_> {
    /// One reply per member, in order; a member's error is its own.
    pub(crate) fn parse(&self, reply: Value) -> Result<Vec<Result<Value, ServerError>>, BadReply> {
        match reply {
            Value::Array(items) if items.len() == self.0.len() => Ok(items
                .into_iter()
                .map(|item| match item {
                    Value::ServerError(e) => Err(e),
                    item => Ok(item),
                })
                .collect()),
            other => Err(BadReply::Unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::keys::{Entry, KeySet, Ticket};

    #[test]
    fn a_batch_header_counts_what_each_call_writes() {
        let keys = KeySet::new(&["a", "b"]).expect("valid names");
        let mut entry = Entry::new(keys, Arc::from("token"), 1);
        entry.ticket = Some(Ticket {
            id: Arc::from("service.call"),
            score: 1,
        });
        let members = [
            Member::Acquire(Acquire {
                entry: entry.clone(),
                ttl_ms: 1000,
                waits: true,
                lease_ms: 2000,
            }),
            Member::Release(Release { entry, leave: true }),
        ];
        assert_eq!(members[0].header(), "a8 7");
        assert_eq!(members[1].header(), "r6 3");
        let mut cmd = redis::cmd("EVALSHA");
        super::super::write(&Batch(&members), &mut cmd);
        // numkeys, 8 + 6 keys and the epoch marker, the count, 2 headers,
        // 7 + 3 arguments.
        assert_eq!(cmd.args_iter().count() - 1, 1 + 15 + 1 + 2 + 10);
    }
}
