//! `quorumlock release --force`: an operator's release of a name, whatever
//! its owner.

use quorumlock::{Error, MultiLock};

use crate::args::{ReleaseArgs, exit};
use crate::nodes::{Failure, Settings};

pub async fn release(settings: &Settings, args: ReleaseArgs) -> Result<u8, Failure> {
    let lock = MultiLock::new(settings.config()?);
    // Connected first (bounded by the connect timeout): the release's own
    // calls have only the node timeout, which a fresh connection (TLS, a
    // distant node) can take up by itself.
    lock.warm_up().await;
    let results = lock.force_release(&args.name).await.map_err(|e| {
        let code = match e {
            // A reserved name: the error names it.
            Error::InvalidKey { .. } => exit::USAGE,
            _ => exit::UNAVAILABLE,
        };
        Failure::new(code, e.to_string())
    })?;
    let mut failed = 0;
    for (node, result) in lock.config().node_urls().zip(&results) {
        match result {
            Ok(true) => println!("{node}: released"),
            Ok(false) => println!("{node}: not held"),
            Err(error) => {
                failed += 1;
                println!("{node}: failed: {error}");
            }
        }
    }
    let required = lock.config().required_nodes();
    if results.len() - failed < required {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{}: only {} of {} nodes answered",
                args.name,
                results.len() - failed,
                results.len()
            ),
        ));
    }
    Ok(0)
}
