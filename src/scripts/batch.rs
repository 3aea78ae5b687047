//! `batch.lua`: the acquires and releases queued for one node, in one call
//! and in their order (the node's group commit).

use std::sync::LazyLock;

use redis::{ServerError, Value};

use super::acquire::Acquire;
use super::release::Release;
use super::reply::BadReply;
use super::{Args, Call, Script, text};

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

    /// Appends its part of a batch's shape (`batch.lua`): its kind, and
    /// its number of lock keys when that is not 1.
    fn shape(&self, out: &mut String) {
        let (kind, keys) = match self {
            Member::Acquire(acquire) => (acquire.kind(), acquire.entry.keys.len()),
            Member::Release(release) => (release.kind(), release.entry.keys.len()),
        };
        out.push_str(kind);
        if keys != 1 {
            out.push_str(&keys.to_string());
        }
    }

    /// Its arguments after its kind.
    fn kind_args(&self, out: &mut Args<'_>) {
        match self {
            Member::Acquire(acquire) => acquire.kind_args(out),
            Member::Release(release) => release.kind_args(out),
        }
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

    /// The members' shape, then every member's arguments.
    fn args(&self, out: &mut Args<'_>) {
        let mut shape = String::with_capacity(self.0.len());
        for member in self.0 {
            member.shape(&mut shape);
        }
        out.arg(shape);
        for member in self.0 {
            member.kind_args(out);
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

    /// Counts the arguments `member` writes after its kind.
    fn kind_args(member: &Member) -> usize {
        let mut out = Args {
            cmd: None,
            count: 0,
        };
        member.kind_args(&mut out);
        out.count
    }

    fn acquire(entry: &Entry, waits: bool) -> Member {
        Member::Acquire(Acquire {
            entry: entry.clone(),
            ttl_ms: 1000,
            waits,
            lease_ms: 2000,
            reads_fences: waits,
            attempt: 1,
        })
    }

    /// Each kind writes as many arguments as `batch.lua` steps over for it
    /// (a mismatch would hand every later call of the batch another
    /// call's arguments).
    #[test]
    fn each_kind_writes_the_arguments_batch_lua_reads() {
        let keys = KeySet::new(&["a", "b"]).expect("valid names");
        let plain = Entry::new(Arc::clone(&keys), Arc::from("token"), 1);
        let mut queued = plain.clone();
        queued.ticket = Some(Ticket {
            id: Arc::from("service.call"),
            score: 1,
            grant: None,
        });
        let members = [
            acquire(&plain, false),
            acquire(&plain, true),
            acquire(&queued, true),
            Member::Release(Release {
                entry: plain.clone(),
                leave: true,
            }),
            Member::Release(Release {
                entry: queued.clone(),
                leave: true,
            }),
            Member::Release(Release {
                entry: queued,
                leave: false,
            }),
        ];
        let mut kinds = Vec::new();
        for member in &members {
            let mut shape = String::new();
            member.shape(&mut shape);
            let kind = &shape[..1];
            assert_eq!(&shape[1..], "2", "{shape}: two lock keys");
            let (body, args) = match member {
                Member::Acquire(_) => ("quorumlock_acquire", kind_args(member)),
                Member::Release(_) => ("quorumlock_release", kind_args(member)),
            };
            // The branch that tests the kind's byte (named in its comment)
            // calls the member's body and steps over its arguments.
            let lower = kind.to_lowercase();
            let lines: Vec<&str> = include_str!("batch.lua").lines().collect();
            let at = lines
                .iter()
                .position(|line| {
                    line.trim_start().starts_with("if kind ==")
                        || line.trim_start().starts_with("elseif kind ==")
                })
                .and_then(|first| {
                    (first..lines.len()).find(|&i| {
                        let comment = lines[i].split("--").nth(1).unwrap_or("");
                        comment.contains(&format!("'{lower}'"))
                    })
                })
                .unwrap_or_else(|| panic!("batch.lua has no branch for {kind}"));
            let byte = format!("kind == {}", lower.as_bytes()[0]);
            assert!(lines[at].contains(&byte), "{}: not {byte}", lines[at]);
            assert!(
                lines[at + 1].contains(body),
                "{}: not {body}",
                lines[at + 1]
            );
            assert_eq!(
                lines[at + 2].trim(),
                format!("args = {args}"),
                "kind {kind}"
            );
            kinds.push(kind.to_string());
        }
        assert_eq!(kinds, ["a", "W", "Q", "r", "l", "r"]);
    }

    #[test]
    fn a_batch_writes_one_shape_and_only_the_lock_keys() {
        let one = Entry::new(KeySet::new(&["a"]).expect("valid"), Arc::from("token"), 1);
        let three = Entry::new(
            KeySet::new(&["a", "b", "c"]).expect("valid"),
            Arc::from("token"),
            1,
        );
        let members = [
            acquire(&one, false),
            acquire(&three, true),
            Member::Release(Release {
                entry: one,
                leave: false,
            }),
        ];
        let mut cmd = redis::cmd("EVALSHA");
        super::super::write(&Batch(&members), &mut cmd);
        let args: Vec<String> = cmd
            .args_iter()
            .skip(1)
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect();
        // numkeys; 1 + 3 + 1 lock keys and the epoch marker; the shape;
        // 2 + 2 + 1 arguments.
        assert_eq!(args[0], "6");
        assert_eq!(&args[1..7], ["a", "a", "b", "c", "a", "quorumlock:epoch"]);
        assert_eq!(args[7], "aW3r");
        assert_eq!(args.len(), 1 + 6 + 1 + 5);
    }
}
