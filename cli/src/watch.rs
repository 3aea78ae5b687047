//! The watcher: a small process `run` starts next to the command, so that
//! nothing of the command outlives a quorumlock that dies without
//! releasing (SIGKILL, a crash, the OOM killer).
//!
//! On Linux the kernel SIGKILLs the command itself when quorumlock dies
//! (`PR_SET_PDEATHSIG`, see `run::child`), but not what the command started
//! (a shell script's own children). The watcher covers those, and every
//! platform: it reads a pipe whose only writer is quorumlock. The kernel
//! closes that pipe when quorumlock ends, however it ends; if quorumlock
//! had not said "done" first, the watcher SIGKILLs the command's process
//! group. The watcher sits in a process group of its own, so that signals
//! meant for quorumlock's job or the command's group do not reach it.
//!
//! The protocol on the pipe: `<pgid>\n` once the command runs, then `done\n`
//! after the command's group has ended.

use std::io::{self, BufRead, BufReader, PipeWriter, Read, Write};
use std::process::{Command, Stdio};

use rustix::process::{Pid, Signal, kill_process_group};

/// quorumlock's end of the pipe.
pub struct Watcher {
    pipe: PipeWriter,
}

impl Watcher {
    /// Starts the watcher (the running binary, `__watch`).
    pub fn start() -> io::Result<Watcher> {
        let (reader, writer) = io::pipe()?;
        let mut command = Command::new(own_binary()?);
        command
            .arg("__watch")
            .stdin(reader)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: a Ctrl-C or a `kill -- -PGID` meant for
            // quorumlock's job must not end the watcher with it.
            .env_remove("QUORUMLOCK_NODES");
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        // Never waited for: it ends right after quorumlock says "done", or
        // outlives quorumlock on purpose. The process exits soon after.
        let _watcher = command.spawn()?;
        Ok(Watcher { pipe: writer })
    }

    /// Tells the watcher which process group to SIGKILL if quorumlock dies.
    pub fn arm(&mut self, group: Pid) -> io::Result<()> {
        writeln!(self.pipe, "{}", group.as_raw_nonzero())
    }

    /// The command's group has ended: the watcher exits without a signal.
    pub fn disarm(mut self) {
        // Nothing to do if it is already gone.
        let _ = self.pipe.write_all(b"done\n");
    }
}

/// The binary to start as the watcher: this one (by its path, so that
/// `ps` names it), or, if it was replaced on disk while running (an
/// upgrade), the running image itself.
fn own_binary() -> io::Result<std::path::PathBuf> {
    let path = std::env::current_exe()?;
    let replaced = path.to_string_lossy().ends_with(" (deleted)");
    if replaced && cfg!(target_os = "linux") {
        return Ok("/proc/self/exe".into());
    }
    Ok(path)
}

/// The watcher's side (`quorumlock __watch`): waits for the pipe to close,
/// and SIGKILLs the named group unless told "done" first.
pub fn watch() -> u8 {
    let mut stdin = BufReader::new(io::stdin().lock());
    let mut group = None;
    let mut line = String::new();
    loop {
        line.clear();
        // Bounded: a line longer than a pid is not quorumlock's.
        match (&mut stdin).take(64).read_line(&mut line) {
            // The pipe closed: quorumlock has ended.
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        match line.trim() {
            "done" => return 0,
            pid => group = pid.parse::<i32>().ok().and_then(Pid::from_raw),
        }
    }
    if let Some(group) = group {
        // Gone already: nothing to do.
        let _ = kill_process_group(group, Signal::KILL);
    }
    0
}
