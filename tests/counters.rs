//! Fencing counters read from a node are validated before use: a value
//! that is not a whole number below 2^53 (exact in the scripts' Lua
//! numbers) is a typed error naming the node, is never copied to the
//! honest nodes, and the name stays usable.

mod common;

use quorumlock::{Error, NodeErrorKind, NodeOutcome, Quorum};
use quorumlock_testbed::{RedisNode, Testbed};

const NAME: &str = "account";
const COUNTER: &str = "quorumlock:fence:account";

/// What the library never accepts as a counter: 2^53 − 1 and above (no room
/// for a next token exact in Lua), 2^63 − 1, negatives, fractions, text.
const BAD: [&str; 6] = [
    "9007199254740991",
    "9007199254740992",
    "9223372036854775807",
    "-1",
    "1.5",
    "abc",
];

fn get_raw(node: &RedisNode, key: &str) -> Option<String> {
    let mut conn = node.connection().expect("inspect node");
    redis::cmd("GET").arg(key).query(&mut conn).expect("GET")
}

/// The honest nodes' counters: whole numbers below 2^53.
fn assert_honest(testbed: &Testbed, at_least: u64) {
    for node in &testbed.nodes()[..2] {
        // Stored as `<value> <epoch id>`.
        let raw = get_raw(node, COUNTER).expect("an honest node has its counter");
        let value: u64 = raw
            .split(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a whole number");
        assert!(
            value >= at_least && value < 1 << 53,
            "{}: {raw}",
            node.url()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_counter_read_by_an_acquire_is_a_typed_error_and_the_name_stays_usable() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    let strict = common::connected(common::lock_with(&testbed, |b| b.quorum(Quorum::All))).await;
    // A lock service's acquires read the counters once one of its holders
    // asked for a token (the strict one here; `lock` asks below, and reads
    // them with a read of its own first).
    let first = strict.try_acquire(NAME).await.expect("free");
    let mut last = first.fencing_token().await.expect("token");
    first.release().await;
    common::wait_until_gone(&testbed, NAME, "the first holder released").await;

    for bad in BAD {
        common::set_on(testbed.node(2), COUNTER, bad);
        // Every node needed: the bad node's answer is the refusal, named.
        match strict.try_acquire(NAME).await {
            Err(Error::QuorumNotReached { nodes, .. }) => {
                let report = &nodes.as_slice()[2];
                match &report.outcome {
                    NodeOutcome::Failed(e) => {
                        assert_eq!(e.kind(), NodeErrorKind::InvalidCounter, "{bad}: {e}");
                        assert_eq!(e.node(), testbed.node(2).url(), "{bad}: {e}");
                        assert!(e.to_string().contains(bad), "{bad}: {e}");
                    }
                    other => panic!("{bad}: expected the node's error, got {other:?}"),
                }
            }
            other => panic!("{bad}: expected QuorumNotReached, got {other:?}"),
        }
        // The refused attempt's rollback reaches the nodes that had not
        // answered yet in the background (on the strict service's own
        // connections): wait for it before the other service tries.
        common::wait_until_gone(&testbed, NAME, "the refused attempt rolled back").await;
        // A majority: the name is still usable and its token still rises.
        let guard = lock.try_acquire(NAME).await.expect("the honest majority");
        let token = guard
            .fencing_token()
            .await
            .expect("token from the honest nodes");
        assert!(token > last, "{bad}: {token} after {last}");
        assert!(token < 1 << 53);
        last = token;
        guard.release().await;
        assert_honest(&testbed, last);
        assert_eq!(get_raw(testbed.node(2), COUNTER).as_deref(), Some(bad));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_counter_met_by_the_raise_is_never_raised_or_copied() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    let first = lock.try_acquire(NAME).await.expect("free");
    let mut last = first.fencing_token().await.expect("token");
    first.release().await;

    for bad in BAD {
        let guard = lock.try_acquire(NAME).await.expect("free");
        // Turned bad after the acquire read it: the raise meets it.
        common::set_on(testbed.node(2), COUNTER, bad);
        let token = guard
            .fencing_token()
            .await
            .expect("token from the honest nodes");
        assert!(token > last, "{bad}: {token} after {last}");
        last = token;
        guard.release().await;
        assert_honest(&testbed, last);
        assert_eq!(
            get_raw(testbed.node(2), COUNTER).as_deref(),
            Some(bad),
            "the raise never overwrites a value it cannot read"
        );
        common::set_on(testbed.node(2), COUNTER, last.to_string());
    }
}
