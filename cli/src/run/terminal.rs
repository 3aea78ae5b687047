//! The controlling terminal. The command runs in a process group of its
//! own, so when quorumlock runs in the terminal's foreground it hands the
//! terminal to the command (as a shell hands it to a job): otherwise a
//! command that reads the terminal (a prompt, `sudo`'s password) would be
//! stopped by SIGTTIN while it holds the lock, and Ctrl-C would not reach
//! it. `job` follows the command's stops and quorumlock's continues.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use nix::sys::signal::{SigSet, SigmaskHow, Signal as NixSignal, pthread_sigmask};
use rustix::process::{Pid, getpgrp};
use rustix::termios::{tcgetpgrp, tcsetpgrp};

/// The controlling terminal, opened once (shared with the child's set-up).
#[derive(Clone)]
pub struct Terminal {
    tty: Arc<File>,
}

impl Terminal {
    /// The controlling terminal; `None` under cron, systemd, a daemon.
    pub fn open() -> Option<Terminal> {
        // O_CLOEXEC by std; `/dev/tty` is the controlling terminal whatever
        // stdin is (a command may read it directly, as sudo does).
        let tty = File::options()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        Some(Terminal { tty: Arc::new(tty) })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.tty.as_fd()
    }

    /// Whether quorumlock's own group is in the terminal's foreground (after
    /// a `fg`, not after a `bg`).
    pub fn is_ours(&self) -> bool {
        tcgetpgrp(self.fd()).is_ok_and(|group| group == getpgrp())
    }

    /// Gives the terminal to `group`.
    pub fn give(&self, group: Pid) {
        // Best effort: without it the command still runs, in the background.
        let _ = with_sigttou_blocked(|| tcsetpgrp(self.fd(), group));
    }

    /// Takes the terminal back from `group`, if `group` still has it (a shell
    /// that took it meanwhile keeps it).
    pub fn take_back(&self, group: Pid) {
        if tcgetpgrp(self.fd()).is_ok_and(|holder| holder == group) {
            // From the background, tcsetpgrp raises SIGTTOU unless blocked.
            let _ = with_sigttou_blocked(|| tcsetpgrp(self.fd(), getpgrp()));
        }
    }
}

/// Runs `f` with SIGTTOU blocked on this thread; returns its result.
pub fn with_sigttou_blocked<T>(f: impl FnOnce() -> T) -> T {
    let _blocked = SigttouBlocked::new();
    f()
}

/// SIGTTOU blocked on this thread until dropped. A child forked meanwhile
/// inherits the mask: it restores [`before`](Self::before) itself.
pub struct SigttouBlocked {
    before: Option<SigSet>,
}

impl SigttouBlocked {
    pub fn new() -> SigttouBlocked {
        let mut block = SigSet::empty();
        block.add(NixSignal::SIGTTOU);
        let mut before = SigSet::empty();
        let ok = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&block), Some(&mut before)).is_ok();
        SigttouBlocked {
            before: ok.then_some(before),
        }
    }

    /// The mask before, if it was changed.
    pub fn before(&self) -> Option<SigSet> {
        self.before
    }
}

impl Drop for SigttouBlocked {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(before), None);
        }
    }
}
