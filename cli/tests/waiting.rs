//! A waiting `run` says why, after a second and once per change of reason
//! (held by whom, nodes quarantined, nodes unreachable); `--quiet` says
//! nothing; with every node down it does not wait silently.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{BIN, code, command, output, spawn_logged, text, wait_for_text};
use quorumlock_testbed::Testbed;
use rustix::process::Signal;

fn waiting_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("quorumlock: waiting"))
        .collect()
}

#[test]
fn a_wait_for_a_held_name_names_the_holder_once() {
    let testbed = Testbed::start(3).expect("nodes");
    let holder = common::hold(&testbed, &[], "busy");
    let owner = &holder.owner;

    let out = output(&testbed, &["run", "--wait", "3.5", "busy", "--", "true"]);
    assert_eq!(code(out.status), 75, "{out:?}");
    let stderr = text(&out.stderr);
    let lines = waiting_lines(&stderr);
    assert_eq!(lines.len(), 1, "one line while the reason stays: {stderr}");
    assert!(
        lines[0].contains(&format!("held by owner {}", &owner[..8]))
            && lines[0].contains("expires in"),
        "{stderr}"
    );

    let quiet = output(&testbed, &["run", "-q", "-w", "1.5", "busy", "--", "true"]);
    assert_eq!(code(quiet.status), 75);
    assert!(waiting_lines(&text(&quiet.stderr)).is_empty(), "{quiet:?}");
}

#[test]
fn with_every_node_down_the_wait_is_not_silent() {
    // Nothing listens on these ports.
    let nodes = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr = dir.path().join("stderr");
    let mut cmd = Command::new(BIN);
    cmd.env("QUORUMLOCK_NODES", nodes)
        .args(["run", "anything", "--", "true"]);
    let mut waiting = spawn_logged(cmd, &stderr);
    let said = wait_for_text(&stderr, "quorumlock: waiting", Duration::from_secs(10));
    assert!(
        said.contains("nodes failed") && said.contains("unreachable"),
        "{said}"
    );
    // It waits on (the nodes may come back) until told to stop.
    waiting.signal(Signal::TERM);
    assert_eq!(code(waiting.wait_within(Duration::from_secs(10))), 128 + 15);

    // With --wait it gives up, with the unavailable code.
    let out = Command::new(BIN)
        .env("QUORUMLOCK_NODES", nodes)
        .args(["run", "--wait", "1.5", "anything", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(code(out.status), 69, "{out:?}");
}

#[test]
fn a_new_reason_gets_a_new_line() {
    // Fresh servers quarantine themselves: the first reason.
    let mut testbed = Testbed::start_unadopted(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr = dir.path().join("stderr");
    let mut cmd = command(&testbed);
    cmd.args(["run", "fresh", "--", "true"]);
    let mut waiting = spawn_logged(cmd, &stderr);
    let said = wait_for_text(&stderr, "quarantined", Duration::from_secs(10));
    assert!(
        said.contains("nodes quarantined, voting in") && said.contains("quorumlock adopt"),
        "{said}"
    );
    // A node goes down: the reason changes, and a second line says so.
    testbed.node_mut(2).kill().expect("kill a node");
    let said = wait_for_text(&stderr, "failed", Duration::from_secs(10));
    let lines = waiting_lines(&said);
    assert_eq!(lines.len(), 2, "{said}");
    assert!(
        lines[1].contains("quarantined") && lines[1].contains("1 of 3 nodes failed"),
        "{said}"
    );
    waiting.signal(Signal::TERM);
    waiting.wait_within(Duration::from_secs(10));
}
