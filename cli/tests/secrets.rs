//! Secrets stay out of the command and out of argv: the command gets the
//! name, the fencing token and the owner, never the node URLs (unless
//! `--pass-nodes`, redacted unless asked), and a password given with
//! `--nodes` on the command line draws a warning.

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

/// The command's environment, one `KEY=value` per line.
fn child_env(nodes: &str, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .env("QUORUMLOCK_NODES", nodes)
        .arg("run")
        .args(extra)
        .args(["secret-test", "--", "env"])
        .output()
        .expect("run");
    (code(out.status), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_command_gets_the_lock_and_no_node_urls() {
    let (_testbed, nodes) = guarded_nodes();
    let (status, env, stderr) = child_env(&nodes, &[]);
    assert_eq!(status, 0, "{stderr}");
    for var in [
        "QUORUMLOCK_NAME=secret-test",
        "QUORUMLOCK_FENCING_TOKEN=",
        "QUORUMLOCK_OWNER=",
    ] {
        assert!(env.contains(var), "{var} in {env}");
    }
    assert!(!env.contains("QUORUMLOCK_NODES"), "{env}");
    assert!(!env.contains(PASSWORD), "no password anywhere: {env}");
    assert!(
        !stderr.contains("warning"),
        "nodes from the environment: {stderr}"
    );

    // --pass-nodes: the URLs, passwords replaced.
    let (status, env, _) = child_env(&nodes, &["--pass-nodes"]);
    assert_eq!(status, 0);
    let passed = env
        .lines()
        .find_map(|l| l.strip_prefix("QUORUMLOCK_NODES="))
        .expect("passed on");
    assert_eq!(passed.split(',').count(), 3, "{passed}");
    assert!(
        passed.contains("locker:***@") && !passed.contains(PASSWORD),
        "{passed}"
    );

    // Passwords only when asked for by name.
    let (status, env, _) = child_env(&nodes, &["--pass-nodes=with-passwords"]);
    assert_eq!(status, 0);
    assert!(env.contains(&format!("QUORUMLOCK_NODES={nodes}")), "{env}");
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
