//! A nightly job that must never run twice at once, writing its result to a
//! resource that checks fencing tokens: `run_exclusive` keeps the lock
//! alive with the watchdog and stops the work if it can no longer prove the
//! lock, and the token makes a late write from a stale holder harmless.
//!
//! ```text
//! cargo run --example fenced_job -- RESOURCE_URL NODE_URL NODE_URL NODE_URL
//! cargo run --example fenced_job -- redis://127.0.0.1:7000 \
//!     redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```
//! The resource is a Redis server that is *not* one of the lock's nodes.

use std::time::Duration;

use quorumlock::fenced::{FencedResource, Write};
use quorumlock::{LockConfig, MultiLock, Wait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let resource_url = args
        .next()
        .ok_or("usage: fenced_job RESOURCE_URL NODE_URL...")?;
    let nodes: Vec<String> = args.collect();
    let lock = MultiLock::new(
        LockConfig::builder()
            .nodes(nodes)
            .ttl(Duration::from_secs(10))
            .build()?,
    );
    let report = FencedResource::open(&resource_url, "nightly-report").await?;

    let outcome = lock
        .run_exclusive(
            "nightly-report",
            Wait::up_to(Duration::from_secs(5)),
            |held| async move {
                // The token of this hold: larger than any earlier holder's.
                let token = held.fencing_token().await?;
                // ... compute the report (the watchdog renews meanwhile) ...
                let written = report.write(token, "report for today").await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((token, written))
            },
        )
        .await?;
    match outcome {
        Ok((token, Write::Accepted)) => println!("written with token {token}"),
        Ok((token, Write::Rejected { last })) => {
            println!("token {token} refused: a later holder already wrote with {last}")
        }
        Ok((token, other)) => println!("token {token}: {other:?}"),
        Err(e) => println!("the job failed: {e}"),
    }
    // Let a release still on its way to a slow node finish before the runtime ends.
    lock.settle(Duration::from_secs(2)).await;
    Ok(())
}
