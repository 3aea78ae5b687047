use std::collections::HashSet;

use tokio::sync::watch;
use tokio::time::Instant;

use super::subscriber::Wanted;
use super::waiter::Heard;
use super::*;

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
