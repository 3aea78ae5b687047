//! `quorumlock adopt` for a brand-new deployment (only with its
//! confirmation flag, always with its warning), and `status` without names
//! listing what is held.

mod common;

use common::{code, output, text};
use quorumlock::redis;
use quorumlock_testbed::Testbed;

#[test]
fn adopt_needs_its_flag_and_lets_new_servers_vote_at_once() {
    let testbed = Testbed::start_unadopted(3).expect("nodes");
    // Fresh servers: quarantined.
    let refused = output(&testbed, &["run", "-n", "first", "--", "true"]);
    assert_eq!(code(refused.status), 69, "{refused:?}");
    assert!(text(&refused.stderr).contains("quarantined"), "{refused:?}");

    let unconfirmed = output(&testbed, &["adopt"]);
    assert_eq!(code(unconfirmed.status), 64, "{unconfirmed:?}");
    let stderr = text(&unconfirmed.stderr);
    assert!(
        stderr.contains("Only for servers that have never held this deployment's locks")
            && stderr.contains("--confirm-new-servers"),
        "{stderr}"
    );
    let still = output(&testbed, &["run", "-n", "first", "--", "true"]);
    assert_eq!(code(still.status), 69, "nothing adopted: {still:?}");

    let adopted = output(&testbed, &["adopt", "--confirm-new-servers"]);
    assert_eq!(code(adopted.status), 0, "{adopted:?}");
    assert!(
        text(&adopted.stderr).contains("Only for servers"),
        "the warning every time"
    );
    assert_eq!(
        text(&adopted.stdout).matches(": adopted").count(),
        3,
        "{adopted:?}"
    );
    let now = output(&testbed, &["run", "-n", "first", "--", "true"]);
    assert_eq!(code(now.status), 0, "votes at once: {now:?}");
}

#[test]
fn adopt_refuses_a_node_that_holds_keys() {
    let testbed = Testbed::start_unadopted(3).expect("nodes");
    let mut conn = testbed.node(1).connection().expect("connect");
    redis::cmd("SET")
        .arg("left-over")
        .arg("1")
        .query::<()>(&mut conn)
        .expect("SET");
    let out = output(&testbed, &["adopt", "--confirm-new-servers"]);
    assert_eq!(code(out.status), 1, "{out:?}");
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches(": adopted").count(), 2, "{stdout}");
    assert!(
        stdout.contains(&format!("{}: refused", testbed.node(1).url())),
        "{stdout}"
    );
}

#[test]
fn status_without_names_lists_the_held_names() {
    let testbed = Testbed::start(3).expect("nodes");
    let holders = [
        common::hold(&testbed, &[], "list:a"),
        common::hold(&testbed, &[], "list:b"),
    ];
    // Not locks: an application's hash without a TTL, a plain string.
    testbed.expect_left("app:hash");
    let mut conn = testbed.node(0).connection().expect("connect");
    redis::pipe()
        .cmd("HSET")
        .arg("app:hash")
        .arg("owner")
        .arg("someone")
        .cmd("SET")
        .arg("app:string")
        .arg("x")
        .query::<()>(&mut conn)
        .expect("plant");

    let table = output(&testbed, &["status"]);
    assert_eq!(code(table.status), 0, "{table:?}");
    let stdout = text(&table.stdout);
    let listed: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        listed.contains(&"list:a") && listed.contains(&"list:b"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("app:") && !stdout.contains("quorumlock:"),
        "{stdout}"
    );

    let json = output(&testbed, &["status", "--json"]);
    let listing: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(listing["names"], serde_json::json!(["list:a", "list:b"]));
    assert_eq!(listing["complete"], true);
    assert_eq!(
        listing["rows"].as_array().expect("rows").len(),
        6,
        "2 names × 3 nodes"
    );

    // Bounded: --limit stops the listing, and says so.
    let limited = output(&testbed, &["status", "--json", "--limit", "1"]);
    let listing: serde_json::Value = serde_json::from_slice(&limited.stdout).expect("JSON");
    assert_eq!(listing["names"].as_array().expect("names").len(), 1);
    assert_eq!(listing["complete"], false, "{listing}");
    let limited = output(&testbed, &["status", "--limit", "1"]);
    assert!(text(&limited.stderr).contains("incomplete"), "{limited:?}");
    drop(holders);

    // Nothing held: says so.
    let empty = Testbed::start(3).expect("nodes");
    let none = output(&empty, &["status"]);
    assert_eq!(text(&none.stdout).trim(), "no names held");
}
