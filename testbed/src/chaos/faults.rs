//! The kinds of fault the chaos mix injects, and what each one promises.

use std::fmt;
use std::str::FromStr;

/// One kind of fault. Every kind here is one the lock must survive: the
/// mix injects them and the checker must find no violation. The faults
/// that break the algorithm's assumptions on purpose live in the negative
/// controls ([`super::controls`]), not here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `SIGSTOP` a node, `SIGCONT` it later: the socket accepts, nothing
    /// answers.
    NodePause,
    /// `CLIENT PAUSE <ms> ALL`: the server holds every client's commands.
    NodeStall,
    /// `SIGKILL` a node with `appendfsync always` and restart it at once:
    /// every acknowledged write is back.
    CrashRestartAof,
    /// `SIGKILL` a node without persistence and restart it empty after
    /// more than the TTL (the delayed restart plain Redlock requires).
    CrashRestartDelayed,
    /// `SIGKILL` a node without persistence and restart it empty at once:
    /// it lost every lock it held. Plain Redlock breaks here (the negative
    /// control `immediate_restart`); quorumlock's quarantine keeps the
    /// node out of every quorum for a TTL.
    CrashRestartEmpty,
    /// One node is a master with an async replica: the replication link
    /// is cut (iptables), locks are written to the master only, the master
    /// is killed and the replica promoted (`REPLICAOF NO ONE`); the node's
    /// address moves to it. The node comes back having lost recent locks.
    Failover,
    /// Every byte between clients and a node is delayed (with jitter).
    NetDelay,
    /// TCP-like loss between clients and a node: some chunks arrive only
    /// after a retransmission stall.
    NetLoss,
    /// A partition: nothing passes between clients and a node.
    NetPartition,
    /// Every connection to a node is reset and new ones are refused.
    NetReset,
    /// A node's wall clock runs fast, within the drift allowance.
    ClockFast,
    /// A node's wall clock steps forward (within the drift allowance),
    /// and back at the end.
    ClockStep,
    /// A worker process is stopped for longer than the validity (a GC
    /// pause, a descheduled VM).
    ClientPause,
    /// A worker process is killed (`SIGKILL`) and a new one started.
    ClientCrash,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 14] = [
        FaultKind::NodePause,
        FaultKind::NodeStall,
        FaultKind::CrashRestartAof,
        FaultKind::CrashRestartDelayed,
        FaultKind::CrashRestartEmpty,
        FaultKind::Failover,
        FaultKind::NetDelay,
        FaultKind::NetLoss,
        FaultKind::NetPartition,
        FaultKind::NetReset,
        FaultKind::ClockFast,
        FaultKind::ClockStep,
        FaultKind::ClientPause,
        FaultKind::ClientCrash,
    ];

    /// The name used in the history, the report and `--faults`.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::NodePause => "node_pause",
            FaultKind::NodeStall => "node_stall",
            FaultKind::CrashRestartAof => "crash_restart_aof",
            FaultKind::CrashRestartDelayed => "crash_restart_delayed",
            FaultKind::CrashRestartEmpty => "crash_restart_empty",
            FaultKind::Failover => "failover",
            FaultKind::NetDelay => "net_delay",
            FaultKind::NetLoss => "net_loss",
            FaultKind::NetPartition => "net_partition",
            FaultKind::NetReset => "net_reset",
            FaultKind::ClockFast => "clock_fast",
            FaultKind::ClockStep => "clock_step",
            FaultKind::ClientPause => "client_pause",
            FaultKind::ClientCrash => "client_crash",
        }
    }

    /// Which lane injects it: faults of one lane never overlap in time, and
    /// two lanes never hit the same node at once.
    pub fn lane(self) -> Lane {
        match self {
            FaultKind::NodePause
            | FaultKind::NodeStall
            | FaultKind::CrashRestartAof
            | FaultKind::CrashRestartDelayed
            | FaultKind::CrashRestartEmpty
            | FaultKind::Failover => Lane::Node,
            FaultKind::NetDelay
            | FaultKind::NetLoss
            | FaultKind::NetPartition
            | FaultKind::NetReset
            | FaultKind::ClockFast
            | FaultKind::ClockStep => Lane::Link,
            FaultKind::ClientPause | FaultKind::ClientCrash => Lane::Client,
        }
    }
}

/// A sequence of faults of one family, injected one after the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Faults of a node's process.
    Node,
    /// Faults of the path to a node, or of its clock.
    Link,
    /// Faults of a worker process.
    Client,
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown fault name in `--faults`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault kind {name:?}; the kinds are: {}", FaultKind::ALL.map(FaultKind::name).join(", "))]
pub struct UnknownFault {
    /// The name given.
    pub name: String,
}

impl FromStr for FaultKind {
    type Err = UnknownFault;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownFault {
                name: s.to_string(),
            })
    }
}

/// Parses a comma-separated list of fault names (`all` for every kind).
pub fn parse_list(list: &str) -> Result<Vec<FaultKind>, UnknownFault> {
    if list.trim() == "all" {
        return Ok(FaultKind::ALL.to_vec());
    }
    let mut kinds = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(FaultKind::from_str)
        .collect::<Result<Vec<_>, _>>()?;
    kinds.sort();
    kinds.dedup();
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in FaultKind::ALL {
            assert_eq!(kind.name().parse::<FaultKind>(), Ok(kind));
        }
    }

    #[test]
    fn lists_parse_and_bad_names_are_named() {
        assert_eq!(parse_list("all").map(|l| l.len()), Ok(FaultKind::ALL.len()));
        assert_eq!(
            parse_list("net_delay, node_pause,net_delay"),
            Ok(vec![FaultKind::NodePause, FaultKind::NetDelay])
        );
        let err = parse_list("node_pause,meteor").unwrap_err();
        assert_eq!(err.name, "meteor");
        assert!(err.to_string().contains("node_pause"));
    }
}
