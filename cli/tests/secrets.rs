//! Secrets stay out of argv: a password given with `--nodes` on the
//! command line draws a warning.

mod common;

use std::process::Command;

use common::{BIN, code, text};
use quorumlock_testbed::{NodeOptions, Testbed};

const PASSWORD: &str = "s3cret-pw";

/// Nodes that take a user `locker` with a password.
fn guarded_nodes() -> (Testbed, String) {
    let options = NodeOptions {
        extra_config: vec![("user".into(), format!("locker on >{PASSWORD} ~* &* +@all"))],
        ..NodeOptions::default()
    };
    let testbed = Testbed::start_with(3, options).expect("nodes");
    let urls: Vec<String> = testbed
        .nodes()
        .iter()
        .map(|n| format!("redis://locker:{PASSWORD}@127.0.0.1:{}", n.port()))
        .collect();
    (testbed, urls.join(","))
}

#[test]
fn a_password_on_the_command_line_draws_a_warning() {
    let (_testbed, nodes) = guarded_nodes();
    let out = Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--nodes", &nodes, "run", "argv", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(code(out.status), 0, "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("warning")
            && stderr.contains("QUORUMLOCK_NODES")
            && stderr.contains("--config"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "the warning shows no password");
    // Without a password, no warning.
    let plain = nodes.replace(&format!("locker:{PASSWORD}@"), "");
    let out = Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--nodes", &plain, "status", "x"])
        .output()
        .expect("status");
    assert!(!text(&out.stderr).contains("warning"), "{out:?}");
}
