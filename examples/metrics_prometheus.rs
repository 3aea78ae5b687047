//! The `metrics` feature with a Prometheus exporter: quorumlock records
//! through the `metrics` facade, so whatever recorder the program installed
//! gets its counters, histograms and gauge (the crate docs' "Metrics"
//! section lists them). Here the recorder is
//! `metrics-exporter-prometheus`, and the text a scrape would get is
//! printed after one acquire and release.
//!
//! ```text
//! cargo run --example metrics_prometheus --features metrics -- NODE_URL NODE_URL NODE_URL
//! cargo run --example metrics_prometheus --features metrics -- \
//!     redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```
//!
//! In a service, serve `handle.render()` on your HTTP server's `/metrics`
//! route, or turn on the exporter's `http-listener` feature and call
//! `PrometheusBuilder::new().with_http_listener(addr).install()` to have it
//! serve one itself. Your `Cargo.toml` needs
//! `quorumlock = { git = "…", features = ["metrics"] }` and
//! `metrics-exporter-prometheus = { version = "0.18", default-features = false }`
//! (a version that records through `metrics` 0.24, as quorumlock does: with
//! another, nothing arrives).

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use quorumlock::{LockConfig, MultiLock, Wait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<String> = std::env::args().skip(1).collect();
    // First: what is recorded before a recorder is installed goes nowhere.
    let handle = PrometheusBuilder::new().install_recorder()?;

    let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    let guard = lock
        .acquire("report", Wait::up_to(Duration::from_secs(2)))
        .await?;
    guard.release().await;

    // Prometheus's text format, e.g.
    // quorumlock_acquires_total{outcome="acquired"} 1
    print!("{}", handle.render());
    // Let a release still on its way to a slow node finish before the runtime ends.
    lock.settle(Duration::from_secs(2)).await;
    Ok(())
}
