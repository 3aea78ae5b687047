use std::collections::HashSet;

use tokio::sync::watch;
use tokio::time::Instant;

use super::subscriber::Wanted;
use super::waiter::{Awaited, Heard};
use super::*;
use crate::error::{Error, NodeOutcome, NodeReport, NodeReports};

#[test]
fn announcements_count_from_every_node_however_many() {
    // 200 nodes, then the local counter; the last 150 nodes announced.
    let seen: Box<[u64]> = vec![0; 201].into();
    let mut now = vec![0u64; 201];
    for n in &mut now[50..200] {
        *n = 1;
    }
    let (_tx, rx) = watch::channel(Box::<[u64]>::from(now));
    let heard = Heard::since(&[rx], &[seen]);
    assert!(heard.quorum_may_be_free(150, 0));
    assert!(!heard.quorum_may_be_free(151, 0));
    // Sitting one release out, one each is not enough.
    assert!(!heard.quorum_may_be_free(1, 1));
    assert!(!heard.node(0) && heard.node(50) && !heard.node(200));
}

#[test]
fn a_channel_lingers_until_its_time_unless_a_waiter_comes_back() {
    let mut wanted = Wanted::default();
    let now = Instant::now();
    for c in ["a", "b", "c"] {
        wanted.apply(Change::Subscribe(c.into()));
    }
    wanted.linger("a".into(), now);
    wanted.linger("b".into(), now + LINGER);
    wanted.linger("c".into(), now);
    // A waiter of `c` came back: it stays, no longer lingering.
    wanted.apply(Change::Subscribe("c".into()));
    assert_eq!(wanted.lingered(now), vec!["a".to_string()]);
    assert!(wanted.channels.contains("b") && wanted.channels.contains("c"));
    assert!(!wanted.channels.contains("a"));
    assert_eq!(wanted.lingered(now + LINGER), vec!["b".to_string()]);
    assert!(wanted.lingering.is_empty());
}

#[test]
fn a_new_connection_subscribes_to_no_lingering_channel() {
    let mut wanted = Wanted::default();
    wanted.apply(Change::Subscribe("kept".into()));
    wanted.apply(Change::Subscribe("left".into()));
    wanted.linger("left".into(), Instant::now() + LINGER);
    wanted.end_lingering();
    assert_eq!(wanted.channels, HashSet::from(["kept".to_string()]));
    // While disconnected, a change applies as it is.
    wanted.apply(Change::Unsubscribe("kept".into()));
    assert!(wanted.channels.is_empty());
}

#[test]
fn a_release_by_this_lock_service_needs_no_node() {
    // 3 nodes, then the local counter.
    let (_tx, rx) = watch::channel(Box::<[u64]>::from(vec![0, 0, 0, 1]));
    let heard = Heard::since(&[rx], &[vec![0; 4].into()]);
    assert!(heard.quorum_may_be_free(3, 1));
    assert!(!heard.node(0));
}

fn contended(outcomes: Vec<NodeOutcome>) -> Error {
    let reports = outcomes
        .into_iter()
        .enumerate()
        .map(|(i, outcome)| NodeReport {
            node: format!("redis://node{i}"),
            outcome,
        })
        .collect();
    Error::Contended {
        key: "job".into(),
        free_in: None,
        nodes: NodeReports::new(reports),
    }
}

fn held() -> NodeOutcome {
    NodeOutcome::HeldByOther { pttl: None }
}

#[test]
fn a_gate_the_attempt_did_not_hear_from_is_still_watched() {
    // Decided at the quorum before the gate (node 0) answered: its
    // release may be on its way, so a refusal there after other nodes'
    // notices is no lost race. (Taken for free, the gate once made such a
    // waiter sit its own release out and sleep its whole backoff.)
    let error = contended(vec![NodeOutcome::NoReplyBeforeDecision, held(), held()]);
    let awaited = Awaited::after(Some(&error), 2, Some(0), true);
    assert_eq!(
        awaited,
        Awaited {
            needed: 2,
            skip: 0,
            gate: Some(0)
        }
    );
    // A failed gate too.
    let failed = NodeOutcome::Failed(NodeError::new(
        &Arc::from("redis://node0"),
        crate::error::NodeErrorKind::Timeout,
        "slow",
    ));
    let error = contended(vec![failed, held(), held()]);
    assert_eq!(Awaited::after(Some(&error), 2, Some(0), true).gate, Some(0));
}

#[test]
fn a_gate_the_attempt_won_is_free_and_not_watched() {
    // Won (and rolled back) at the gate: a refusal there later is a race
    // lost to another waiter, whatever the notices.
    let error = contended(vec![NodeOutcome::Won, held(), held()]);
    let awaited = Awaited::after(Some(&error), 2, Some(0), false);
    assert_eq!(
        awaited,
        Awaited {
            needed: 1,
            skip: 1,
            gate: None
        }
    );
}

#[test]
fn a_quorum_of_notices_is_needed_from_the_nodes_found_held() {
    // Refused at the gate alone: its notice is enough.
    let gated = contended(vec![held()]);
    assert_eq!(Awaited::after(Some(&gated), 3, Some(0), true).needed, 1);
    // 5 nodes, 1 won, 4 held: 2 more make a quorum of 3.
    let error = contended(vec![NodeOutcome::Won, held(), held(), held(), held()]);
    assert_eq!(Awaited::after(Some(&error), 3, None, true).needed, 2);
    // Before any attempt: a quorum of notices.
    let first = Awaited::after(None, 3, None, true);
    assert_eq!((first.needed, first.gate), (3, None));
}
