//! `quorumlock adopt --confirm-new-servers`: lets brand-new, empty servers
//! vote at once (`MultiLock::adopt_empty_nodes`), instead of after the
//! quarantine. The operator's word, so it is asked for explicitly, and the
//! warning of the library's docs is printed every time.

use quorumlock::{MultiLock, NodeErrorKind};

use crate::args::{AdoptArgs, exit};
use crate::nodes::{Failure, Settings};
use crate::shown;

/// What `adopt` prints before it does anything (the warning of
/// `MultiLock::adopt_empty_nodes`).
pub const WARNING: &str = "\
Only for servers that have never held this deployment's locks. A node that
restarted empty, or a fresh server replacing a failed one, is empty too, and
adopting it breaks mutual exclusion (a lock it lost is still held on the other
nodes) and fencing (its lost counters would count as never written): let the
quarantine run out instead. A node that holds any key is refused and keeps its
quarantine. Servers that have run longer than the quarantine and were never
promoted need no adoption: they are dated from their start.";

pub async fn adopt(settings: &Settings, args: AdoptArgs) -> Result<u8, Failure> {
    eprintln!("quorumlock adopt: {WARNING}");
    if !args.confirm_new_servers {
        return Err(Failure::new(
            exit::USAGE,
            "nothing adopted: give --confirm-new-servers if every node is a brand-new server",
        ));
    }
    let lock = MultiLock::new(settings.config()?);
    lock.warm_up().await;
    let results = lock.adopt_empty_nodes().await;
    let mut refused = 0;
    for (node, result) in lock.config().node_urls().zip(&results) {
        let line = match result {
            Ok(()) => format!("{node}: adopted: it votes at once"),
            Err(e) if e.kind() == NodeErrorKind::NotEmpty => {
                refused += 1;
                format!("{node}: refused: it holds keys, so it keeps its quarantine ({e})")
            }
            Err(e) => {
                refused += 1;
                format!("{node}: failed: {e}")
            }
        };
        println!("{}", shown::line(&line));
    }
    Ok(if refused == 0 { 0 } else { exit::FINDINGS })
}
