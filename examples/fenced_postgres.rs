//! Fencing with PostgreSQL: a payment job writes its row only with a fencing
//! token newer than the row's, so a holder that stalled past its lease cannot
//! overwrite the work of the holder after it.
//!
//! The story, in one process (in production, A and B are two processes):
//!
//! 1. holder A takes the lock (2 s TTL, no watchdog) and its fencing token;
//! 2. A stalls past its validity (a GC pause, swap, a stopped VM): its lock
//!    expires on the nodes, and A cannot know;
//! 3. holder B takes the lock, with a larger token, and captures the payment;
//! 4. A wakes and tries its late write with its old token: PostgreSQL updates
//!    0 rows, and A gives up.
//!
//! ```text
//! export QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003
//! export DATABASE_URL='host=/var/run/postgresql dbname=postgres user=postgres'
//! cargo run --example fenced_postgres
//! ```
//!
//! `DATABASE_URL` is a tokio-postgres connection string (`key=value` pairs
//! or a `postgresql://` URL). The program exits non-zero if B's write did
//! not land or A's late write was not refused. `tests/fenced_postgres.rs`
//! runs this file against a private PostgreSQL server.
//!
//! **Nodes started moments ago** sit out the quarantine (one TTL) before
//! they vote, so a lock taken at once fails with `quarantined`. If the
//! servers are brand new and empty, adopt them once, right after
//! provisioning: `quorumlock adopt --confirm-new-servers` (or
//! `MultiLock::adopt_empty_nodes`). Never after a restart, a failover or
//! the replacement of a failed node: there, let the quarantine run out (see
//! "First run and adoption" in the README).

use std::error::Error;
use std::time::Duration;

use quorumlock::{LockConfig, MultiLock, Wait};
use tokio_postgres::{Client, NoTls};

type BoxError = Box<dyn Error + Send + Sync>;

/// The table the job writes. `fence` is the token of the last holder that
/// wrote the row: it only ever grows. Tokens are 64-bit (see
/// docs/fencing.md), hence `bigint`.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS payments (
    id     text   PRIMARY KEY,
    status text   NOT NULL,
    fence  bigint NOT NULL DEFAULT 0  -- the token of the last write
)";

/// The fenced write: the check and the write in one statement, so they are
/// one step in the database. 1 row: written; 0 rows: a holder with a newer
/// token wrote first, and this holder is stale.
const FENCED_UPDATE: &str =
    "UPDATE payments SET status = $2, fence = $3 WHERE id = $1 AND fence < $3";

/// A short lease without the watchdog, so that A's lock runs out while A
/// stalls. (With the watchdog a *running* holder keeps its lock; a stalled
/// one loses it all the same: the token protects both.)
const TTL: Duration = Duration::from_secs(2);

/// What a run did: the payment's row id and the two holders' tokens.
#[derive(Debug)]
pub struct Outcome {
    pub payment: String,
    pub a_token: u64,
    pub b_token: u64,
}

#[tokio::main]
async fn main() {
    match from_env().await {
        Ok(done) => println!(
            "payment {}: B's write stands (fence {}), A's token {} was refused",
            done.payment, done.b_token, done.a_token
        ),
        Err(e) => {
            // With the causes: tokio-postgres puts the reason in `source()`.
            let mut message = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                message = format!("{message}: {c}");
                cause = c.source();
            }
            eprintln!("fenced_postgres: {message}");
            std::process::exit(1);
        }
    }
}

/// Reads `QUORUMLOCK_NODES` and `DATABASE_URL`, then runs the story.
async fn from_env() -> Result<Outcome, BoxError> {
    let var = |name: &str| std::env::var(name).map_err(|e| format!("{name}: {e}"));
    let nodes: Vec<String> = var("QUORUMLOCK_NODES")?
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(String::from)
        .collect();
    run(nodes, &var("DATABASE_URL")?).await
}

/// The whole story; `Err` if B's write did not land or A's was not refused.
pub async fn run(nodes: Vec<String>, database_url: &str) -> Result<Outcome, BoxError> {
    let db = connect(database_url).await?;
    db.batch_execute(SCHEMA).await?;
    // A new row, and so a new lock name, on every run: tokens rise per lock
    // name, and a name is only ever fenced against its own row.
    let payment: String = db
        .query_one(
            "INSERT INTO payments (id, status) VALUES (gen_random_uuid()::text, 'pending') RETURNING id",
            &[],
        )
        .await?
        .get(0);
    let name = format!("payment:{payment}");

    // Two lock services, as two processes of the job would each have.
    let config = LockConfig::builder()
        .nodes(nodes)
        .ttl(TTL)
        .watchdog(false)
        // Generous for a busy machine: a slow node is not a missing one.
        .node_timeout(TTL / 10)
        .build()?;
    let (service_a, service_b) = (MultiLock::new(config.clone()), MultiLock::new(config));

    // 1. A takes the lock and its token.
    let a = service_a.acquire(&name, Wait::up_to(TTL)).await?;
    let a_token = a.fencing_token().await?;
    println!(
        "A holds {name} with token {a_token}, valid for {:?}",
        a.validity()
    );

    // 2. A stalls past its validity. Here a sleep; in production nothing
    //    tells A, which is why the database checks the token.
    tokio::time::sleep(a.validity()).await;
    println!("A stalled past its validity (held: {})", a.is_held());

    // 3. B takes the lock once A's keys expired on the nodes, and writes.
    let b = service_b.acquire(&name, Wait::up_to(2 * TTL)).await?;
    let b_token = b.fencing_token().await?;
    let b_wrote = fenced_write(&db, &payment, "captured by B", b_token).await;
    b.release().await;
    if !b_wrote? {
        return Err(format!("B's write with token {b_token} was refused").into());
    }
    println!("B captured the payment with token {b_token} ({b_token} > {a_token})");

    // 4. A wakes and tries its late write with its old token.
    let a_wrote = fenced_write(&db, &payment, "captured by A", a_token).await;
    // A's keys expired: this release finds nothing of A's on the nodes.
    a.release().await;
    if a_wrote? {
        return Err(format!("A's late write with token {a_token} was NOT refused").into());
    }
    println!("A's late write with token {a_token} was refused: 0 rows updated");
    println!(
        "A is stale: it abandons the job (no retry: the same token is refused again, \
         and a new lock would redo what B did) and reports the refusal"
    );
    // Before the runtime ends: a release still on its way to a slow node.
    service_a.settle(TTL).await;
    service_b.settle(TTL).await;
    Ok(Outcome {
        payment,
        a_token,
        b_token,
    })
}

/// Connects to PostgreSQL; the connection runs in a task of its own.
async fn connect(database_url: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(database_url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("PostgreSQL connection: {e}");
        }
    });
    Ok(client)
}

/// Writes `status` to the payment's row if `token` is newer than the row's
/// fence. `Ok(false)`: refused, the writer is stale.
async fn fenced_write(
    db: &Client,
    payment: &str,
    status: &str,
    token: u64,
) -> Result<bool, BoxError> {
    // bigint is signed; tokens stay below 2^53, so this never fails in practice.
    let fence = i64::try_from(token).map_err(|_| format!("token {token} does not fit a bigint"))?;
    let rows = db
        .execute(FENCED_UPDATE, &[&payment, &status, &fence])
        .await?;
    Ok(rows == 1)
}
