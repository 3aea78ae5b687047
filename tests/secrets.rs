//! No password from a node URL appears in anything the library prints:
//! `Debug` of the builder, the config, the lock service, guards and stats;
//! `node_urls()`; and `Display`/`Debug` of every error that names a node,
//! from configuration errors to a refused login on a real server.

use std::time::Duration;

use quorumlock::{LockConfig, MultiLock};
use quorumlock_testbed::{NodeOptions, Testbed};

const SECRET: &str = "hunter2-planted";
const WRONG: &str = "wrong-planted";

/// Fails naming the text if it carries either planted password.
fn assert_clean(what: &str, text: &str) {
    for secret in [SECRET, WRONG] {
        assert!(!text.contains(secret), "{what} shows a password: {text}");
    }
}

fn url(user_password: &str, port: u16) -> String {
    format!("redis://{user_password}@127.0.0.1:{port}")
}

#[test]
fn configuration_and_its_errors_show_no_password() {
    let builder = LockConfig::builder()
        .node(url(&format!("app:{SECRET}"), 1))
        .node(url(&format!(":{SECRET}"), 2))
        .node(format!("redis+unix:///tmp/quorumlock.sock?pass={SECRET}"));
    assert_clean("builder Debug", &format!("{builder:?}"));
    let config = builder.clone().build().expect("valid");
    assert_clean("config Debug", &format!("{config:?}"));
    for shown in config.node_urls() {
        assert_clean("node_urls()", shown);
    }
    assert_eq!(
        config.node_urls().next(),
        Some("redis://app:***@127.0.0.1:1")
    );

    let errors = [
        // The same server twice.
        builder
            .clone()
            .node(url(&format!("other:{SECRET}"), 1))
            .build(),
        // A URL that does not parse.
        LockConfig::builder()
            .node(format!("redis://app:{SECRET}@127.0.0.1:notaport"))
            .build(),
        // A durable node that is not a node.
        builder
            .clone()
            .durable_nodes([url(&format!("app:{SECRET}"), 9)])
            .build(),
    ];
    for error in errors {
        let error = error.expect_err("refused");
        assert_clean("ConfigError Display", &error.to_string());
        assert_clean("ConfigError Debug", &format!("{error:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_servers_with_passwords_shows_none_of_them() {
    // An ACL user with a password next to the default user (which the
    // testbed uses to start and inspect the node).
    let options = NodeOptions {
        extra_config: vec![("user".into(), format!("app on >{SECRET} ~* &* +@all"))],
        ..NodeOptions::default()
    };
    let testbed = Testbed::start_with(3, options).expect("testbed");
    let ports: Vec<u16> = testbed.nodes().iter().map(|n| n.port()).collect();
    let lock_for = |password: &str| {
        let config = LockConfig::builder()
            .nodes(ports.iter().map(|p| url(&format!("app:{password}"), *p)))
            .ttl(Duration::from_secs(30))
            .node_timeout(Duration::from_secs(1))
            .build()
            .expect("valid");
        MultiLock::new(config)
    };

    let lock = lock_for(SECRET);
    assert_clean("MultiLock Debug", &format!("{lock:?}"));
    let guard = lock.try_acquire("payroll").await.expect("logged in, free");
    assert_clean("guard Debug", &format!("{guard:?}"));
    assert_clean("stats Debug", &format!("{:?}", lock.stats()));
    let released = guard.release().await;
    assert_clean("release report", &format!("{released:?}"));

    // A refused login: the error names each node and what it said.
    let refused = lock_for(WRONG);
    let error = refused
        .try_acquire("payroll")
        .await
        .expect_err("wrong password");
    let shown = error.to_string();
    assert!(shown.contains("127.0.0.1"), "names the nodes: {shown}");
    assert_clean("Error Display", &shown);
    assert_clean("Error Debug", &format!("{error:?}"));
    assert_clean("stats Debug", &format!("{:?}", refused.stats()));
}
