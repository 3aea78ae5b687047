//! Node epochs: what the client checks when it (re)connects to a node, so
//! that a node whose data may be incomplete is quarantined.
//!
//! The vote scripts judge the quarantine themselves (`scripts/epoch.lua`,
//! in the same call as each vote). What they cannot see is which server
//! process wrote the marker: a server restored from an RDB snapshot brings
//! back an old marker. So on every new connection, before any vote, the
//! client reads the server's `run_id` and history from `INFO` and runs
//! `scripts/epoch_check.lua`, which replaces a marker of another process
//! with a new epoch, dated from the server's start when `INFO` shows a
//! master that was never promoted (it lost nothing since it started).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

use crate::keys::EPOCH_KEY;
use crate::scripts;

/// What `INFO server` and `INFO replication` say about a server's history.
pub(crate) struct ServerHistory {
    pub(crate) run_id: String,
    /// `master_replid2`: zeros for a master never promoted since it
    /// started, else the replication id it had as a replica when it was
    /// last promoted. A server demoted to a replica (keeping its data and
    /// our marker through a partial resync) and promoted again may have
    /// missed writes meanwhile; its new `master_replid2` tells. (Not
    /// `master_replid`: a master takes a new one when its first replica
    /// attaches.)
    pub(crate) replid: String,
    /// How far back its data is known complete: the time since a master
    /// never promoted started (it lost nothing since), at its shortest,
    /// else zero. See [`ServerHistory::parse`].
    pub(crate) complete_for: Duration,
}

impl ServerHistory {
    pub(crate) async fn read(
        conn: &mut MultiplexedConnection,
    ) -> Result<ServerHistory, RedisError> {
        let (server, replication): (String, String) = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("replication")
            .query_async(conn)
            .await?;
        Ok(ServerHistory::parse(&server, &replication))
    }

    fn parse(server: &str, replication: &str) -> ServerHistory {
        let field = |info: &str, name: &str| -> Option<String> {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        // Unknown run_id: a fresh one, so the marker is never taken as this
        // server's (the node then starts a new epoch).
        let run_id = field(server, "run_id")
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()))
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let replid = field(replication, "master_replid2")
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()))
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let uptime = field(server, "uptime_in_seconds").and_then(|s| s.parse::<u64>().ok());
        let master = field(replication, "role").as_deref() == Some("master");
        // A promotion gives a master a second replication id.
        let never_promoted = field(replication, "master_replid2")
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b == b'0'));
        // `uptime_in_seconds` is the difference of two whole-second wall
        // clock readings (Redis's cached `unixtime` now, minus the second it
        // started in), so it reads 1 for a process 1 ms old once a second
        // boundary has passed: the true age is more than `uptime − 1` s,
        // and may be anything below `uptime + 1` s. Dating the epoch from
        // the uptime itself could end the quarantine up to a second early
        // (two owners at once); one second less never does. The script then
        // counts back from its own later `TIME`, which only shortens the
        // backdate further. (DESIGN rule 13: every time source at its
        // worst rounding.)
        let complete_for = match uptime {
            Some(secs) if master && never_promoted => Duration::from_secs(secs.saturating_sub(1)),
            _ => Duration::ZERO,
        };
        ServerHistory {
            run_id,
            replid,
            complete_for,
        }
    }

    /// Whose data the epoch marker vouches for: this server process since
    /// its last promotion (`run_id:master_replid2`). A marker written under
    /// another is replaced by a new epoch.
    pub(crate) fn identity(&self) -> String {
        format!("{}:{}", self.run_id, self.replid)
    }
}

/// The epoch check of a new connection (`scripts/epoch_check.lua`).
/// Returns the server's `run_id`.
pub(crate) async fn check_epoch(
    conn: &mut MultiplexedConnection,
    durable: bool,
    flagged: bool,
) -> Result<String, RedisError> {
    let history = ServerHistory::read(conn).await?;
    let backdate = u64::try_from(history.complete_for.as_millis()).unwrap_or(u64::MAX);
    let _: Value = redis::cmd("EVAL")
        .arg(scripts::EPOCH_CHECK.body(flagged))
        .arg(1)
        .arg(EPOCH_KEY)
        .arg(history.identity())
        .arg(backdate)
        .arg(u8::from(durable))
        .query_async(conn)
        .await?;
    Ok(history.run_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEROS: &str = "0000000000000000000000000000000000000000";

    fn history(role: &str, replid2: &str, uptime: &str) -> ServerHistory {
        let server =
            format!("# Server\r\nrun_id:d6bd7b06a87d842a1099\r\nuptime_in_seconds:{uptime}\r\n");
        let replication = format!("# Replication\r\nrole:{role}\r\nmaster_replid2:{replid2}\r\n");
        ServerHistory::parse(&server, &replication)
    }

    #[test]
    fn the_identity_changes_with_a_promotion_not_with_a_replica() {
        let never = history("master", ZEROS, "3600");
        assert_eq!(never.identity(), format!("d6bd7b06a87d842a1099:{ZEROS}"));
        // Promoted (again): the replication id it had as a replica.
        let promoted = history("master", "0ad8dc904e714fcc46ab99cec0d5b766149a09f0", "3600");
        assert_ne!(promoted.identity(), never.identity());
    }

    #[test]
    fn a_master_never_promoted_is_complete_since_it_started() {
        let h = history("master", ZEROS, "3600");
        assert_eq!(h.run_id, "d6bd7b06a87d842a1099");
        // At least 3,599 s: the uptime is rounded to whole seconds.
        assert_eq!(h.complete_for, Duration::from_secs(3599));
    }

    #[test]
    fn the_whole_second_uptime_never_dates_an_epoch_before_the_start() {
        // Redis reads `uptime_in_seconds` as floor(now) − floor(start) on
        // its wall clock. For every start and age in ms (ages up to 3 s,
        // starts across a second), the backdate is at most the true age.
        for start_ms in (0..1000u64).step_by(7) {
            for age_ms in (0..3000u64).step_by(11) {
                let now_ms = 5_000 + start_ms + age_ms;
                let uptime = now_ms / 1000 - (5_000 + start_ms) / 1000;
                let h = history("master", ZEROS, &uptime.to_string());
                assert!(
                    h.complete_for <= Duration::from_millis(age_ms),
                    "started at .{start_ms:03}, {age_ms} ms old: uptime {uptime} dated it back {:?}",
                    h.complete_for
                );
            }
        }
        assert_eq!(history("master", ZEROS, "0").complete_for, Duration::ZERO);
        assert_eq!(history("master", ZEROS, "1").complete_for, Duration::ZERO);
    }

    #[test]
    fn a_promoted_master_a_replica_or_an_unreadable_info_date_from_now() {
        let promoted = "0ad8dc904e714fcc46ab99cec0d5b766149a09f0";
        assert_eq!(
            history("master", promoted, "3600").complete_for,
            Duration::ZERO
        );
        assert_eq!(history("slave", ZEROS, "3600").complete_for, Duration::ZERO);
        assert_eq!(
            history("master", ZEROS, "soon").complete_for,
            Duration::ZERO
        );
        // No run_id: a fresh one, never the marker's.
        let blank = ServerHistory::parse("", "");
        assert_eq!(blank.complete_for, Duration::ZERO);
        assert_ne!(blank.run_id, ServerHistory::parse("", "").run_id);
    }
}
