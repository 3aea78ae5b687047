//! Job control for a command in a process group of its own, while
//! quorumlock has a controlling terminal: the shell watches quorumlock,
//! not the command, so quorumlock passes the command's stops on.
//!
//! - The command is stopped (Ctrl-Z while it has the terminal, or SIGTTIN
//!   reading the terminal from the background): quorumlock takes the
//!   terminal back and stops itself, so that the shell sees its job
//!   stopped and gets the terminal.
//! - quorumlock is continued (`fg`, `bg`, or `kill -CONT`): it gives the
//!   command the terminal if quorumlock has the foreground, and continues
//!   the command's group.
//!
//! While quorumlock is stopped it renews nothing: the lock may be lost
//! meanwhile, and is then handled as any loss once it runs again.

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, getpid, kill_process, waitid};
use tokio::signal::unix::{SignalKind, signal};

use crate::run::child::{Child, signal_group};
use crate::run::terminal::Terminal;
use crate::shown;

/// What job control listens to. Made before the command starts: a command
/// that reads the terminal from the background stops at once, and a
/// SIGCHLD before the listener exists would be missed.
pub struct JobControl {
    terminal: Terminal,
    /// SIGCHLD: the command may have stopped.
    children: tokio::signal::unix::Signal,
    /// SIGCONT: quorumlock was continued.
    continued: tokio::signal::unix::Signal,
}

/// What happened.
pub enum JobEvent {
    ChildChanged,
    Continued,
}

impl JobControl {
    /// Job control with `terminal`; `None` if its signals cannot be
    /// handled (then a stopped command stays stopped, as without a
    /// terminal).
    pub fn new(terminal: &Terminal) -> Option<JobControl> {
        Some(JobControl {
            terminal: terminal.clone(),
            children: signal(SignalKind::child()).ok()?,
            continued: signal(SignalKind::from_raw(Signal::CONT.as_raw())).ok()?,
        })
    }

    pub async fn next(&mut self) -> JobEvent {
        tokio::select! {
            _ = self.children.recv() => JobEvent::ChildChanged,
            _ = self.continued.recv() => JobEvent::Continued,
        }
    }

    pub fn handle(&self, event: JobEvent, child: &Child, name: &str) {
        match event {
            JobEvent::ChildChanged => self.follow_a_stop(child, name),
            JobEvent::Continued => {
                if self.terminal.is_ours() {
                    self.terminal.give(child.group());
                }
                signal_group(child.group(), Signal::CONT);
            }
        }
    }

    /// If the command is stopped: takes the terminal back and stops
    /// quorumlock.
    fn follow_a_stop(&self, child: &Child, name: &str) {
        let Some(pid) = child.pid().and_then(|id| Pid::from_raw(id as i32)) else {
            return;
        };
        // WSTOPPED alone: an exit is left for the wait on the command.
        let status = waitid(
            WaitId::Pid(pid),
            WaitIdOptions::STOPPED | WaitIdOptions::NOHANG,
        );
        let Ok(Some(status)) = status else { return };
        if !status.stopped() {
            return;
        }
        let tty_signal = [Signal::TTIN, Signal::TTOU].map(|s| s.as_raw());
        if status
            .stopping_signal()
            .is_some_and(|s| tty_signal.contains(&s))
        {
            eprintln!(
                "{}",
                shown::line(&format!(
                    "quorumlock: {}: the command was stopped: it uses the terminal from the background; `fg` continues it",
                    shown::name(name)
                ))
            );
        }
        self.terminal.take_back(child.group());
        // Stops here until continued; then SIGCONT's handler runs. (The
        // kernel discards it in an orphaned process group: then nothing
        // continues the command but a SIGCONT sent to quorumlock.)
        let _ = kill_process(getpid(), Signal::TSTP);
    }
}
