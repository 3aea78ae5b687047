//! `force_release.lua`: an operator's release of a name.

use std::sync::LazyLock;

use redis::Value;

use super::reply::BadReply;
use super::{Args, Call, Script, text};
use crate::keys::forced_key;

/// An operator's release of a name, whatever its owner.
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(text::FORCE_RELEASE));

/// Deletes lock `name` whatever its owner and keeps any renewal from
/// re-taking it for `marker_ms`.
pub(crate) struct ForceRelease<'a> {
    pub(crate) name: &'a str,
    pub(crate) marker_ms: u64,
}

impl Call for ForceRelease<'_> {
    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn votes(&self) -> bool {
        false
    }

    /// The lock key and its marker.
    fn keys(&self, out: &mut Args<'_>) {
        out.arg(self.name).arg(forced_key(self.name));
    }

    /// How long no renewal may re-take it.
    fn args(&self, out: &mut Args<'_>) {
        out.arg(self.marker_ms);
    }
}

impl ForceRelease<'_> {
    /// Whether a key was there (`1`) or not (`0`).
    pub(crate) fn parse(reply: Value) -> Result<bool, BadReply> {
        match reply {
            Value::Int(n @ 0..=1) => Ok(n == 1),
            other => Err(BadReply::Unexpected(other)),
        }
    }
}
