//! A service that holds locks while it works and shuts down cleanly on
//! Ctrl-C: the work stops, every guard is released (not left to expire), and
//! a lock lost mid-work stops that work at once.
//!
//! ```text
//! cargo run --example graceful_shutdown -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

use std::time::Duration;

use quorumlock::{LockConfig, MultiLock, Wait};
use tokio::task::JoinSet;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<String> = std::env::args().skip(1).collect();
    let lock = MultiLock::new(
        LockConfig::builder()
            .nodes(nodes)
            .ttl(Duration::from_secs(10))
            .watchdog(true)
            .build()?,
    );
    let mut workers = JoinSet::new();
    for shard in 0..4 {
        let lock = lock.clone();
        workers.spawn(async move {
            let name = format!("shard:{shard}");
            let guard = lock
                .acquire(&name, Wait::up_to(Duration::from_secs(5)))
                .await?;
            // Cancelled when the lock can no longer be proven held.
            let lost = guard.cancellation_token();
            let work = async {
                loop {
                    // ... one unit of work on this shard ...
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            };
            let outcome = tokio::select! {
                () = work => "done",
                () = lost.cancelled() => "lost its lock",
                _ = tokio::signal::ctrl_c() => "shutting down",
            };
            let report = guard.release().await;
            println!("{name}: {outcome}; released on {} nodes", report.released);
            Ok::<_, quorumlock::Error>(())
        });
    }
    while let Some(joined) = workers.join_next().await {
        joined??;
    }
    // Let a release still on its way to a slow node finish before the runtime ends.
    lock.settle(Duration::from_secs(2)).await;
    Ok(())
}
