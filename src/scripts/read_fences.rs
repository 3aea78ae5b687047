//! `read_fences.lua`: reads fencing counters, with the node's clock.

use std::sync::{Arc, LazyLock};

use redis::Value;

use super::reply::{BadReply, Reading, readings};
use super::{Args, Call, Script, text};
use crate::keys::KeySet;

/// Reads fencing counters, with the epoch check.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::READ_FENCES));

/// Reads the fencing counters of `keys`.
pub(crate) struct ReadFences {
    pub(crate) keys: Arc<KeySet>,
}

impl Call for ReadFences {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        true
    }

    /// The fencing counters.
    fn keys(&self, out: &mut Args<'_>) {
        out.each(self.keys.fences());
    }

    fn args(&self, _: &mut Args<'_>) {}
}

/// What the fencing read found on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FenceRead {
    /// The node's clock (`TIME`) in µs, for the time floor.
    pub(crate) time_us: u64,
    pub(crate) readings: Box<[Reading]>,
}

impl FenceRead {
    /// `{time_us, value, current, ...}` for `keys` keys.
    pub(crate) fn parse(reply: Value, keys: usize) -> Result<FenceRead, BadReply> {
        let Value::Array(items) = reply else {
            return Err(BadReply::Unexpected(reply));
        };
        match items.as_slice() {
            [Value::Int(time_us), pairs @ ..] if pairs.len() == 2 * keys && *time_us >= 0 => {
                Ok(FenceRead {
                    time_us: time_us.unsigned_abs(),
                    readings: readings(pairs)?,
                })
            }
            _ => Err(BadReply::Unexpected(Value::Array(items))),
        }
    }
}
