//! `quorumlock run`: a command under a lock. Acquires with the watchdog,
//! runs the child with the lock's identity in its environment, forwards
//! signals, signals the child when the lock is lost, and releases when the
//! child ends.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use quorumlock::{Error, LockGuard, MultiLock, Wait};
use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::args::{RunArgs, exit};
use crate::nodes::{Failure, Settings};

/// The signals quorumlock forwards to the child.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installed before the acquire: a SIGTERM while waiting for the name
    /// must end the wait, not kill quorumlock with a lock half taken.
    fn install() -> Result<Signals, Failure> {
        let on = |kind| {
            signal(kind)
                .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("signal handler: {e}")))
        };
        Ok(Signals {
            interrupt: on(SignalKind::interrupt())?,
            terminate: on(SignalKind::terminate())?,
            hangup: on(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::INT,
            _ = self.terminate.recv() => Signal::TERM,
            _ = self.hangup.recv() => Signal::HUP,
        }
    }
}

/// Runs the command; returns the exit code.
pub async fn run(settings: &Settings, args: RunArgs) -> Result<u8, Failure> {
    let builder = settings.builder(args.ttl)?.map(|b| {
        let b = b.watchdog(true);
        match args.max_hold {
            Some(max) => b.max_hold(max),
            None => b,
        }
    });
    let lock = MultiLock::new(builder.build()?);
    let mut signals = Signals::install()?;
    let acquired = tokio::select! {
        acquired = acquire(&lock, &args) => acquired,
        signal = signals.next() => return Ok(128 + signal.as_raw() as u8),
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) => return Err(refused(&args, &error)),
    };
    let token = match guard.fencing_token().await {
        Ok(token) => token,
        Err(error) => {
            guard.release().await;
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("{}: no fencing token: {error}", args.name),
            ));
        }
    };
    let child = match spawn(&args, &guard, token) {
        Ok(child) => child,
        Err(failure) => {
            guard.release().await;
            return Err(failure);
        }
    };
    let ended = supervise(child, &guard, &mut signals, args.kill_after).await;
    let report = guard.release().await;
    match ended {
        Ended::Exited(status) => Ok(status_code(status)),
        Ended::Lost(status) => {
            eprintln!(
                "quorumlock: {}: the command was stopped ({}); released on {} node(s)",
                args.name,
                describe(status),
                report.released
            );
            Ok(exit::LOST)
        }
    }
}

async fn acquire(lock: &MultiLock, args: &RunArgs) -> Result<LockGuard, Error> {
    // Connected first (bounded by the connect timeout): a fresh process
    // must not spend its one `--nonblock` attempt's node timeout on
    // connecting. A node that fails here fails the attempt, which says so.
    lock.warm_up().await;
    if args.nonblock {
        return lock.try_acquire(&args.name).await;
    }
    let wait = args.wait.unwrap_or(Duration::MAX);
    lock.acquire(&args.name, Wait::up_to(wait)).await
}

/// The exit code and message for a lock that was not won.
fn refused(args: &RunArgs, error: &Error) -> Failure {
    let contended = match error {
        Error::Contended { .. } => true,
        Error::WaitBudgetExhausted { last, .. } => matches!(**last, Error::Contended { .. }),
        _ => false,
    };
    if contended {
        return Failure::new(
            args.conflict_exit_code,
            format!("{}: held elsewhere ({error})", args.name),
        );
    }
    let code = match error {
        Error::Config(_) | Error::InvalidKey { .. } => exit::USAGE,
        _ => exit::UNAVAILABLE,
    };
    Failure::new(code, format!("{}: {error}", args.name))
}

fn spawn(args: &RunArgs, guard: &LockGuard, token: u64) -> Result<Child, Failure> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::new(exit::USAGE, "no command after `--`"))?;
    Command::new(program)
        .args(rest)
        .env("QUORUMLOCK_NAME", &args.name)
        .env("QUORUMLOCK_FENCING_TOKEN", token.to_string())
        .env("QUORUMLOCK_OWNER", guard.token())
        .spawn()
        .map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::NOT_EXECUTABLE,
            };
            Failure::new(code, format!("cannot run {program:?}: {e}"))
        })
}

enum Ended {
    /// The child ended while the lock was held.
    Exited(ExitStatus),
    /// The lock was lost; the child was signalled and has ended.
    Lost(ExitStatus),
}

/// Waits for the child, forwarding signals; on a loss, SIGTERM then
/// SIGKILL after `kill_after`.
async fn supervise(
    mut child: Child,
    guard: &LockGuard,
    signals: &mut Signals,
    kill_after: Duration,
) -> Ended {
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut lost_reason = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => {
                // A wait error leaves no status to pass on: report a failure.
                let status = status.unwrap_or_else(|_| ExitStatus::from_raw(1 << 8));
                return match lost_reason {
                    Some(_) => Ended::Lost(status),
                    None => Ended::Exited(status),
                };
            }
            signal = signals.next() => forward(&child, signal),
            notice = &mut lost, if lost_reason.is_none() => {
                eprintln!(
                    "quorumlock: the lock can no longer be proven held ({}): sending SIGTERM, SIGKILL in {}",
                    notice.reason,
                    humantime::format_duration(kill_after)
                );
                lost_reason = Some(notice.reason);
                forward(&child, Signal::TERM);
                kill_at = Some(Instant::now() + kill_after);
            }
            () = kill_timer => {
                kill_at = None;
                forward(&child, Signal::KILL);
            }
        }
    }
}

fn forward(child: &Child, signal: Signal) {
    let Some(pid) = child.id().and_then(|id| Pid::from_raw(id as i32)) else {
        return; // already reaped
    };
    // The child may have ended between the check and the kill: nothing to do.
    let _ = kill_process(pid, signal);
}

/// The child's status as an exit code: its code, or 128 + the signal that
/// ended it (as shells report it).
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with {code}"),
        (None, Some(signal)) => format!("ended by signal {signal}"),
        (None, None) => "it ended".to_owned(),
    }
}
