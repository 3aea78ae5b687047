//! Take a lock on N independent Redis masters, do the work, release.
//!
//! ```text
//! cargo run --example basic -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```
//! (`testbed/run demo` starts its own nodes; this example uses yours.)

use std::time::Duration;

use quorumlock::{Error, LockConfig, MultiLock, Quorum, Wait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<String> = std::env::args().skip(1).collect();
    let lock = MultiLock::new(
        LockConfig::builder()
            .nodes(nodes)
            .quorum(Quorum::Majority)
            .ttl(Duration::from_secs(10))
            .build()?,
    );
    match lock
        .acquire("payment:4711", Wait::up_to(Duration::from_secs(2)))
        .await
    {
        Ok(guard) => {
            println!(
                "held on {} nodes for {:?}",
                guard.held_nodes().count(),
                guard.validity()
            );
            // Larger than every earlier holder's: pass it with every write.
            let token = guard.fencing_token().await?;
            // ... capture the payment with `token`; finish within guard.validity() ...
            let report = guard.release().await;
            println!(
                "token {token}, released on {} nodes (still held: {})",
                report.released, report.was_held
            );
        }
        Err(Error::WaitBudgetExhausted { last, .. }) => println!("not acquired: {last}"),
        Err(other) => return Err(other.into()),
    }
    // Let a release still on its way to a slow node finish before the runtime ends.
    lock.settle(Duration::from_secs(2)).await;
    Ok(())
}
