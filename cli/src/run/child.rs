//! The command under the lock: started in a process group of its own, with
//! the lock's identity and without the node URLs in its environment, and
//! bound to quorumlock's life.
//!
//! What holds if quorumlock dies without releasing:
//! - Linux (and FreeBSD): the kernel sends the command SIGKILL as
//!   quorumlock's main thread ends (`PR_SET_PDEATHSIG`), before anyone can
//!   see quorumlock gone. The child checks after setting it that quorumlock
//!   is still its parent, so a quorumlock that died while it started is
//!   not missed.
//! - Everywhere: the watcher (`watch`) SIGKILLs the command's process
//!   group when quorumlock's end of its pipe closes, which also takes
//!   the processes the command started.
//! - Processes that leave the command's group (`setsid`, a double fork
//!   into another group) are out of reach of both, as they are of flock(1).

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use tokio::process::Command;

use crate::args::exit;
use crate::nodes::Failure;
use crate::run::terminal::{SigttouBlocked, Terminal};

/// The running command.
pub struct Child {
    process: tokio::process::Child,
    /// Its process group (its pid: it leads the group).
    group: Pid,
}

/// What the command is started with.
pub struct Spec<'a> {
    pub command: &'a [String],
    /// Set in the command's environment.
    pub env: Vec<(&'static str, String)>,
    /// The terminal to hand the command, when quorumlock has it.
    pub terminal: Option<&'a Terminal>,
}

/// Starts the command. Must be called from the main thread (the
/// current-thread runtime runs every task there): the parent-death signal
/// fires when the thread that forked ends, and the main thread lives as
/// long as the process.
pub fn spawn(spec: &Spec<'_>) -> Result<Child, Failure> {
    let (program, rest) = spec
        .command
        .split_first()
        .ok_or_else(|| Failure::new(exit::USAGE, "no command after `--`"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        // The node URLs carry passwords: the command gets them only
        // through --pass-nodes (set in `env`).
        .env_remove("QUORUMLOCK_NODES")
        // Set only for a permit or reader (in `env`): not an outer run's.
        .env_remove("QUORUMLOCK_SLOT")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    // The child inherits this thread's signal mask: SIGTTOU stays blocked
    // until it has taken the terminal, then it restores the mask.
    let blocked = spec.terminal.map(|_| SigttouBlocked::new());
    let handoff = spec
        .terminal
        .map(|t| (t.clone(), blocked.as_ref().and_then(SigttouBlocked::before)));
    before_exec(&mut command, rustix::process::getpid(), handoff);
    let spawned = command.spawn();
    drop(blocked);
    let process = spawned.map_err(|e| {
        let code = match e.kind() {
            io::ErrorKind::NotFound => exit::NOT_FOUND,
            _ => exit::NOT_EXECUTABLE,
        };
        Failure::new(
            code,
            format!("cannot run {}: {e}", crate::shown::name(program)),
        )
    })?;
    let group = process
        .id()
        .and_then(|id| Pid::from_raw(id as i32))
        .ok_or_else(|| Failure::new(exit::NOT_EXECUTABLE, "the command ended at once"))?;
    Ok(Child { process, group })
}

/// What the child does between fork and exec: the parent-death signal,
/// the check that the parent is still there, and the terminal.
#[allow(unsafe_code)]
fn before_exec(
    command: &mut Command,
    parent: Pid,
    handoff: Option<(Terminal, Option<nix::sys::signal::SigSet>)>,
) {
    let set_up = move || -> io::Result<()> {
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
        {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died before the line above: then nobody
            // would send the signal. (Reparented, the child sees another
            // parent.) Built from a raw errno: nothing may allocate here.
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
        let _ = parent;
        if let Some((terminal, before)) = &handoff {
            // The group is already ours (std calls setpgid before this).
            let _ = rustix::termios::tcsetpgrp(terminal.fd(), rustix::process::getpid());
            if let Some(before) = before {
                nix::sys::signal::pthread_sigmask(
                    nix::sys::signal::SigmaskHow::SIG_SETMASK,
                    Some(before),
                    None,
                )?;
            }
        }
        Ok(())
    };
    // SAFETY: `set_up` runs in the forked child before exec, where the
    // parent's other threads (tokio's blocking pool) may have left locks
    // taken: only async-signal-safe calls are sound. It makes system calls
    // only (prctl, getppid, getpid, the TIOCSPGRP ioctl through rustix;
    // pthread_sigmask), takes no lock, and allocates nothing: its errors
    // come from raw errno values, and its captures are moved in, not
    // cloned.
    unsafe {
        command.pre_exec(set_up);
    }
}

impl Child {
    pub fn group(&self) -> Pid {
        self.group
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// Waits for the command (the group's leader) to end.
    pub async fn wait(&mut self) -> ExitStatus {
        // A wait error leaves no status to pass on: report a failure.
        self.process
            .wait()
            .await
            .unwrap_or_else(|_| ExitStatus::from_raw(1 << 8))
    }

    /// Sends `signal` to the command's whole process group.
    pub fn signal(&self, signal: Signal) {
        signal_group(self.group, signal);
    }
}

/// Makes quorumlock the reaper of the processes the command leaves
/// behind (Linux): when the command ends before its own children, they
/// are handed to quorumlock instead of init, so that quorumlock can tell a
/// group that still runs from one whose members have all ended but wait to
/// be reaped (an init that does not reap, in a container).
pub fn adopt_orphans() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // Without it the leftovers' check waits for the zombies until the
        // SIGKILL: slower, not less safe.
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    }
}

/// Sends `signal` to `group`; nothing to do if the group has ended.
pub fn signal_group(group: Pid, signal: Signal) {
    let _ = kill_process_group(group, signal);
}

/// Whether any process is left in `group` (zombies not yet reaped count).
pub fn group_alive(group: Pid) -> bool {
    test_kill_process_group(group).is_ok()
}
