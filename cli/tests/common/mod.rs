//! What the tests of the built `quorumlock` share: the binary, spawned
//! commands stopped by their pid whatever happens, bounded waits on
//! events (a file appears, a line is printed, a process ends).
#![allow(dead_code)] // each test file uses its own part

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testbed::Testbed;
use rustix::process::{Pid, Signal, kill_process};

pub const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// A spawned `quorumlock`, stopped by its pid if the test ends first.
pub struct Running(pub Child);

impl Running {
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.0.id() as i32).expect("a pid")
    }

    pub fn signal(&self, signal: Signal) {
        kill_process(self.pid(), signal).expect("signal quorumlock");
    }

    pub fn wait_within(&mut self, limit: Duration) -> ExitStatus {
        let began = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                began.elapsed() < limit,
                "quorumlock did not end within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Running {
    /// SIGTERM first, so that quorumlock stops its command and releases,
    /// then SIGKILL if it lingers (the command dies with it).
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = kill_process(self.pid(), Signal::TERM);
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(15) {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn nodes(testbed: &Testbed) -> String {
    testbed.urls().join(",")
}

/// `quorumlock` with the testbed's nodes in `QUORUMLOCK_NODES`.
pub fn command(testbed: &Testbed) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("QUORUMLOCK_NODES", nodes(testbed));
    cmd
}

/// Runs `quorumlock ARGS` to its end (bounded by its own timeouts).
pub fn output<S: AsRef<OsStr>>(testbed: &Testbed, args: &[S]) -> Output {
    command(testbed)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run quorumlock")
}

pub fn spawn(mut cmd: Command) -> Running {
    Running(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn quorumlock"),
    )
}

/// Spawns with stderr written to `stderr` (read with [`wait_for_text`]).
pub fn spawn_logged(mut cmd: Command, stderr: &Path) -> Running {
    let file = std::fs::File::create(stderr).expect("stderr file");
    cmd.stderr(file);
    spawn(cmd)
}

pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let began = Instant::now();
    while !done() {
        assert!(began.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the file `path` contains `text`; returns the file's text.
pub fn wait_for_text(path: &Path, text: &str, limit: Duration) -> String {
    let mut seen = String::new();
    let began = Instant::now();
    loop {
        seen = std::fs::read_to_string(path).unwrap_or(seen);
        if seen.contains(text) {
            return seen;
        }
        assert!(
            began.elapsed() < limit,
            "{text:?} not written to {} within {limit:?}: {seen}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn code(status: ExitStatus) -> i32 {
    status.code().expect("quorumlock exits with a code")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Whether process `pid` has ended: gone, or a zombie (ended, waiting for
/// a parent that does not reap, as an init in a container may be).
pub fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // `pid (comm) S …`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| matches!(state, 'Z' | 'X')),
    }
}

/// The pid written to `file` by the command (`echo $$ > file`).
pub fn pid_in(file: &Path) -> u32 {
    std::fs::read_to_string(file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid")
}

/// A `run` that holds a name while its command sleeps.
pub struct Holder {
    pub running: Running,
    /// The holder's owner token (its `QUORUMLOCK_OWNER`).
    pub owner: String,
    _dir: tempfile::TempDir,
}

/// Starts `quorumlock run FLAGS NAME` with a command that writes its owner
/// token and sleeps; returns once the command runs.
pub fn hold(testbed: &Testbed, flags: &[&str], name: &str) -> Holder {
    let dir = tempfile::tempdir().expect("temp dir");
    let owner_file = dir.path().join("owner");
    let script = format!(
        "echo $QUORUMLOCK_OWNER > {}; exec sleep 60",
        owner_file.display()
    );
    let mut cmd = command(testbed);
    cmd.arg("run")
        .args(flags)
        .args([name, "--", "sh", "-c", &script]);
    let running = spawn(cmd);
    let mut owner = String::new();
    wait_for("the holder's command runs", Duration::from_secs(20), || {
        owner = std::fs::read_to_string(&owner_file).unwrap_or_default();
        owner.ends_with('\n')
    });
    Holder {
        running,
        owner: owner.trim().to_owned(),
        _dir: dir,
    }
}
