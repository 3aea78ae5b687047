//! Sentinel-managed nodes: which server is the master now.
//!
//! A node given as a Sentinel group has no fixed address. Every time it
//! connects (the first time, and after any connection was lost or dropped)
//! it asks the group's sentinels, in order, for the current master's
//! address, connects there, and checks with `ROLE` that the server is a
//! master (a sentinel's answer can be stale for a moment during a
//! failover). A demoted master answers the vote scripts `READONLY`; the
//! node then drops the connection (`node::Node::send`), so the next call
//! asks the sentinels again.
//!
//! What a failover does to the lock is the epoch module's business: the
//! promoted replica has no epoch marker of its own (the marker is never
//! replicated), so it casts no vote for the quarantine.

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, RedisError, Value};

use crate::config::SentinelGroup;

/// A connection to the master the group's sentinels name now.
pub(crate) async fn connect_master(
    group: &SentinelGroup,
    config: &AsyncConnectionConfig,
) -> Result<MultiplexedConnection, RedisError> {
    let mut last = None;
    for sentinel in &group.sentinels {
        match ask(sentinel, group, config).await {
            Ok(conn) => return Ok(conn),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        failure(format!(
            "Sentinel group {:?} has no sentinels",
            group.service
        ))
    }))
}

/// Asks one sentinel and connects to the master it names.
async fn ask(
    sentinel: &Client,
    group: &SentinelGroup,
    config: &AsyncConnectionConfig,
) -> Result<MultiplexedConnection, RedisError> {
    let mut conn = sentinel
        .get_multiplexed_async_connection_with_config(config)
        .await?;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(&group.service)
        .query_async(&mut conn)
        .await?;
    let Some((host, port)) = addr else {
        return Err(failure(format!(
            "a sentinel does not know the master group {:?}",
            group.service
        )));
    };
    let info = ConnectionAddr::Tcp(host.clone(), port)
        .into_connection_info()?
        .set_redis_settings(group.master.clone());
    let mut master = Client::open(info)?
        .get_multiplexed_async_connection_with_config(config)
        .await?;
    let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut master).await?;
    match role.first() {
        Some(Value::BulkString(role)) if role == b"master" => {}
        _ => {
            return Err(failure(format!(
                "the sentinels of {:?} named {host}:{port}, which is not a master (a failover in progress)",
                group.service
            )));
        }
    }
    refuses_writes_alone(&mut master, group, &format!("{host}:{port}")).await?;
    tracing::debug!(service = %group.service, master = %format!("{host}:{port}"), "Sentinel group's master");
    Ok(master)
}

/// Checks that the master stops taking writes once cut off from its
/// replicas for at most the group's `max_replica_lag`: the bound on how
/// long an old master keeps voting after a failover (see
/// [`SentinelNode`](crate::SentinelNode)).
async fn refuses_writes_alone(
    master: &mut MultiplexedConnection,
    group: &SentinelGroup,
    addr: &str,
) -> Result<(), RedisError> {
    let settings: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("min-replicas-to-write")
        .arg("min-replicas-max-lag")
        .query_async(master)
        .await
        .map_err(|e| {
            failure(format!(
                "cannot check that the master of {:?} ({addr}) refuses writes when cut off \
                 from its replicas (CONFIG GET min-replicas-*): {e}",
                group.service
            ))
        })?;
    let value = |name: &str| -> Option<u64> {
        let at = settings.iter().position(|s| s == name)?;
        settings.get(at + 1)?.parse().ok()
    };
    let (to_write, max_lag) = (
        value("min-replicas-to-write"),
        value("min-replicas-max-lag"),
    );
    let bound = group.max_replica_lag.as_secs();
    match (to_write, max_lag) {
        (Some(n), Some(lag)) if n >= 1 && lag >= 1 && lag <= bound => Ok(()),
        _ => Err(failure(format!(
            "the master of {:?} ({addr}) would keep taking writes when cut off from its \
             replicas, so a failover could leave two masters voting: set \
             min-replicas-to-write 1 and min-replicas-max-lag 1..={bound} \
             (it has {} and {})",
            group.service,
            to_write.map_or("?".to_owned(), |n| n.to_string()),
            max_lag.map_or("?".to_owned(), |n| n.to_string()),
        ))),
    }
}

/// A connection-level failure: the node is unreachable for now.
fn failure(why: String) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why))
}
