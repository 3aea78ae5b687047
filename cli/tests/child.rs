//! The command never outlives the lock that covers it: a SIGKILLed
//! quorumlock takes it (and what it started) down at once, `--max-hold`
//! stops it as `--help` says while the lock is still held, what it leaves
//! in its process group is stopped before the release, and the command
//! gets the terminal (and Ctrl-Z works) when quorumlock runs in one.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    BIN, Running, code, command, ended, nodes, output, pid_in, spawn, wait_for, wait_for_text,
};
use quorumlock_testbed::Testbed;
use rustix::process::Signal;

/// Nanoseconds since the Unix epoch, as `date +%s%N` prints them.
fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

#[test]
fn a_sigkilled_quorumlock_takes_its_command_down_and_a_second_run_starts_after() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str| dir.path().join(name);
    // The command, and a process it starts in the background.
    let script = format!(
        "echo $$ > {child}; sleep 60 & echo $! > {grandchild}; touch {started}; wait",
        child = file("child").display(),
        grandchild = file("grandchild").display(),
        started = file("started").display()
    );
    let mut first = command(&testbed);
    first.args(["run", "--ttl", "2s", "job", "--", "sh", "-c", &script]);
    let mut first = spawn(first);
    wait_for("the command starts", Duration::from_secs(10), || {
        file("started").exists()
    });
    let (child, grandchild) = (pid_in(&file("child")), pid_in(&file("grandchild")));
    assert!(!ended(child) && !ended(grandchild));

    first.signal(Signal::KILL);
    first.0.wait().expect("reap quorumlock");
    let died = Instant::now();
    wait_for(
        "the command ends after quorumlock's SIGKILL",
        Duration::from_millis(100),
        || ended(child),
    );
    let child_gone = died.elapsed();
    // The kernel kills the command; the watcher process kills the rest of
    // its group (a process it must first be scheduled to run).
    wait_for(
        "the process the command started ends",
        Duration::from_secs(2),
        || ended(grandchild),
    );
    let group_gone = died.elapsed();
    let gone_at = wall_ns();
    eprintln!("command gone {child_gone:?}, its group {group_gone:?} after quorumlock's death");

    // Nothing released the name: the second run waits for the TTL, and
    // starts after the first command and all it started had ended.
    let second = output(
        &testbed,
        &[
            "run",
            "--wait",
            "30",
            "job",
            "--",
            "sh",
            "-c",
            &format!("date +%s%N > {}", file("second").display()),
        ],
    );
    assert_eq!(code(second.status), 0, "{second:?}");
    let started: u128 = std::fs::read_to_string(file("second"))
        .expect("the second command ran")
        .trim()
        .parse()
        .expect("ns");
    assert!(
        started > gone_at,
        "the second run started after the first ended"
    );
}

#[test]
fn max_hold_stops_the_command_as_help_says_while_the_lock_is_held() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str| dir.path().join(name);

    // A command that ends on SIGTERM: stopped at --max-hold, exit 76.
    let script = format!(
        "trap 'touch {termed}; exit 0' TERM; touch {started}; while true; do sleep 0.05; done",
        termed = file("termed").display(),
        started = file("started").display()
    );
    let began = Instant::now();
    let out = output(
        &testbed,
        &[
            "run",
            "--max-hold",
            "1s",
            "--kill-after",
            "1s",
            "capped",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "not before --max-hold"
    );
    assert_eq!(code(out.status), 76, "{out:?}");
    assert!(file("started").exists() && file("termed").exists());
    let stderr = common::text(&out.stderr);
    assert!(stderr.contains("--max-hold (1s) reached"), "{stderr}");

    // A command that ignores SIGTERM: SIGKILL after --kill-after, and the
    // name stays held until it has ended.
    let stderr_file = file("stderr");
    let mut cmd = command(&testbed);
    cmd.args([
        "run",
        "--max-hold",
        "1",
        "--kill-after",
        "2",
        "stubborn",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while true; do sleep 0.05; done",
    ]);
    let began = Instant::now();
    let mut stubborn = common::spawn_logged(cmd, &stderr_file);
    wait_for_text(&stderr_file, "reached", Duration::from_secs(10));
    let meanwhile = output(&testbed, &["run", "-n", "stubborn", "--", "true"]);
    assert_eq!(
        code(meanwhile.status),
        75,
        "held while the command is being stopped: {meanwhile:?}"
    );
    assert_eq!(code(stubborn.wait_within(Duration::from_secs(20))), 76);
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "--max-hold + --kill-after"
    );
    let stderr = std::fs::read_to_string(&stderr_file).expect("stderr");
    assert!(stderr.contains("ended by signal 9"), "{stderr}");
}

#[test]
fn what_the_command_leaves_in_its_group_is_stopped_before_the_release() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let left = dir.path().join("left");
    let script = format!("sleep 60 & echo $! > {}", left.display());
    let out = output(&testbed, &["run", "leaves", "--", "sh", "-c", &script]);
    assert_eq!(code(out.status), 0, "the command's own status: {out:?}");
    assert!(ended(pid_in(&left)), "the background process was stopped");
    let stderr = common::text(&out.stderr);
    assert!(
        stderr.contains("left processes in its process group"),
        "{stderr}"
    );
}

/// Runs `script` under a terminal of its own (util-linux `script`), with
/// `input` typed into the terminal.
fn in_a_terminal(testbed: &Testbed, command_line: &str, input: &[u8]) -> (i32, String) {
    let mut script = Command::new("script")
        .args(["-qec", command_line, "/dev/null"])
        .env("QUORUMLOCK_NODES", nodes(testbed))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` (Debian: bsdutils)");
    script
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("type");
    let mut running = Running(script);
    let status = running.wait_within(Duration::from_secs(20));
    let mut out = String::new();
    let _ = running
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out);
    (code(status), out)
}

#[test]
fn the_command_gets_the_terminal_quorumlock_runs_in() {
    let testbed = Testbed::start(3).expect("nodes");
    // In a process group of its own, the command would be stopped by
    // SIGTTIN reading the terminal, unless quorumlock hands it over.
    let line = format!("{BIN} run tty -- sh -c 'read answer; echo got:$answer'");
    let (code, out) = in_a_terminal(&testbed, &line, b"yes\n");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("got:yes"), "{out}");
}

#[test]
fn ctrl_z_and_background_reads_stop_the_job_and_fg_continues_it() {
    let testbed = Testbed::start(3).expect("nodes");
    let dir = tempfile::tempdir().expect("temp dir");
    let pid_file = dir.path().join("sleeper");
    let mut shell = Command::new("script")
        .args(["-qfc", "bash --norc --noprofile -i", "/dev/null"])
        .env("QUORUMLOCK_NODES", nodes(&testbed))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("util-linux `script` and bash");
    let mut input = shell.stdin.take().expect("stdin");
    let stdout = shell.stdout.take().expect("stdout");
    let shell = Running(shell);
    // The terminal's output, collected by a thread.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut stdout = stdout;
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock()
                    .expect("log")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let seen = |text: &str| log.lock().expect("log").matches(text).count();
    // On a failed wait, what the terminal showed.
    let wait_for = |what: &str, limit: Duration, done: &mut dyn FnMut() -> bool| {
        let began = std::time::Instant::now();
        while !done() {
            let shown = log.lock().expect("log").clone();
            assert!(
                began.elapsed() < limit,
                "{what}: not within {limit:?}; the terminal: {shown}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // A process's state letter (`T`: stopped).
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.trim_start().chars().next())
            })
    };
    let mut type_in = |bytes: &[u8]| input.write_all(bytes).expect("type");
    // One process, no forks: a shell stopped in the middle of a fork
    // (dash's vfork) cannot report its stop to anyone, with or without
    // quorumlock.
    type_in(
        format!(
            "{BIN} run jc -- sh -c 'echo $$ > {}; exec sleep 60'\n",
            pid_file.display()
        )
        .as_bytes(),
    );
    wait_for("the command runs", Duration::from_secs(10), &mut || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
    });
    let sleeper = pid_in(&pid_file);
    wait_for("it sleeps", Duration::from_secs(10), &mut || {
        std::fs::read(format!("/proc/{sleeper}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep"))
    });
    type_in(b"\x1a"); // Ctrl-Z
    wait_for(
        "the shell sees the job stopped",
        Duration::from_secs(10),
        &mut || seen("Stopped") == 1,
    );
    assert_eq!(state(sleeper), Some('T'));
    type_in(b"fg\n");
    wait_for(
        "fg continues the command",
        Duration::from_secs(10),
        &mut || state(sleeper) != Some('T'),
    );
    // Ctrl-C reaches the command in the foreground.
    type_in(b"\x03");
    type_in(b"echo rc=$?\n");
    wait_for(
        "the job ends by Ctrl-C",
        Duration::from_secs(10),
        &mut || seen("rc=130") == 1,
    );

    // Started in the background, a command that reads the terminal is
    // stopped by SIGTTIN: quorumlock says so and stops too, and `fg`
    // hands the command the terminal.
    let (answer, reader_pid) = (dir.path().join("answer"), dir.path().join("reader"));
    type_in(
        format!(
            "{BIN} run bg -- sh -c 'echo $$ > {}; read x; echo got:$x > {}' &\n",
            reader_pid.display(),
            answer.display()
        )
        .as_bytes(),
    );
    wait_for("quorumlock says why", Duration::from_secs(10), &mut || {
        seen("uses the terminal from the background") == 1
    });
    let sh = pid_in(&reader_pid);
    // quorumlock, the command's parent (the 4th field of its stat).
    let quorumlock: u32 = std::fs::read_to_string(format!("/proc/{sh}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.to_owned()))
        .and_then(|r| r.split_whitespace().nth(1).and_then(|p| p.parse().ok()))
        .expect("the command's parent");
    wait_for("quorumlock stops too", Duration::from_secs(10), &mut || {
        state(quorumlock) == Some('T')
    });
    // bash tells of a background job's change once it has reaped it, which
    // on a busy machine can be after a `jobs` typed at once (a loaded run
    // showed "Running" then): ask again until it says so, within a bound.
    let mut asked = Instant::now();
    type_in(b"jobs\n");
    wait_for(
        "the shell sees the job stopped",
        Duration::from_secs(10),
        &mut || {
            if seen("Stopped") >= 2 {
                return true;
            }
            if asked.elapsed() > Duration::from_millis(500) {
                type_in(b"jobs\n");
                asked = Instant::now();
            }
            false
        },
    );
    assert_eq!(state(sh), Some('T'), "stopped by SIGTTIN");
    type_in(b"fg\n");
    // Continued only once it has the terminal.
    wait_for(
        "fg continues the command",
        Duration::from_secs(10),
        &mut || state(sh) != Some('T'),
    );
    type_in(b"hello\n");
    wait_for(
        "the command reads the terminal",
        Duration::from_secs(10),
        &mut || std::fs::read_to_string(&answer).is_ok_and(|a| a.contains("got:hello")),
    );
    type_in(b"exit\n");
    drop(shell);
    let _ = reader.join();
}

#[test]
fn the_watcher_is_a_process_of_its_own_without_node_urls() {
    let testbed = Testbed::start(3).expect("nodes");
    let holder = common::hold(&testbed, &[], "w");
    let q = holder.running.0.id();
    // The children of every thread (the watcher is started from a
    // blocking thread, the command from the main one).
    let mut pids: Vec<u32> = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{q}/task")).expect("tasks") {
        let children = task.expect("a task").path().join("children");
        let children = std::fs::read_to_string(children).unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .map(|p| p.parse::<u32>().expect("pid")),
        );
    }
    assert_eq!(pids.len(), 2, "the command and the watcher: {pids:?}");
    let watcher = pids
        .iter()
        .copied()
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.ends_with(b"__watch\0"))
        })
        .expect("a watcher");
    let environ = std::fs::read(format!("/proc/{watcher}/environ")).expect("environ");
    assert!(
        !String::from_utf8_lossy(&environ).contains("QUORUMLOCK_NODES="),
        "the watcher has no node URLs"
    );
    let group = |pid: u32| {
        rustix::process::getpgid(rustix::process::Pid::from_raw(pid as i32))
            .expect("pgid")
            .as_raw_nonzero()
            .get() as u32
    };
    assert_eq!(group(watcher), watcher, "a group of its own");
    assert_ne!(group(watcher), group(q));
}
