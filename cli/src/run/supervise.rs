//! While the command runs: forwards signals to its group, stops it when
//! the lock is lost or `--max-hold` is reached (SIGTERM, SIGKILL after
//! `--kill-after`), passes its stops on to the shell (`job`), and once it
//! has ended, stops what it left in its group, so that nothing of it runs
//! after the release.

use std::time::Duration;

use quorumlock::LockGuard;
use rustix::process::{Pid, Signal, WaitOptions, waitpgid};
use tokio::time::Instant;

use crate::run::Signals;
use crate::run::child::{Child, group_alive, signal_group};
use crate::run::job::{JobControl, JobEvent};
use crate::shown;

/// How the command ended.
pub enum Ended {
    /// On its own while the lock was held. `signalled`: quorumlock
    /// forwarded a signal to its group (what is left of the group may be
    /// on its way out).
    Exited {
        status: std::process::ExitStatus,
        signalled: bool,
    },
    /// Stopped by quorumlock: the lock was lost, or `--max-hold` reached.
    Stopped(std::process::ExitStatus),
}

/// What the supervision needs to know.
pub struct Limits<'a> {
    pub name: &'a str,
    pub kill_after: Duration,
    pub max_hold: Option<Duration>,
}

/// Why quorumlock stops the command.
enum Stop {
    Lost(String),
    MaxHold(Duration),
}

/// Waits for the command, forwarding signals; stops it on a loss or at
/// `--max-hold`. Returns once the command has ended.
pub async fn supervise(
    child: &mut Child,
    guard: &LockGuard,
    signals: &mut Signals,
    limits: &Limits<'_>,
    mut job: Option<&mut JobControl>,
) -> Ended {
    let lost = guard.lost();
    tokio::pin!(lost);
    let max_hold = async {
        match limits.max_hold {
            Some(max) => tokio::time::sleep(max).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(max_hold);
    // It may have stopped already (reading the terminal at once).
    if let Some(job) = &job {
        job.handle(JobEvent::ChildChanged, child, limits.name);
    }
    let mut stopping = false;
    let mut signalled = false;
    let mut kill_at: Option<Instant> = None;
    loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let job_event = async {
            match job.as_mut() {
                Some(job) => job.next().await,
                None => std::future::pending().await,
            }
        };
        let stop = tokio::select! {
            status = child.wait() => {
                return if stopping {
                    Ended::Stopped(status)
                } else {
                    Ended::Exited { status, signalled }
                };
            }
            signal = signals.next() => {
                child.signal(signal);
                signalled = true;
                None
            }
            notice = &mut lost, if !stopping => Some(Stop::Lost(notice.reason.to_string())),
            () = &mut max_hold, if !stopping => Some(Stop::MaxHold(limits.max_hold.unwrap_or_default())),
            () = kill_timer => {
                kill_at = None;
                child.signal(Signal::KILL);
                None
            }
            event = job_event => {
                if let Some(job) = &job {
                    job.handle(event, child, limits.name);
                }
                None
            }
        };
        if let Some(stop) = stop {
            let why = match stop {
                Stop::Lost(reason) => {
                    format!("the lock can no longer be proven held ({reason})")
                }
                Stop::MaxHold(max) => {
                    format!("--max-hold ({}) reached", humantime::format_duration(max))
                }
            };
            eprintln!(
                "{}",
                shown::line(&format!(
                    "quorumlock: {why}: sending SIGTERM, SIGKILL in {}",
                    humantime::format_duration(limits.kill_after)
                ))
            );
            stopping = true;
            child.signal(Signal::TERM);
            kill_at = Some(Instant::now() + limits.kill_after);
        }
    }
}

/// After the command ended: what it left in its process group gets
/// SIGTERM, then SIGKILL after `kill_after`. Returns whether anything was
/// left.
pub async fn stop_leftovers(group: Pid, signals: &mut Signals, kill_after: Duration) -> bool {
    if !group_left(group) {
        return false;
    }
    signal_group(group, Signal::TERM);
    let kill_at = Instant::now() + kill_after;
    // Nothing tells when a group empties (its members need not be our
    // children): look every 10 ms, bounded by the SIGKILL.
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while group_left(group) {
        if Instant::now() >= kill_at {
            // Final: nothing of the group runs user code after this.
            signal_group(group, Signal::KILL);
            break;
        }
        tokio::select! {
            _ = tick.tick() => {}
            signal = signals.next() => signal_group(group, signal),
        }
    }
    true
}

/// Whether any process is left in `group`, once the ended ones that were
/// handed to quorumlock (the subreaper, see `child::adopt_orphans`) are
/// reaped: a zombie runs nothing.
fn group_left(group: Pid) -> bool {
    // Only members of the command's group: the leader was reaped already
    // (its status is the command's), and the watcher has a group of its
    // own.
    while let Ok(Some(_)) = waitpgid(group, WaitOptions::NOHANG) {}
    group_alive(group)
}
