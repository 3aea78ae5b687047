//! TLS nodes (feature `tls-rustls`): real redis-servers with `tls-port`,
//! certificates made by the test with the `openssl` command line tool (a
//! private CA, a server certificate for 127.0.0.1, a client certificate,
//! and a CA nobody uses). A lock works over TLS with a private CA given
//! through `LockConfigBuilder::node_client`; a server that requires client
//! certificates refuses a client without one and accepts one with it; a
//! wrong CA is a typed error, and the client does not reconnect in a loop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind, NodeOutcome, Wait};
use quorumlock_testbed::{NodeOptions, Proxy, Testbed};
use redis::{ClientTlsConfig, IntoConnectionInfo, TlsCertificates};

/// The certificates of one test, in a directory removed with it.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn pem(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).expect("read a PEM file")
    }

    /// A CA, a server certificate it signs (for 127.0.0.1 and localhost),
    /// a client certificate it signs, and another CA.
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        let dir = pki.dir.path();
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let subject = format!("/CN=quorumlock test {ca}");
            let keyout = format!("{ca}.key");
            let out = format!("{ca}.crt");
            let mut args = vec!["req", "-x509"];
            args.extend(key);
            args.extend([
                "-keyout", &keyout, "-out", &out, "-days", "2", "-subj", &subject,
            ]);
            openssl(dir, &args);
        }
        for (leaf, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
            ),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            std::fs::write(dir.join(format!("{leaf}.ext")), ext).expect("write ext");
            let (keyout, csr) = (format!("{leaf}.key"), format!("{leaf}.csr"));
            let subject = format!("/CN=quorumlock test {leaf}");
            let mut args = vec!["req"];
            args.extend(key);
            args.extend(["-keyout", &keyout, "-out", &csr, "-subj", &subject]);
            openssl(dir, &args);
            let (crt, ext) = (format!("{leaf}.crt"), format!("{leaf}.ext"));
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    "2",
                    "-extfile",
                    &ext,
                ],
            );
        }
        pki
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free port on 127.0.0.1 for a server's TLS listener.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// One redis-server with a plain port (for the testbed) and a TLS port.
struct TlsNode {
    /// Keeps the server running (stopped by pid when dropped).
    _testbed: Testbed,
    tls_port: u16,
}

impl TlsNode {
    fn start(pki: &Pki, client_certificates: bool) -> TlsNode {
        let tls_port = free_port();
        let file = |f: &str| pki.path(f).display().to_string();
        let options = NodeOptions {
            extra_config: vec![
                ("tls-port".into(), tls_port.to_string()),
                ("tls-cert-file".into(), file("server.crt")),
                ("tls-key-file".into(), file("server.key")),
                ("tls-ca-cert-file".into(), file("ca.crt")),
                (
                    "tls-auth-clients".into(),
                    if client_certificates { "yes" } else { "no" }.into(),
                ),
            ],
            ..NodeOptions::default()
        };
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
            client_cert: pki.pem("client.crt"),
            client_key: pki.pem("client.key"),
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
    let pki = Pki::new();
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::start(&pki, false)).collect();
    let ca = pki.pem("ca.crt");
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
    let pki = Pki::new();
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::start(&pki, true)).collect();
    let ca = pki.pem("ca.crt");

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
    let pki = Pki::new();
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::start(&pki, false)).collect();
    let wrong = pki.pem("other-ca.crt");
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
