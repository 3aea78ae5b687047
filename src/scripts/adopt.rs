//! `adopt.lua`: starts the epoch of a brand-new, empty node at once.

use std::sync::LazyLock;

use redis::Value;

use super::reply::BadReply;
use super::{Args, Call, Script, text};
use crate::keys::EPOCH_KEY;

/// Adopts a brand-new, empty node: its epoch starts at once.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::ADOPT));

/// Adopts the server of `identity` (`<run_id>:<replid>`); `durable`: its
/// epoch survives restarts.
pub(crate) struct Adopt<'a> {
    pub(crate) identity: &'a str,
    pub(crate) durable: bool,
}

impl Call for Adopt<'_> {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        false
    }

    /// The epoch marker.
    fn keys(&self, out: &mut Args<'_>) {
        out.arg(EPOCH_KEY);
    }

    fn args(&self, out: &mut Args<'_>) {
        out.arg(self.identity).arg(u8::from(self.durable));
    }
}

impl Adopt<'_> {
    /// `1`: adopted (a node that is not empty answers an error instead).
    pub(crate) fn parse(reply: Value) -> Result<(), BadReply> {
        match reply {
            Value::Int(1) => Ok(()),
            other => Err(BadReply::Unexpected(other)),
        }
    }
}
