//! A transfer between two accounts: both locked at once, all or nothing,
//! in the same order whoever asks, so two transfers in opposite directions
//! never deadlock; nested code re-enters the lock it already holds.
//!
//! ```text
//! cargo run --example transfer -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

use std::time::Duration;

use quorumlock::{HeldLock, LockConfig, MultiLock, Wait};

/// Checks the limit of one account; it takes the account's lock itself,
/// so it also works when called on its own. Called under the transfer's
/// lock, it re-enters that hold instead of waiting for itself.
async fn check_limit(held: &HeldLock, account: &str) -> Result<(), quorumlock::Error> {
    let inner = held.reenter().await?;
    println!(
        "checking {account} under a re-entered hold ({} holds the keys)",
        held.owner().token()
    );
    inner.release().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<String> = std::env::args().skip(1).collect();
    let lock = MultiLock::new(
        LockConfig::builder()
            .nodes(nodes)
            .ttl(Duration::from_secs(10))
            .build()?,
    );
    // Sorted on every node, so "account:7 -> account:3" and
    // "account:3 -> account:7" take the names in the same order.
    let transfer = lock
        .acquire_all(
            &["account:7", "account:3"],
            Wait::up_to(Duration::from_secs(2)),
        )
        .await?;
    check_limit(&transfer.handle(), "account:7").await?;
    let token = transfer.fencing_token().await?;
    println!("moving 100 from account:7 to account:3 with fencing token {token}");
    // ... debit and credit, each write carrying `token` ...
    let report = transfer.release().await;
    println!("released on {} nodes", report.released);
    // Let a release still on its way to a slow node finish before the runtime ends.
    lock.settle(Duration::from_secs(2)).await;
    Ok(())
}
