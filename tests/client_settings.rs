//! Nodes from clients the caller configured (`LockConfigBuilder::node_client`)
//! and addresses a URL can spell but tests rarely use: RESP3, IPv6, a unix
//! socket with an ACL user and password. Each runs acquire with a waiter
//! woken by the release, a fencing token and release on real servers.

use std::time::Duration;

use quorumlock::{LockConfig, LockConfigBuilder, MultiLock, Wait};
use quorumlock_testbed::{NodeOptions, Testbed};
use redis::{ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo};

fn builder() -> LockConfigBuilder {
    LockConfig::builder()
        .ttl(Duration::from_secs(30))
        .node_timeout(Duration::from_secs(1))
}

/// Acquire, a waiter woken by the release, a token each, release.
async fn exercise(lock: MultiLock) {
    let guard = lock.try_acquire("ledger").await.expect("acquire");
    let first = guard.fencing_token().await.expect("token");
    let other = lock.clone();
    let waiter = tokio::spawn(async move {
        other
            .acquire("ledger", Wait::up_to(Duration::from_secs(5)))
            .await
    });
    // Let the waiter register and fail once before the release.
    tokio::task::yield_now().await;
    guard.release().await;
    let next = waiter.await.expect("join").expect("the waiter gets it");
    assert!(next.fencing_token().await.expect("token") > first);
    next.release().await;
    let errors: u64 = lock.stats().nodes.iter().map(|n| n.errors).sum();
    assert_eq!(errors, 0, "no node errors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_nodes() {
    let testbed = Testbed::start(3).expect("testbed");
    let mut b = builder();
    for node in testbed.nodes() {
        let info = ConnectionAddr::Tcp("127.0.0.1".into(), node.port())
            .into_connection_info()
            .expect("info")
            .set_redis_settings(
                RedisConnectionInfo::default().set_protocol(ProtocolVersion::RESP3),
            );
        b = b.node_client(redis::Client::open(info).expect("client"));
    }
    exercise(MultiLock::new(b.build().expect("valid"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_nodes() {
    let options = NodeOptions {
        extra_config: vec![("bind".into(), "127.0.0.1 ::1".into())],
        ..NodeOptions::default()
    };
    let testbed = Testbed::start_with(3, options).expect("testbed");
    let urls: Vec<String> = testbed
        .nodes()
        .iter()
        .map(|n| format!("redis://[::1]:{}", n.port()))
        .collect();
    let lock = MultiLock::new(builder().nodes(urls.clone()).build().expect("valid"));
    let shown: Vec<&str> = lock.config().node_urls().collect();
    assert_eq!(shown, urls);
    exercise(lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_sockets_with_an_acl_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut b = builder();
    let mut testbeds = Vec::new();
    for i in 0..3 {
        let socket = dir.path().join(format!("node{i}.sock"));
        let options = NodeOptions {
            extra_config: vec![
                ("unixsocket".into(), socket.display().to_string()),
                ("unixsocketperm".into(), "700".into()),
                ("user".into(), "locker on >unix-secret ~* &* +@all".into()),
            ],
            ..NodeOptions::default()
        };
        testbeds.push(Testbed::start_with(1, options).expect("testbed"));
        let info = ConnectionAddr::Unix(socket)
            .into_connection_info()
            .expect("info")
            .set_redis_settings(
                RedisConnectionInfo::default()
                    .set_username("locker")
                    .set_password("unix-secret"),
            );
        b = b.node_client(redis::Client::open(info).expect("client"));
    }
    let lock = MultiLock::new(b.build().expect("valid"));
    assert!(!format!("{lock:?} {:?}", lock.config()).contains("unix-secret"));
    exercise(lock).await;
}
