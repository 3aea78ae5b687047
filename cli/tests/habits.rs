//! flock(1) habits: bare seconds for durations, exit codes that match the
//! guide (GUIDE.md) and `--help` (a bad `--nodes` is a usage error, a bad `--config`
//! file a configuration error), and `rediss://` nodes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, code, output, path, text};
use quorumlock_testbed::Testbed;
use quorumlock_testbed::pki::Pki;

#[test]
fn bare_numbers_are_seconds() {
    let testbed = Testbed::start(3).expect("nodes");
    let _holder = common::hold(&testbed, &["--ttl", "30"], "flock");
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&output(&testbed, &["status", "--json", "flock"]).stdout)
            .expect("JSON");
    assert!(
        rows.iter()
            .filter_map(|r| r["pttl_ms"].as_i64())
            .any(|ms| ms > 20_000 && ms <= 30_000),
        "--ttl 30 is 30 s: {rows:?}"
    );
    let began = Instant::now();
    let out = output(&testbed, &["run", "-w", "0.5", "flock", "--", "true"]);
    assert_eq!(code(out.status), 75, "{out:?}");
    assert!(
        began.elapsed() >= Duration::from_millis(500),
        "-w 0.5 waits half a second"
    );
    for bad in ["-1", "1.2.3", "soon"] {
        let out = output(&testbed, &["run", "-w", bad, "flock", "--", "true"]);
        assert_eq!(code(out.status), 64, "{bad}: {out:?}");
    }
}

/// The exit codes in a text: each number at the start of a line's
/// content, after an optional list marker.
fn codes_in(text: &str) -> Vec<u32> {
    let mut codes: Vec<u32> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .filter(|&n| [0, 1, 64, 69, 75, 76, 78, 126, 127].contains(&n))
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

#[test]
fn the_guide_and_help_give_the_same_exit_codes() {
    let help = Command::new(BIN).arg("--help").output().expect("--help");
    assert_eq!(code(help.status), 0);
    let help = text(&help.stdout);
    let table = help
        .split("Exit codes:")
        .nth(1)
        .expect("--help lists the exit codes");
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../GUIDE.md"))
        .expect("GUIDE.md");
    let section = guide
        .split("## The `quorumlock` command")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the guide's section on the command");
    let guide_codes = section
        .split("Exit codes")
        .nth(1)
        .expect("the guide lists the exit codes");
    assert_eq!(
        codes_in(table),
        codes_in(guide_codes),
        "{table}\n---\n{guide_codes}"
    );
    assert_eq!(codes_in(table), [0, 1, 64, 69, 75, 76, 78, 126, 127]);
}

#[test]
fn a_bad_nodes_value_is_a_usage_error_and_a_bad_file_a_configuration_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |cmd: &mut Command| {
        let out = cmd.args(["run", "x", "--", "true"]).output().expect("run");
        (code(out.status), text(&out.stderr))
    };
    for bad in [
        "redis://127.0.0.1:99999",
        "http://example.com",
        "redis://a,redis://a",
    ] {
        let (status, stderr) = run(Command::new(BIN)
            .env_remove("QUORUMLOCK_NODES")
            .args(["--nodes", bad]));
        assert_eq!(status, 64, "--nodes {bad}: {stderr}");
        assert!(stderr.contains("`nodes`"), "{stderr}");
        let (status, stderr) = run(Command::new(BIN).env("QUORUMLOCK_NODES", bad));
        assert_eq!(status, 64, "QUORUMLOCK_NODES={bad}: {stderr}");
    }
    let file = dir.path().join("quorumlock.toml");
    std::fs::write(&file, "nodes = [\"redis://127.0.0.1:99999\"]\n").expect("write");
    let (status, stderr) = run(Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--config", path(&file)]));
    assert_eq!(status, 78, "{stderr}");
    assert!(stderr.starts_with("quorumlock: --config"), "{stderr}");
    // A bad --ttl flag is the user's; a bad ttl in the file is the file's.
    let (status, _) = run(Command::new(BIN)
        .env("QUORUMLOCK_NODES", "redis://127.0.0.1:1")
        .args(["run", "--ttl", "0"]));
    assert_eq!(status, 64);
    std::fs::write(&file, "nodes = [\"redis://127.0.0.1:1\"]\nttl = 0\n").expect("write");
    let (status, stderr) = run(Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--config", path(&file)]));
    assert_eq!(status, 78, "{stderr}");
    // Bare seconds in the file too.
    std::fs::write(
        &file,
        "nodes = [\"redis://127.0.0.1:1\"]\nttl = 30\nquarantine = \"45\"\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .args(["--config", path(&file), "status", "x"])
        .output()
        .expect("status");
    assert_eq!(code(out.status), 0, "{out:?}");
}

#[test]
fn rediss_nodes_work() {
    let pki = Pki::new().expect("certificates (apt-get install openssl)");
    let file = |f: &str| pki.path(f).display().to_string();
    let mut tls_ports = Vec::new();
    let mut testbeds = Vec::new();
    for _ in 0..3 {
        let (options, port) = pki.tls_options(false).expect("TLS options");
        testbeds.push(Testbed::start_with(1, options).expect("a TLS redis-server"));
        tls_ports.push(port);
    }
    let nodes: Vec<String> = tls_ports
        .iter()
        .map(|p| format!("rediss://127.0.0.1:{p}"))
        .collect();
    let nodes = nodes.join(",");
    // The private CA, as a flag.
    let out = Command::new(BIN)
        .env("QUORUMLOCK_NODES", &nodes)
        .args(["--tls-ca", &file("ca.crt")])
        .args([
            "run",
            "-n",
            "tls",
            "--",
            "sh",
            "-c",
            "echo $QUORUMLOCK_FENCING_TOKEN",
        ])
        .output()
        .expect("run");
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(
        text(&out.stdout).trim().parse::<u64>().is_ok_and(|t| t > 0),
        "{out:?}"
    );
    // ... or in the environment, for status and doctor too.
    let with_ca = |args: &[&str]| {
        Command::new(BIN)
            .env("QUORUMLOCK_NODES", &nodes)
            .env("QUORUMLOCK_TLS_CA", file("ca.crt"))
            .args(args)
            .output()
            .expect("quorumlock")
    };
    let doctor = with_ca(&["doctor"]);
    let findings = text(&doctor.stdout);
    assert!(
        findings.matches("TLS in use").count() == 3 && !findings.contains("unreachable"),
        "{doctor:?}"
    );
    let status = with_ca(&["status", "--json", "tls"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&status.stdout).expect("JSON");
    assert!(rows.iter().all(|r| r["error"].is_null()), "{rows:?}");
    // Without the CA the nodes are refused, not silently trusted.
    let untrusted = Command::new(BIN)
        .env("QUORUMLOCK_NODES", &nodes)
        .args(["run", "-n", "tls", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(code(untrusted.status), 69, "{untrusted:?}");
    assert!(
        text(&untrusted.stderr).contains("UnknownIssuer"),
        "{untrusted:?}"
    );
    // A CA file that is no certificate is the flag's fault.
    let bad = Command::new(BIN)
        .env("QUORUMLOCK_NODES", &nodes)
        .args(["--tls-ca", "/dev/null", "run", "-n", "tls", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(code(bad.status), 64, "{bad:?}");
}

#[test]
fn the_node_timeout_comes_from_the_flag_the_environment_or_the_file() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("quorumlock.toml");
    let nodes: Vec<String> = testbed.urls().iter().map(|u| format!("{u:?}")).collect();
    let write = |node_timeout: &str| {
        let text = format!(
            "nodes = [{}]\nnode_timeout = {node_timeout}\n",
            nodes.join(", ")
        );
        std::fs::write(&file, text).expect("write");
    };
    write("\"250ms\"");
    // `doctor` reports the node timeout beside each node's round trip.
    let doctor = |cmd: &mut Command| {
        let out = cmd.arg("doctor").output().expect("doctor");
        (code(out.status), text(&out.stdout))
    };
    let mut flag = Command::new(BIN);
    flag.env("QUORUMLOCK_NODES", common::nodes(&testbed))
        .env_remove("QUORUMLOCK_NODE_TIMEOUT")
        .args(["--node-timeout", "300ms"]);
    let mut environment = Command::new(BIN);
    environment
        .env("QUORUMLOCK_NODES", common::nodes(&testbed))
        .env("QUORUMLOCK_NODE_TIMEOUT", "0.4");
    let mut config = Command::new(BIN);
    config
        .env_remove("QUORUMLOCK_NODES")
        .env_remove("QUORUMLOCK_NODE_TIMEOUT")
        .args(["--config", path(&file)]);
    let mut both = Command::new(BIN);
    both.env_remove("QUORUMLOCK_NODES")
        .args(["--config", path(&file), "--node-timeout", "2s"]);
    let mut default = Command::new(BIN);
    default
        .env("QUORUMLOCK_NODES", common::nodes(&testbed))
        .env_remove("QUORUMLOCK_NODE_TIMEOUT");
    let cases = [
        ("300ms", &mut flag),
        ("400ms", &mut environment),
        ("250ms", &mut config),
        ("2s", &mut both),
        ("50ms", &mut default),
    ];
    for (timeout, cmd) in cases {
        let (status, stdout) = doctor(cmd);
        assert_eq!(status, 0, "{timeout}: {stdout}");
        assert_eq!(
            stdout.matches(&format!("node timeout {timeout}")).count(),
            3,
            "{timeout} on every node: {stdout}"
        );
    }
    // A zero or unreadable timeout is refused, naming its source: the
    // user's flag or environment (64), the file (78).
    let run = |cmd: &mut Command| {
        let out = cmd.args(["run", "x", "--", "true"]).output().expect("run");
        (code(out.status), text(&out.stderr))
    };
    let (status, stderr) = run(Command::new(BIN)
        .env("QUORUMLOCK_NODES", common::nodes(&testbed))
        .args(["--node-timeout", "0"]));
    assert_eq!(status, 64, "{stderr}");
    let (status, stderr) = run(Command::new(BIN)
        .env("QUORUMLOCK_NODES", common::nodes(&testbed))
        .env("QUORUMLOCK_NODE_TIMEOUT", "soon"));
    assert_eq!(status, 64, "{stderr}");
    assert!(stderr.contains("soon"), "{stderr}");
    write("0");
    let (status, stderr) = run(Command::new(BIN)
        .env_remove("QUORUMLOCK_NODES")
        .env_remove("QUORUMLOCK_NODE_TIMEOUT")
        .args(["--config", path(&file)]));
    assert_eq!(status, 78, "{stderr}");
    assert!(stderr.contains("`node_timeout` is 0ns"), "{stderr}");
}
