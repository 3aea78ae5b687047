//! [`ViolationKind::VoteInQuarantine`]: a node restarted without its data
//! casts no vote until its quarantine has passed (DESIGN rules on node
//! epochs), judged on every acquisition, not only through the overlaps a
//! vote too early may or may not cause.
//!
//! A restart fault ([`RESTARTS_EMPTY`]) of node
//! `n` from `start` to `end` kills the server after `start` and has the new
//! one up by `end`. The new server's epoch can be dated no earlier than its
//! own start, so its quarantine lasts until `start + quarantine` at the
//! earliest. An acquisition is a violation when its call began after `end`
//! (every vote it got from `n` came from the new server) and `n` counted
//! for it ([`What::Won`]'s `nodes`) before `start + quarantine − slack`.
//! The slack is the drift allowance the locks themselves subtract (1 % +
//! 2 ms): a clock fault on the same node may legitimately move the dating
//! that much.
//!
//! Runs judge this only when their history says the quarantine
//! ([`What::Settings`]); older histories are not judged.

use std::collections::HashMap;

use super::holds::{FaultSpan, secs};
use super::rules::{Found, ViolationKind};
use crate::chaos::history::{Event, Nanos, What};

/// The fault kinds that restart a node without its data (the last one is
/// the `immediate_restart` control's).
const RESTARTS_EMPTY: [&str; 3] = [
    "crash_restart_empty",
    "crash_restart_delayed",
    "crash_restart_immediate_volatile",
];

/// Finds every acquisition a restarted node voted for in its quarantine.
pub(super) fn check(events: &[Event], faults: &[FaultSpan], found: &mut Found) {
    let Some(quarantine) = events.iter().find_map(|e| match e.what {
        What::Settings { quarantine_ms } => Some(quarantine_ms * 1_000_000),
        _ => None,
    }) else {
        return;
    };
    let slack = quarantine / 100 + 2_000_000;
    let restarts: Vec<(usize, &FaultSpan)> = faults
        .iter()
        .filter(|f| RESTARTS_EMPTY.contains(&f.kind.as_str()) && f.ended)
        .filter_map(|f| node_of(&f.target).map(|n| (n, f)))
        .collect();
    if restarts.is_empty() {
        return;
    }
    let started: HashMap<&str, Nanos> = events
        .iter()
        .filter_map(|e| match &e.what {
            What::AcquireStart { hold, .. } => Some((hold.as_str(), e.t)),
            _ => None,
        })
        .collect();
    for e in events {
        let What::Won {
            key, hold, nodes, ..
        } = &e.what
        else {
            continue;
        };
        let Some(&call_start) = started.get(hold.as_str()) else {
            continue;
        };
        for &(node, f) in &restarts {
            let ends = f.start + quarantine;
            if nodes.contains(&node) && call_start >= f.end && e.t + slack < ends {
                found.push(
                    ViolationKind::VoteInQuarantine,
                    key,
                    (f.start, e.t),
                    vec![hold.clone()],
                    format!(
                        "n{node} counted for {hold} at {:.3} s, {:.3} s after its restart \
                         began ({}): its quarantine of {:.3} s had not passed",
                        secs(e.t, found.t0()),
                        secs(e.t, f.start),
                        f.kind,
                        secs(quarantine, 0),
                    ),
                );
            }
        }
    }
}

/// The node a fault's target names (`n3`, `n3:master`).
fn node_of(target: &str) -> Option<usize> {
    target.strip_prefix('n')?.split(':').next()?.parse().ok()
}
