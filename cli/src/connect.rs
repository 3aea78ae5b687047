//! Plain connections to each node for the commands that inspect them
//! (`status`, `doctor`, the reason `run` gives for waiting): the lock's own
//! connections are not reachable from outside the library, and these send
//! only reads.

use std::time::{Duration, Instant};

use futures::future::join_all;
use quorumlock::redis::aio::MultiplexedConnection;
use quorumlock::redis::{self, Client};

/// How long a node may take to connect or to answer one inspection.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// A node's connection and how long connecting took, or why it failed.
pub async fn connect(
    client: Result<Client, String>,
) -> Result<(MultiplexedConnection, Duration), String> {
    connect_within(client, TIMEOUT).await
}

async fn connect_within(
    client: Result<Client, String>,
    limit: Duration,
) -> Result<(MultiplexedConnection, Duration), String> {
    let began = Instant::now();
    let client = client?;
    match tokio::time::timeout(limit, client.get_multiplexed_async_connection()).await {
        Ok(Ok(conn)) => Ok((conn, began.elapsed())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no connection within {:.1} s", limit.as_secs_f64())),
    }
}

/// Runs `cmd` on `conn`, bounded by [`TIMEOUT`].
pub async fn query<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    match tokio::time::timeout(TIMEOUT, cmd.query_async::<T>(conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", TIMEOUT.as_secs())),
    }
}

/// The server's clock in ms, from `TIME` (a value no clock has is an
/// error, not an overflow).
pub async fn server_time_ms(conn: &mut MultiplexedConnection) -> Result<i64, String> {
    let (secs, micros): (i64, i64) = query(conn, &redis::cmd("TIME")).await?;
    secs.checked_mul(1000)
        .and_then(|ms| ms.checked_add(micros / 1000))
        .ok_or_else(|| format!("TIME answered {secs} s {micros} µs: not a clock"))
}

/// Reads who holds a name while `run` waits: one connection per node,
/// made when first needed and kept, each read bounded so that a slow node
/// holds the wait up briefly.
pub struct Inspector {
    clients: Vec<Result<Client, String>>,
    conns: Vec<Option<MultiplexedConnection>>,
}

/// The bound on one look at the holder, all nodes at once.
const GLANCE: Duration = Duration::from_millis(300);

impl Inspector {
    /// For one client per node, in the configuration's order.
    pub fn new(clients: Vec<Result<Client, String>>) -> Inspector {
        Inspector {
            conns: vec![None; clients.len()],
            clients,
        }
    }

    /// The owner tokens of `keys` (lock keys, read in one pipeline per
    /// node) as the first of `nodes` (indexes into the configured nodes)
    /// that answers gives each: every owner once, in the order of the
    /// keys, with how many of the keys it holds.
    pub async fn owners(&mut self, keys: &[String], nodes: &[usize]) -> Vec<(Vec<u8>, u32)> {
        let reads = nodes.iter().filter(|&&i| i < self.clients.len()).map(|&i| {
            let (client, conn) = (self.clients[i].clone(), self.conns[i].clone());
            async move {
                let mut conn = match conn {
                    Some(conn) => conn,
                    None => connect_within(client, GLANCE).await.ok()?.0,
                };
                let mut pipe = redis::pipe();
                for key in keys {
                    crate::lock_key::read(&mut pipe, key);
                }
                let read = pipe.query_async::<Vec<(Option<Vec<u8>>, u64)>>(&mut conn);
                let found = tokio::time::timeout(GLANCE, read).await.ok()?.ok()?;
                Some((i, conn, found))
            }
        });
        let mut per_key: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        for (i, conn, found) in join_all(reads).await.into_iter().flatten() {
            self.conns[i] = Some(conn);
            for (owner, (found, _holds)) in per_key.iter_mut().zip(found) {
                if owner.is_none() {
                    *owner = found;
                }
            }
        }
        let mut owners: Vec<(Vec<u8>, u32)> = Vec::new();
        for owner in per_key.into_iter().flatten() {
            match owners.iter_mut().find(|(known, _)| *known == owner) {
                Some((_, keys)) => *keys += 1,
                None => owners.push((owner, 1)),
            }
        }
        owners
    }
}
