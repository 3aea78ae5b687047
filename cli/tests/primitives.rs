//! `run --permits K` (a semaphore), `run --shared` and `run --exclusive`
//! (a read-write lock) with the built `quorumlock` against real nodes:
//! never more than K commands at once, readers together, a writer alone
//! and before the readers that come after it, the same conflict and
//! lost-lock exit codes and environment as a plain `run`, usage errors,
//! and what `status` shows of permits, readers and a writer.
//!
//! Every command records its start and end in one log (`echo >>`: one
//! O_APPEND write each, so the log's order is the order of the writes),
//! inside its hold; the tests replay it. Every wait is on an event (a
//! file appears, a line is printed, a process ends) and bounded.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    BIN, Running, code, command, output, path, spawn, spawn_logged, text, wait_for, wait_for_text,
};
use quorumlock::{LockConfig, MultiLock, MultiRwLock, MultiSemaphore};
use quorumlock_testbed::Testbed;

/// A command's part: `sh probe.sh KIND TAG [FILE…]` logs `start KIND TAG`,
/// creates `started.TAG`, waits (bounded) for each FILE in the directory,
/// and logs `end KIND TAG`. A wait that runs out logs `timeout` and fails.
const PROBE: &str = r#"d=$(dirname "$0"); kind=$1; tag=$2; shift 2
echo "start $kind $tag" >> "$d/log"
touch "$d/started.$tag"
for f in "$@"; do
  i=0
  while [ ! -e "$d/$f" ]; do
    i=$((i + 1))
    if [ $i -gt 600 ]; then echo "timeout $kind $tag $f" >> "$d/log"; exit 3; fi
    sleep 0.05
  done
done
sleep 0.05
echo "end $kind $tag" >> "$d/log"
"#;

/// A directory with the probe script.
fn probe_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("probe.sh"), PROBE).expect("probe script");
    dir
}

/// `quorumlock run FLAGS NAME -- sh probe.sh KIND TAG WAITS…`, spawned
/// with its stderr in `DIR/stderr.TAG`.
fn probe(
    testbed: &Testbed,
    dir: &Path,
    flags: &[&str],
    name: &str,
    (kind, tag): (&str, &str),
    waits: &[&str],
) -> Running {
    let mut cmd = command(testbed);
    cmd.arg("run")
        .args(flags)
        .args([name, "--", "sh", path(&dir.join("probe.sh")), kind, tag])
        .args(waits);
    spawn_logged(cmd, &dir.join(format!("stderr.{tag}")))
}

/// The log's events: (`start`/`end`, kind, tag).
fn events(dir: &Path) -> Vec<(String, String, String)> {
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    log.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert!(f.len() >= 3 && f[0] != "timeout", "{log}");
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect()
}

/// Replays the log: the most holders at once, after checking that no
/// writer ever held beside anyone, and that every start has its end.
fn replay(events: &[(String, String, String)]) -> usize {
    let mut holding: Vec<(&str, &str)> = Vec::new();
    let mut most = 0;
    for (what, kind, tag) in events {
        match what.as_str() {
            "start" => {
                holding.push((kind, tag));
                let writers = holding.iter().filter(|(k, _)| *k == "writer").count();
                assert!(
                    writers == 0 || holding.len() == 1,
                    "a writer beside another holder: {holding:?} in {events:?}"
                );
                most = most.max(holding.len());
            }
            _ => {
                let at = holding
                    .iter()
                    .position(|h| *h == (kind.as_str(), tag.as_str()))
                    .unwrap_or_else(|| panic!("an end without its start: {events:?}"));
                holding.remove(at);
            }
        }
    }
    assert!(holding.is_empty(), "starts without an end: {events:?}");
    most
}

/// Where in the log an event is.
fn at(events: &[(String, String, String)], what: &str, tag: &str) -> usize {
    events
        .iter()
        .position(|(w, _, t)| w == what && t == tag)
        .unwrap_or_else(|| panic!("no {what} of {tag}: {events:?}"))
}

fn status_rows(testbed: &Testbed, name: &str) -> Vec<serde_json::Value> {
    let out = output(testbed, &["status", "--json", name]);
    assert_eq!(code(out.status), 0, "{out:?}");
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

fn starts(dir: &Path) -> usize {
    events(dir).iter().filter(|(w, ..)| w == "start").count()
}

#[test]
fn permits_let_at_most_k_commands_run_at_once() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = probe_dir();
    let flags = ["--permits", "3", "--wait", "60s"];
    let mut runs: Vec<Running> = (0..8)
        .map(|i| {
            let tag = format!("p{i}");
            probe(
                &testbed,
                dir.path(),
                &flags,
                "pool",
                ("permit", &tag),
                &["go"],
            )
        })
        .collect();
    // The first three hold until `go`: three at once, and no fourth.
    wait_for("three commands run", Duration::from_secs(30), || {
        starts(dir.path()) >= 3
    });
    // A waiter's line (after a second) comes while the three still hold.
    let started: Vec<String> = events(dir.path())
        .into_iter()
        .map(|(.., tag)| tag)
        .collect();
    let waiters: Vec<String> = (0..8)
        .map(|i| format!("p{i}"))
        .filter(|tag| !started.contains(tag))
        .collect();
    assert_eq!(waiters.len(), 5, "{started:?}");
    let one_waiter = dir.path().join(format!("stderr.{}", waiters[0]));
    let said = wait_for_text(&one_waiter, "quorumlock: waiting", Duration::from_secs(10));
    assert!(said.contains("all 3 permits held"), "{said}");
    assert_eq!(starts(dir.path()), 3, "no fourth while three hold");

    std::fs::write(dir.path().join("go"), "").expect("go");
    for run in &mut runs {
        assert_eq!(code(run.wait_within(Duration::from_secs(60))), 0);
    }
    let events = events(dir.path());
    assert_eq!(starts(dir.path()), 8, "all ran: {events:?}");
    assert_eq!(replay(&events), 3, "three at once, never more: {events:?}");
}

#[test]
fn readers_run_together_and_a_writer_alone_before_later_readers() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = probe_dir();
    let d = dir.path();
    let flags: &[&str] = &["--wait", "60s"];
    let reader = [&["--shared"][..], flags].concat();
    let writer = [&["--exclusive"][..], flags].concat();
    // Each reader waits until the other has started: both end only if
    // they held at once.
    let mut a = probe(
        &testbed,
        d,
        &reader,
        "rw",
        ("reader", "a"),
        &["started.b", "go"],
    );
    let mut b = probe(
        &testbed,
        d,
        &reader,
        "rw",
        ("reader", "b"),
        &["started.a", "go"],
    );
    wait_for("both readers run", Duration::from_secs(30), || {
        d.join("started.a").exists() && d.join("started.b").exists()
    });
    // Two writers wait for the readers.
    let mut w1 = probe(&testbed, d, &writer, "rw", ("writer", "w1"), &[]);
    let said = wait_for_text(
        &d.join("stderr.w1"),
        "quorumlock: waiting",
        Duration::from_secs(10),
    );
    assert!(said.contains("held by 2 reader(s), owners"), "{said}");
    let mut w2 = probe(&testbed, d, &writer, "rw", ("writer", "w2"), &[]);
    wait_for_text(
        &d.join("stderr.w2"),
        "quorumlock: waiting",
        Duration::from_secs(10),
    );
    // A reader that comes while writers wait waits behind them.
    let mut c = probe(&testbed, d, &reader, "rw", ("reader", "c"), &[]);
    let said = wait_for_text(
        &d.join("stderr.c"),
        "quorumlock: waiting",
        Duration::from_secs(10),
    );
    // Refused at the slot a queued writer holds back, or first at a
    // reader's slot.
    assert!(
        said.contains("a writer waits for it") || said.contains("held by 2 reader(s)"),
        "{said}"
    );
    assert!(
        !events(d).iter().any(|(.., tag)| tag == "c"),
        "{:?}",
        events(d)
    );

    std::fs::write(d.join("go"), "").expect("go");
    for run in [&mut a, &mut b, &mut w1, &mut w2, &mut c] {
        assert_eq!(code(run.wait_within(Duration::from_secs(60))), 0);
    }
    let events = events(d);
    assert_eq!(events.len(), 10, "{events:?}");
    // Replayed: writers alone (checked there), the readers together.
    assert_eq!(replay(&events), 2, "{events:?}");
    assert!(
        at(&events, "start", "b") < at(&events, "end", "a"),
        "{events:?}"
    );
    for w in ["w1", "w2"] {
        assert!(
            at(&events, "end", "a") < at(&events, "start", w)
                && at(&events, "end", "b") < at(&events, "start", w)
                && at(&events, "end", w) < at(&events, "start", "c"),
            "writers after the first readers, before the later one: {events:?}"
        );
    }
}

#[test]
fn conflicts_environment_and_loss_work_as_for_a_plain_run() {
    let testbed = Testbed::start(3).expect("nodes");
    // The command's environment: its slot, below K, and a fencing token.
    let out = output(
        &testbed,
        &[
            "run",
            "--permits",
            "3",
            "env-check",
            "--",
            "sh",
            "-c",
            "echo $QUORUMLOCK_NAME $QUORUMLOCK_SLOT $QUORUMLOCK_FENCING_TOKEN",
        ],
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    let said = text(&out.stdout);
    let f: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(f.len(), 3, "{said}");
    assert_eq!(f[0], "env-check");
    assert!(f[1].parse::<u32>().is_ok_and(|slot| slot < 3), "{said}");
    assert!(f[2].parse::<u64>().is_ok_and(|t| t > 0), "{said}");
    let out = output(
        &testbed,
        &[
            "run",
            "--exclusive",
            "env-check",
            "--",
            "sh",
            "-c",
            "echo ${QUORUMLOCK_SLOT-none} $QUORUMLOCK_FENCING_TOKEN",
        ],
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    assert!(text(&out.stdout).starts_with("none "), "{out:?}");

    // Conflicts: --nonblock, --conflict-exit-code, --wait.
    let _permits = [
        common::hold(&testbed, &["--permits", "2"], "busy"),
        common::hold(&testbed, &["--permits", "2"], "busy"),
    ];
    let _reader = common::hold(&testbed, &["--shared"], "busy");
    for flags in [&["--permits", "2"][..], &["--exclusive"]] {
        let run = |extra: &[&str]| {
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(extra);
            args.extend_from_slice(&["busy", "--", "true"]);
            code(output(&testbed, &args).status)
        };
        assert_eq!(run(&["-n"]), 75, "{flags:?}");
        assert_eq!(run(&["-n", "--conflict-exit-code", "9"]), 9, "{flags:?}");
        assert_eq!(run(&["--wait", "300ms"]), 75, "{flags:?}");
    }
    // The writer that gave up left no place in the queue: readers come in
    // (at once, or, on a loaded machine where giving a place up missed a
    // node's timeout, once that place's lease lapses).
    let out = output(
        &testbed,
        &["run", "--wait", "20s", "--shared", "busy", "--", "true"],
    );
    assert_eq!(code(out.status), 0, "{out:?}");
    // A plain run is the mutex: none of them excludes it.
    let out = output(&testbed, &["run", "-n", "busy", "--", "true"]);
    assert_eq!(code(out.status), 0, "{out:?}");

    // A lost permit, reader or writer: SIGTERM to the command, exit 76.
    let permit: fn(&str, u32) -> String = MultiSemaphore::slot_name;
    let reader: fn(&str, u32) -> String = MultiRwLock::slot_name;
    for (flags, slot_name_of) in [
        (&["--permits", "2"][..], permit),
        (&["--shared"], reader),
        (&["--exclusive"], reader),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (slot, termed) = (dir.path().join("slot"), dir.path().join("termed"));
        let script = format!(
            "trap 'touch {}; exit 0' TERM; echo ${{QUORUMLOCK_SLOT-0}} > {}; while true; do sleep 0.05; done",
            termed.display(),
            slot.display()
        );
        let mut cmd = command(&testbed);
        cmd.args(["run", "--ttl", "3s"])
            .args(flags)
            .args(["lossy", "--", "sh", "-c", &script]);
        let mut running = spawn(cmd);
        let mut held = String::new();
        wait_for("the command runs", Duration::from_secs(20), || {
            held = std::fs::read_to_string(&slot).unwrap_or_default();
            held.ends_with('\n')
        });
        let slot = held.trim().parse().expect("QUORUMLOCK_SLOT is a number");
        let slot_name = slot_name_of("lossy", slot);
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime
            .block_on(async {
                let config = LockConfig::builder()
                    .nodes(testbed.urls())
                    .build()
                    .expect("config");
                MultiLock::new(config).force_release(&slot_name).await
            })
            .expect("a slot name");
        assert_eq!(
            code(running.wait_within(Duration::from_secs(20))),
            76,
            "{flags:?}"
        );
        assert!(termed.exists(), "{flags:?}: the command got SIGTERM");
    }
}

#[test]
fn bad_modes_are_usage_errors_naming_the_value() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .env("QUORUMLOCK_NODES", "redis://127.0.0.1:1")
            .arg("run")
            .args(args)
            .args(["name", "--", "true"])
            .output()
            .expect("run");
        (code(out.status), text(&out.stderr))
    };
    for bad in ["0", "1025", "x", "-1", ""] {
        let (status, stderr) = run(&["--permits", bad]);
        assert_eq!(status, 64, "--permits {bad:?}: {stderr}");
        assert!(
            stderr.contains(&format!("'{bad}'")) && stderr.contains("--permits"),
            "{stderr}"
        );
    }
    for (a, b) in [
        ("--shared", "--exclusive"),
        ("--shared", "--permits=2"),
        ("--exclusive", "--permits=2"),
    ] {
        let (status, stderr) = run(&[a, b]);
        assert_eq!(status, 64, "{a} {b}: {stderr}");
        assert!(stderr.contains("cannot be used with"), "{stderr}");
    }
    let help = Command::new(BIN)
        .args(["run", "--help"])
        .output()
        .expect("--help");
    let help = text(&help.stdout);
    assert!(
        help.contains("--shared") && help.contains("--exclusive") && help.contains("--permits <K>"),
        "{help}"
    );
}

/// The `status --json` rows of `kind`.
fn of_kind<'a>(rows: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    rows.iter().filter(|r| r["kind"] == kind).collect()
}

fn owners(rows: &[&serde_json::Value]) -> BTreeSet<String> {
    rows.iter()
        .filter_map(|r| r["owner"].as_str().map(str::to_owned))
        .collect()
}

fn short(owner: &str) -> String {
    owner[..8].to_owned()
}

#[test]
fn status_shows_permits_readers_and_the_writer() {
    let testbed = Testbed::start(3).expect("nodes");
    let mutex = common::hold(&testbed, &[], "mixed");
    let permits = [
        common::hold(&testbed, &["--permits", "3"], "mixed"),
        common::hold(&testbed, &["--permits", "3"], "mixed"),
    ];
    let readers = [
        common::hold(&testbed, &["--shared"], "mixed"),
        common::hold(&testbed, &["--shared"], "mixed"),
    ];
    let rows = status_rows(&testbed, "mixed");
    let nodes: HashSet<&str> = rows.iter().filter_map(|r| r["node"].as_str()).collect();
    assert_eq!(nodes.len(), 3, "{rows:?}");
    assert_eq!(of_kind(&rows, "mutex").len(), 3, "one per node: {rows:?}");
    assert!(
        of_kind(&rows, "mutex")
            .iter()
            .filter(|r| r["owner"] == short(&mutex.owner))
            .count()
            >= 2,
        "{rows:?}"
    );
    for (kind, holders) in [("permit", &permits), ("reader", &readers)] {
        let found = of_kind(&rows, kind);
        let expected: BTreeSet<String> = holders.iter().map(|h| short(&h.owner)).collect();
        assert_eq!(owners(&found), expected, "{kind}: {rows:?}");
        for owner in &expected {
            let on: Vec<_> = found.iter().filter(|r| r["owner"] == *owner).collect();
            assert!(on.len() >= 2, "{kind} {owner} on a quorum: {rows:?}");
            let slots: HashSet<u64> = on.iter().filter_map(|r| r["slot"].as_u64()).collect();
            assert_eq!(slots.len(), 1, "one slot per holder: {rows:?}");
        }
        for row in &found {
            assert_eq!(row["holds"], 1);
            assert!(row["pttl_ms"].as_i64().is_some_and(|ms| ms > 0), "{row}");
            assert!(row["fence"].as_u64().is_some_and(|f| f > 0), "{row}");
        }
        // On a node with both, each row says so.
        assert!(found.iter().any(|r| r["held"] == 2), "{rows:?}");
    }
    assert!(
        of_kind(&rows, "permit")
            .iter()
            .all(|r| r["slot"].as_u64().is_some_and(|slot| slot < 3)),
        "{rows:?}"
    );
    assert!(of_kind(&rows, "writer").is_empty(), "{rows:?}");

    let table = text(&output(&testbed, &["status", "mixed"]).stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("KIND"),
        "{table}"
    );
    for (kind, holders) in [("permit #", &permits), ("reader #", &readers)] {
        for holder in holders {
            assert!(
                lines.iter().any(|l| l.starts_with("mixed ")
                    && l.contains(kind)
                    && l.contains("(2 held)")
                    && l.contains(&short(&holder.owner))),
                "{kind} {}: {table}",
                holder.owner
            );
        }
    }
    // The listing without names: the name once, its rows as above.
    let listing = output(&testbed, &["status", "--json"]);
    let listing: serde_json::Value = serde_json::from_slice(&listing.stdout).expect("JSON");
    assert_eq!(listing["names"], serde_json::json!(["mixed"]), "{listing}");
    drop(readers);
    drop(mutex);
    drop(permits);

    let writer = common::hold(&testbed, &["--exclusive"], "mixed");
    let rows = status_rows(&testbed, "mixed");
    let writers = of_kind(&rows, "writer");
    assert!(writers.len() >= 2, "a quorum shows the writer: {rows:?}");
    for row in &writers {
        assert_eq!(row["owner"], short(&writer.owner));
        assert_eq!(row["slots"], 32, "{row}");
        assert!(row["slot"].is_null());
    }
    assert!(of_kind(&rows, "reader").is_empty(), "{rows:?}");
    let table = text(&output(&testbed, &["status", "mixed"]).stdout);
    assert!(
        table
            .lines()
            .any(|l| l.contains(" writer ") && l.contains(&short(&writer.owner))),
        "{table}"
    );
    // Only the listing: only the writer's name.
    let listing = output(&testbed, &["status"]);
    let stdout = text(&listing.stdout);
    let listed: BTreeSet<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(listed, BTreeSet::from(["mixed"]), "{stdout}");
}

#[test]
fn status_finds_the_slots_of_a_long_name() {
    // Over 1 KiB: found with SCAN MATCH, the glob characters escaped.
    let testbed = Testbed::start(3).expect("nodes");
    let long = format!("*[a]?{}", "x".repeat(2000));
    let other = format!("b[a]c{}", "x".repeat(2000));
    let mine = common::hold(&testbed, &["--permits", "2"], &long);
    let _other = common::hold(&testbed, &["--permits", "2"], &other);
    let reader = common::hold(&testbed, &["--shared"], &long);
    let rows = status_rows(&testbed, &long);
    assert!(rows.iter().all(|r| r["name"] == long.as_str()));
    let permits = of_kind(&rows, "permit");
    assert_eq!(
        owners(&permits),
        BTreeSet::from([short(&mine.owner)]),
        "{rows:?}"
    );
    assert!(permits.len() >= 2, "a quorum: {rows:?}");
    let readers = of_kind(&rows, "reader");
    assert_eq!(
        owners(&readers),
        BTreeSet::from([short(&reader.owner)]),
        "{rows:?}"
    );
}
