//! [`ViolationKind::KeyLeftAfterRelease`]: a release or rollback must
//! reach every node that can be reached (DESIGN rule 12), not only the
//! quorum, and not only by the end of the run.
//!
//! The run's prober reads every lock name on every node it can reach, a
//! few times a second, and logs what it finds ([`What::Probe`]): the
//! mutexes' names, and every slot of the read-write locks and semaphores
//! (`quorumlock:rw:<name>:<i>`, `quorumlock:permit:<name>:<i>`), which are
//! lock names as any other. A mutex's acquire call writes one owner token
//! ([`What::AcquireStart`]), so a key found is traced to its call. A
//! read-write lock's or a semaphore's call takes no owner: each of its
//! attempts writes a token of its own, and only the winning attempt's is
//! known ([`What::Won`]'s `owner`); its keys are traced to the call and
//! judged, the other attempts' are not. The call is *over* at its release (a won
//! call, [`What::Release`]) or its failure ([`What::Failed`], logged after
//! the last attempt's rollback was sent). A key found at `t` on node `n` is
//! a violation when its call was over by `t − BOUND` and nothing could
//! have delayed the undo on the way since: no fault of node `n` (its
//! process, its link, its clock) and no pause of the call's worker
//! overlaps the span judged. A fault still on at `t` leaves the probe
//! unjudged; once it ends, the span starts again from its end.
//!
//! An undo is sent by the process that wrote: a worker killed while its
//! undo was still on its way (within the bound, or while the node was
//! faulted) takes it along, and the key lives out its TTL (a write it had
//! queued on a paused or cut-off node may even land after the kill). Such
//! a call is not judged.
//!
//! A failover brings back what the promoted replica had when replication
//! was cut: a key written before the cut and removed on the old master
//! after it lives out its TTL on the new one, whatever the client sends
//! (its release was answered, by the master that died). A later write of
//! the same call on the new master (another attempt, the winning one)
//! refreshes that key's TTL, and the entry brought back stays in it when
//! the call's own entries are released ("kept", as for re-entry): the key
//! lives until the TTL after the call's last write there. So a call that
//! started before a failover of node `n` began is not judged on `n` when
//! the failover began before the call was over, or within [`BOUND`] after
//! (a release answered earlier had reached the replica).

use std::collections::HashMap;

use super::holds::{CLIENT_CRASH, FaultSpan, secs};
use super::rules::{Found, ViolationKind};
use crate::chaos::history::{Event, Nanos, What};

/// The fault kind that promotes a replica (see the module's notes).
const FAILOVER: &str = "failover";

/// How long an undo may take on a node nothing hinders: a release waits up
/// to the node timeout for each reachable node (100 ms by default in the
/// mix), and what does not answer in time goes on in the background and
/// lands at the node's next reply. Far below the mix's TTL (1 s), so a key
/// left behind is seen before it expires.
pub const BOUND: Nanos = 600_000_000;

/// One acquire call, as the history tells it.
struct Call<'a> {
    key: &'a str,
    hold: &'a str,
    worker: &'a str,
    /// When it started.
    start: Nanos,
    /// When it was over (released or failed), if it was.
    over: Option<Nanos>,
}

/// Finds every probe that saw a key its call should have removed.
pub(super) fn check(events: &[Event], faults: &[FaultSpan], found: &mut Found) {
    let calls = calls(events);
    for e in events {
        let What::Probe {
            node,
            key,
            owner,
            pttl_ms,
        } = &e.what
        else {
            continue;
        };
        let Some(call) = calls.get(owner.as_str()) else {
            continue;
        };
        let Some(over) = call.over else { continue };
        let Some(from) = judged_from(call, over, e.t, *node, faults) else {
            continue;
        };
        if e.t.saturating_sub(from) <= BOUND {
            continue;
        }
        let at = secs(e.t, found.t0());
        found.push(
            ViolationKind::KeyLeftAfterRelease,
            key,
            (over, e.t),
            vec![call.hold.to_string()],
            format!(
                "n{node} still had {key:?} of {} at {at:.3} s (PTTL {pttl_ms} ms): {:.3} s after \
                 its call was over, {:.3} s after the last fault that could delay its undo",
                call.hold,
                secs(e.t, over),
                secs(e.t, from),
            ),
        );
        debug_assert!(names_the_call(key, call.key), "{key} {} {at}", call.key);
    }
}

/// Whether a lock key found, `key`, is the call's name `name` or one of
/// its slots (`quorumlock:rw:<name>:<i>`, `quorumlock:permit:<name>:<i>`).
fn names_the_call(key: &str, name: &str) -> bool {
    key == name
        || ["quorumlock:rw:", "quorumlock:permit:"]
            .iter()
            .any(|prefix| {
                key.strip_prefix(prefix)
                    .and_then(|rest| rest.rsplit_once(':'))
                    .is_some_and(|(n, slot)| n == name && slot.parse::<u32>().is_ok())
            })
}

/// The acquire calls by owner token, with when each was over.
fn calls(events: &[Event]) -> HashMap<&str, Call<'_>> {
    let mut by_hold: HashMap<&str, &str> = HashMap::new();
    let mut calls: HashMap<&str, Call<'_>> = HashMap::new();
    // Calls that named no owner at their start, by attempt id.
    let mut anonymous: HashMap<&str, (&str, &str, Nanos)> = HashMap::new();
    for e in events {
        match &e.what {
            What::AcquireStart {
                key,
                hold,
                owner: Some(owner),
            } => {
                by_hold.insert(hold, owner);
                calls.insert(
                    owner,
                    Call {
                        key,
                        hold,
                        worker: &e.src,
                        start: e.t,
                        over: None,
                    },
                );
            }
            What::AcquireStart {
                key,
                hold,
                owner: None,
            } => {
                anonymous.insert(hold, (key, &e.src, e.t));
            }
            _ => {}
        }
    }
    // Their winning attempts' owners.
    for e in events {
        if let What::Won {
            key,
            hold,
            owner: Some(owner),
            ..
        } = &e.what
            && !by_hold.contains_key(hold.as_str())
        {
            let (key, worker, start) = anonymous
                .get(hold.as_str())
                .copied()
                .unwrap_or((key, &e.src, e.t));
            by_hold.insert(hold, owner);
            calls.insert(
                owner,
                Call {
                    key,
                    hold,
                    worker,
                    start,
                    over: None,
                },
            );
        }
    }
    for e in events {
        let hold = match &e.what {
            What::Release { hold, .. } | What::Failed { hold, .. } => hold.as_str(),
            _ => continue,
        };
        if let Some(call) = by_hold.get(hold).and_then(|owner| calls.get_mut(owner)) {
            call.over = Some(call.over.map_or(e.t, |t| t.min(e.t)));
        }
    }
    calls
}

/// Where the span judged for a probe at `t` starts: the call's end `over`,
/// or the end of the last fault since then that could have delayed its
/// undo on `node` (a fault of the node or its link, or a pause of the
/// call's worker). `None` while such a fault is still on at `t`, when the
/// worker was killed before its undo was surely through, or when a
/// failover of `node` may have brought the key back.
fn judged_from(
    call: &Call<'_>,
    over: Nanos,
    t: Nanos,
    node: usize,
    faults: &[FaultSpan],
) -> Option<Nanos> {
    let mut from = over;
    for f in faults.iter().take_while(|f| f.start <= t) {
        if !hinders(f, node, call.worker) {
            continue;
        }
        if f.kind == FAILOVER && call.start < f.start && f.start <= over + BOUND {
            return None;
        }
        if f.end < over {
            continue;
        }
        if f.kind == CLIENT_CRASH {
            // Killed: only an undo due before the kill can be judged.
            if f.start.saturating_sub(from) <= BOUND {
                return None;
            }
            continue;
        }
        if f.end >= t {
            return None;
        }
        from = from.max(f.end);
    }
    Some(from)
}

/// Whether fault `f` can delay an undo of `worker`'s call on `node`.
fn hinders(f: &FaultSpan, node: usize, worker: &str) -> bool {
    let target = f.target.as_str();
    let on_node = target
        .strip_prefix('n')
        .and_then(|rest| rest.split(':').next())
        .and_then(|i| i.parse::<usize>().ok())
        == Some(node);
    on_node || target == worker
}
