//! The built `quorumlock` command against real redis-servers: runs on one
//! name never overlap, a child that outlives a lost lock is signalled, the
//! exit codes, and `status` / `doctor` output.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, code, command, nodes, path, spawn, wait_for};
use quorumlock::{LockConfig, MultiLock};
use quorumlock_testbed::Testbed;

#[test]
fn runs_on_one_name_never_overlap() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let script = format!(
        "echo start $$ $(date +%s%N) >> {0}; sleep 0.05; echo end $$ $(date +%s%N) >> {0}",
        log.display()
    );
    let runners: Vec<_> = (0..2)
        .map(|_| {
            let (nodes, script) = (nodes(&testbed), script.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let status = Command::new(BIN)
                        .env("QUORUMLOCK_NODES", &nodes)
                        .args(["run", "--wait", "30s", "shared", "--", "sh", "-c", &script])
                        .status()
                        .expect("run");
                    assert!(status.success(), "{status}");
                }
            })
        })
        .collect();
    for runner in runners {
        runner.join().expect("runner");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let events: Vec<(String, String, u128)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].parse().expect("ns"))
        })
        .collect();
    assert_eq!(events.len(), 20, "{text}");
    for pair in events.chunks(2) {
        assert_eq!(pair[0].0, "start", "{text}");
        assert_eq!(pair[1].0, "end", "{text}");
        assert_eq!(
            pair[0].1, pair[1].1,
            "one child's start and end are adjacent: {text}"
        );
    }
    assert!(
        events.windows(2).all(|w| w[0].2 <= w[1].2),
        "in time order: {text}"
    );
}

#[test]
fn a_child_that_outlives_a_lost_lock_is_signalled() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let (started, termed) = (dir.path().join("started"), dir.path().join("termed"));
    let script = format!(
        "trap 'touch {}; exit 0' TERM; touch {}; while true; do sleep 0.05; done",
        termed.display(),
        started.display()
    );
    let mut cmd = command(&testbed);
    cmd.args([
        "run",
        "--ttl",
        "3s",
        "--kill-after",
        "20s",
        "job",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let mut running = spawn(cmd);
    wait_for("the child starts", Duration::from_secs(10), || {
        started.exists()
    });
    let status = command(&testbed)
        .args(["release", "--force", "job"])
        .output()
        .expect("release --force");
    assert!(status.status.success(), "{status:?}");
    let status = running.wait_within(Duration::from_secs(15));
    assert_eq!(code(status), 76, "the lost-lock exit code");
    assert!(termed.exists(), "the child got SIGTERM");
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_after_kill_after() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let script = format!(
        "trap '' TERM; touch {}; while true; do sleep 0.05; done",
        started.display()
    );
    let mut cmd = command(&testbed);
    cmd.args([
        "run",
        "--ttl",
        "3s",
        "--kill-after",
        "300ms",
        "stubborn",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let mut running = spawn(cmd);
    wait_for("the child starts", Duration::from_secs(10), || {
        started.exists()
    });
    let lock = tokio::runtime::Runtime::new().expect("runtime");
    lock.block_on(async {
        let config = LockConfig::builder()
            .nodes(testbed.urls())
            .build()
            .expect("config");
        MultiLock::new(config).force_release("stubborn").await
    })
    .expect("a lock name");
    assert_eq!(code(running.wait_within(Duration::from_secs(15))), 76);
}

#[test]
fn exit_codes() {
    let testbed = Testbed::start(3).expect("nodes");
    let run = |args: &[&str]| {
        code(
            command(&testbed)
                .args(args)
                .stderr(Stdio::null())
                .status()
                .expect("run"),
        )
    };
    assert_eq!(
        run(&["run", "a", "--", "sh", "-c", "exit 3"]),
        3,
        "the child's status"
    );
    assert_eq!(
        run(&["run", "a", "--", "sh", "-c", "kill -9 $$"]),
        137,
        "128 + SIGKILL"
    );
    assert_eq!(run(&["run", "a", "--", "/nonexistent/command"]), 127);
    assert_eq!(
        run(&["run", "--ttl", "3x", "a", "--", "true"]),
        64,
        "a bad duration"
    );
    assert_eq!(run(&["run", "a"]), 64, "no command");
    assert_eq!(run(&["frobnicate"]), 64, "no such subcommand");
    let no_nodes = Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["run", "a", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(no_nodes.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&no_nodes.stderr).contains("--nodes"));

    // Held elsewhere: --nonblock answers at once with 75 (or the code given).
    let _holder = common::hold(&testbed, &[], "held");
    let began = Instant::now();
    assert_eq!(run(&["run", "--nonblock", "held", "--", "true"]), 75);
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "--nonblock does not wait"
    );
    assert_eq!(
        run(&[
            "run",
            "-n",
            "--conflict-exit-code",
            "9",
            "held",
            "--",
            "true"
        ]),
        9
    );
    assert_eq!(run(&["run", "--wait", "200ms", "held", "--", "true"]), 75);
}

#[test]
fn sigterm_to_quorumlock_is_forwarded_and_the_lock_released() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let (started, termed) = (dir.path().join("started"), dir.path().join("termed"));
    let script = format!(
        "trap 'touch {}; exit 5' TERM; touch {}; while true; do sleep 0.05; done",
        termed.display(),
        started.display()
    );
    let mut cmd = command(&testbed);
    cmd.args(["run", "svc", "--", "sh", "-c", &script]);
    let mut running = spawn(cmd);
    wait_for("the child starts", Duration::from_secs(10), || {
        started.exists()
    });
    let pid = rustix::process::Pid::from_raw(running.0.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    assert_eq!(
        code(running.wait_within(Duration::from_secs(10))),
        5,
        "the child's status"
    );
    assert!(termed.exists());
    let status = status_json(&testbed, "svc");
    assert!(
        status.iter().all(|row| row["owner"].is_null()),
        "released: {status:?}"
    );
}

fn status_json(testbed: &Testbed, name: &str) -> Vec<serde_json::Value> {
    let out = command(testbed)
        .args(["status", "--json", name])
        .output()
        .expect("status");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

#[test]
fn status_shows_the_holder_and_doctor_checks_the_nodes() {
    let testbed = Testbed::start(3).expect("nodes");
    let holder = common::hold(&testbed, &[], "report");
    let owner = &holder.owner;
    let rows = status_json(&testbed, "report");
    assert_eq!(rows.len(), 3);
    let holding: Vec<_> = rows
        .iter()
        .filter(|r| r["owner"].as_str() == Some(&owner.trim()[..8]))
        .collect();
    assert!(holding.len() >= 2, "a quorum shows the holder: {rows:?}");
    for row in holding {
        assert_eq!(row["holds"], 1);
        assert!(row["pttl_ms"].as_i64().is_some_and(|ms| ms > 0));
        assert!(row["fence"].as_u64().is_some_and(|f| f > 0));
        assert_eq!(row["epoch"]["quarantined"], false);
    }
    let table = command(&testbed)
        .args(["status", "report"])
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("NAME") && table.contains(&owner.trim()[..8]),
        "{table}"
    );

    let doctor = command(&testbed)
        .args(["doctor", "--json"])
        .output()
        .expect("doctor");
    assert_eq!(doctor.status.code(), Some(0), "{doctor:?}");
    let findings: Vec<serde_json::Value> = serde_json::from_slice(&doctor.stdout).expect("JSON");
    for check in [
        "reachable",
        "version",
        "maxmemory-policy",
        "persistence",
        "acl",
        "clock",
    ] {
        assert_eq!(
            findings.iter().filter(|f| f["check"] == check).count(),
            3,
            "{check} on every node: {findings:?}"
        );
    }
    assert!(
        findings.iter().all(|f| f["severity"] != "error"),
        "{findings:?}"
    );

    // One node unreachable: an error finding, and exit status 1.
    let dead = format!("{},redis://127.0.0.1:1", nodes(&testbed));
    let doctor = Command::new(BIN)
        .args(["--nodes", &dead, "doctor"])
        .output()
        .expect("doctor");
    assert_eq!(doctor.status.code(), Some(1));
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("error") && l.contains("127.0.0.1:1")),
        "{text}"
    );
}

#[test]
fn nodes_from_a_config_file() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("quorumlock.toml");
    let urls: Vec<String> = testbed.urls().iter().map(|u| format!("{u:?}")).collect();
    std::fs::write(
        &file,
        format!("nodes = [{}]\nttl = \"5s\"\n", urls.join(", ")),
    )
    .expect("write");
    let status = Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--config", path(&file), "run", "cfg", "--", "true"])
        .status()
        .expect("run");
    assert!(status.success());
    std::fs::write(&file, "nodes = [\"redis://127.0.0.1:1\"]\nttl = \"soon\"\n").expect("write");
    let out = Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--config", path(&file), "run", "cfg", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`ttl`") && stderr.contains("soon"),
        "{stderr}"
    );
}
