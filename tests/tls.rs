//! TLS nodes (feature `tls-rustls`): real redis-servers with `tls-port`,
//! certificates made by the test with the `openssl` command line tool (a
//! private CA, a server certificate for 127.0.0.1, a client certificate,
//! and a CA nobody uses). A lock works over TLS with a private CA given
//! through `LockConfigBuilder::node_client`; a server that requires client
//! certificates refuses a client without one and accepts one with it; a
//! wrong CA is a typed error, and the client does not reconnect in a loop.

use std::time::{Duration, Instant};

use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind, NodeOutcome, Wait};
use quorumlock_testbed::pki::Pki;
use quorumlock_testbed::{Proxy, Testbed};
use redis::{ClientTlsConfig, IntoConnectionInfo, TlsCertificates};

/// One redis-server with a plain port (for the testbed) and a TLS port.
struct TlsNode {
    /// Keeps the server running (stopped by pid when dropped).
    _testbed: Testbed,
    tls_port: u16,
}

impl TlsNode {
    fn start(pki: &Pki, client_certificates: bool) -> TlsNode {
        let (options, tls_port) = pki.tls_options(client_certificates).expect("TLS options");
        TlsNode {
            _testbed: Testbed::start_with(1, options).expect("TLS redis-server"),
            tls_port,
        }
    }

    /// A client of the TLS port trusting `ca`, with a client certificate
    /// when `pki` gives one.
    fn client(&self, ca: &[u8], client: Option<&Pki>) -> redis::Client {
        let info = format!("rediss://127.0.0.1:{}", self.tls_port)
            .into_connection_info()
            .expect("URL");
        let client_tls = client.map(|pki| ClientTlsConfig {
            client_cert: pki.pem("client.crt").expect("a PEM file"),
            client_key: pki.pem("client.key").expect("a PEM file"),
        });
        redis::Client::build_with_tls(
            info,
            TlsCertificates {
                client_tls,
                root_cert: Some(ca.to_vec()),
            },
        )
        .expect("TLS client")
    }
}

fn lock_over(clients: Vec<redis::Client>) -> MultiLock {
    lock_with(clients, true)
}

/// With wake-ups off there is one connection per node: the votes'.
fn lock_with(clients: Vec<redis::Client>, wake_ups: bool) -> MultiLock {
    let mut builder = LockConfig::builder()
        .wake_ups(wake_ups)
        .ttl(Duration::from_secs(30))
        .node_timeout(Duration::from_secs(1));
    for client in clients {
        builder = builder.node_client(client);
    }
    MultiLock::new(builder.build().expect("valid"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_over_tls_nodes_with_a_private_ca() {
    let pki = Pki::new().expect("certificates (apt-get install openssl)");
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::start(&pki, false)).collect();
    let ca = pki.pem("ca.crt").expect("a PEM file");
    let lock = lock_over(nodes.iter().map(|n| n.client(&ca, None)).collect());
    let urls: Vec<String> = lock.config().node_urls().map(String::from).collect();
    assert!(
        urls.iter().all(|u| u.starts_with("rediss://127.0.0.1:")),
        "{urls:?}"
    );

    let guard = lock.try_acquire("ledger").await.expect("over TLS");
    let token = guard.fencing_token().await.expect("a token over TLS");
    assert!(token >= 1);
    assert!(guard.held_nodes().count() >= 2, "a quorum reached over TLS");
    guard.release().await;
    let next = lock.try_acquire("ledger").await.expect("free again");
    assert!(next.fencing_token().await.expect("token") > token);
    next.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_client_certificates() {
    let pki = Pki::new().expect("certificates (apt-get install openssl)");
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::start(&pki, true)).collect();
    let ca = pki.pem("ca.crt").expect("a PEM file");

    let without = lock_over(nodes.iter().map(|n| n.client(&ca, None)).collect());
    let error = without
        .try_acquire("ledger")
        .await
        .expect_err("no client certificate");
    println!("without a client certificate: {error}");
    assert_failed_everywhere(&error);

    let with = lock_over(nodes.iter().map(|n| n.client(&ca, Some(&pki))).collect());
    let guard = with.try_acquire("ledger").await.expect("with one");
    guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_typed_error_without_a_reconnect_storm() {
    let pki = Pki::new().expect("certificates (apt-get install openssl)");
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::start(&pki, false)).collect();
    let wrong = pki.pem("other-ca.crt").expect("a PEM file");
    // Each TLS port behind a proxy that counts the connections made to it
    // (a failed handshake never shows in the server's own counters).
    let proxies: Vec<Proxy> = nodes
        .iter()
        .map(|n| Proxy::start(([127, 0, 0, 1], n.tls_port).into()).expect("proxy"))
        .collect();
    let clients = proxies
        .iter()
        .map(|p| {
            let info = format!("rediss://127.0.0.1:{}", p.addr().port())
                .into_connection_info()
                .expect("URL");
            redis::Client::build_with_tls(
                info,
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(wrong.clone()),
                },
            )
            .expect("TLS client")
        })
        .collect();
    // Wake-ups off: this counts the votes' connection (the subscriber's
    // reconnects are tests/hostile.rs's).
    let lock = lock_with(clients, false);

    let began = Instant::now();
    let error = lock
        .acquire("ledger", Wait::up_to(Duration::from_secs(1)))
        .await
        .expect_err("the server's certificate is not trusted");
    let took = began.elapsed();
    let made = proxies[0].accepted();
    let Error::WaitBudgetExhausted { attempts, last, .. } = &error else {
        panic!("expected WaitBudgetExhausted, got {error}");
    };
    println!(
        "wrong CA: {attempts} attempts in {took:?}, {made} connections to one node ({:.1}/s): {last}",
        made as f64 / took.as_secs_f64()
    );
    assert_failed_everywhere(last);
    assert!(
        made <= 12,
        "connects back off (25 ms doubling to 1 s): {made} in about 1 s for {attempts} attempts"
    );
}

/// No node voted or was contended: each failed, or was not awaited.
fn assert_failed_everywhere(error: &Error) {
    let reports = error.node_reports().expect("per-node reports");
    for report in reports.iter() {
        match &report.outcome {
            NodeOutcome::Failed(e) => assert!(
                matches!(e.kind(), NodeErrorKind::Unreachable | NodeErrorKind::Other),
                "{e}"
            ),
            // Decided (out of reach) before this node's handshake failed.
            NodeOutcome::NoReplyBeforeDecision => {}
            other => panic!("{}: expected a failure, got {other:?}", report.node),
        }
    }
}
