//! `quorumlock release --force`: an operator's release of a name, whatever
//! its owner. A name in the reserved namespace (`quorumlock:epoch`, a
//! fencing counter) is refused by the library: deleting one would take
//! every node's vote, or a name's fencing, down.

use quorumlock::{Error, MultiLock};

use crate::args::{ReleaseArgs, exit};
use crate::nodes::{Failure, Settings};
use crate::shown;

pub async fn release(settings: &Settings, args: ReleaseArgs) -> Result<u8, Failure> {
    let lock = MultiLock::new(settings.config()?);
    let name = shown::name(&args.name);
    // Connected first (bounded by the connect timeout): the release's own
    // calls have only the node timeout, which a fresh connection (TLS, a
    // distant node) can take up by itself.
    lock.warm_up().await;
    let results = lock.force_release(&args.name).await.map_err(|e| match e {
        // The error names the name.
        Error::InvalidKey { .. } | Error::Config(_) => Failure::new(exit::USAGE, e.to_string()),
        _ => Failure::new(exit::UNAVAILABLE, format!("{name}: {e}")),
    })?;
    let mut failed = 0;
    for (node, result) in lock.config().node_urls().zip(&results) {
        let line = match result {
            Ok(true) => format!("{node}: released"),
            Ok(false) => format!("{node}: not held"),
            Err(error) => {
                failed += 1;
                format!("{node}: failed: {error}")
            }
        };
        println!("{}", shown::line(&line));
    }
    let required = lock.config().required_nodes();
    if results.len() - failed < required {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{name}: only {} of {} nodes answered",
                results.len() - failed,
                results.len()
            ),
        ));
    }
    Ok(0)
}
