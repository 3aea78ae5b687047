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

    /// The owner token of `name` as the first of `nodes` (indexes into the
    /// configured nodes) that answers gives it.
    pub async fn owner(&mut self, name: &str, nodes: &[usize]) -> Option<Vec<u8>> {
        let reads = nodes.iter().filter(|&&i| i < self.clients.len()).map(|&i| {
            let (client, conn) = (self.clients[i].clone(), self.conns[i].clone());
            async move {
                let mut conn = match conn {
                    Some(conn) => conn,
                    None => connect_within(client, GLANCE).await.ok()?.0,
                };
                let mut eval = redis::cmd("EVAL");
                eval.arg(crate::lock_key::READ).arg(1).arg(name);
                let read = eval.query_async::<(Option<Vec<u8>>, u64)>(&mut conn);
                let (owner, _holds) = tokio::time::timeout(GLANCE, read).await.ok()?.ok()?;
                Some((i, conn, owner))
            }
        });
        let mut found = None;
        for (i, conn, owner) in join_all(reads).await.into_iter().flatten() {
            self.conns[i] = Some(conn);
            found = found.or(owner);
        }
        found
    }
}
