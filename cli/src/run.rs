//! `quorumlock run`: a command under a lock. Acquires with the watchdog
//! (saying why it waits), runs the command in a process group of its own
//! with the lock's identity in its environment and bound to quorumlock's
//! life, forwards signals, stops the command when the lock is lost or
//! `--max-hold` is reached, and releases once nothing of the command runs.

mod child;
mod job;
mod primitive;
mod supervise;
mod terminal;
mod waiting;

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use quorumlock::{Error, LockGuard};
use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::args::{PassNodes, RunArgs, exit};
use crate::connect::Inspector;
use crate::nodes::{Failure, Settings};
use crate::shown;
use crate::watch::Watcher;

use self::child::Spec;
use self::job::JobControl;
use self::primitive::{Held, Service};
use self::supervise::{Ended, Limits};
use self::terminal::Terminal;
use self::waiting::Waiting;

/// The signals quorumlock forwards to the command's group.
pub struct Signals {
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
    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::INT,
            _ = self.terminate.recv() => Signal::TERM,
            _ = self.hangup.recv() => Signal::HUP,
        }
    }
}

/// The longest name `run` takes: the command gets it as
/// `QUORUMLOCK_NAME=<name>`, and Linux passes no environment string over
/// 128 KiB (MAX_ARG_STRLEN, with its NUL).
const MAX_NAME: usize = 128 * 1024 - "QUORUMLOCK_NAME=".len() - 1;

/// Runs the command; returns the exit code.
pub async fn run(settings: &Settings, args: RunArgs) -> Result<u8, Failure> {
    if args.name().len() > MAX_NAME {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "{}: a name for `run` has at most {MAX_NAME} bytes (the command gets it in its environment)",
                shown::name(args.name())
            ),
        ));
    }
    // --max-hold is enforced here, not by the library's `max_hold` (which
    // stops renewing and lets the lock lapse under a command that may
    // still run): the lock stays renewed until the command has ended.
    // The command hands every run its fencing token: its one acquire reads
    // the counters, rather than the token reading them after it.
    let config = settings
        .builder(args.ttl)?
        .map(|b| b.watchdog(true).prefetch_fencing(true))
        .build()?;
    let shown_urls = settings.shown_urls()?;
    let service = Service::new(args.mode(), config);
    let mut signals = Signals::install()?;
    let waiting = Waiting {
        service: &service,
        name: args.name(),
        budget: if args.nonblock {
            Some(std::time::Duration::ZERO)
        } else {
            args.wait
        },
        quiet: args.quiet,
        inspector: Inspector::new(settings.nodes.iter().map(|u| settings.client(u)).collect()),
    };
    let acquired = tokio::select! {
        acquired = waiting.acquire() => acquired,
        signal = signals.next() => return Ok(128 + signal.as_raw() as u8),
    };
    let held = acquired.map_err(|error| refused(&args, &error))?;
    let outcome = hold(settings, &args, &held, &shown_urls, &mut signals).await;
    let report = held.release().await;
    let ended = outcome?;
    match ended {
        Ended::Exited { status, .. } => Ok(status_code(status)),
        Ended::Stopped(status) => {
            eprintln!(
                "{}",
                shown::line(&format!(
                    "quorumlock: {}: the command was stopped ({}); released on {} node(s)",
                    shown::name(args.name()),
                    describe(status),
                    report.released
                ))
            );
            Ok(exit::LOST)
        }
    }
}

/// Everything done while the lock is held: the fencing token, the watcher,
/// the command, its supervision and its leftovers. The caller releases.
async fn hold(
    settings: &Settings,
    args: &RunArgs,
    held: &Held,
    shown_urls: &[String],
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let guard: &LockGuard = held;
    // The watcher starts (a fork and exec, on a blocking thread) while the
    // fencing token's round trip is under way; it is needed only once the
    // command runs, and if it cannot start, neither does the command.
    let (token, watcher) = tokio::join!(
        fencing_token(guard),
        tokio::task::spawn_blocking(Watcher::start)
    );
    let token = token.map_err(|error| {
        Failure::new(
            exit::UNAVAILABLE,
            format!("{}: no fencing token: {error}", shown::name(args.name())),
        )
    })?;
    let mut watcher = watcher
        .map_err(std::io::Error::other)
        .and_then(|started| started)
        .map_err(|e| {
            Failure::new(
                exit::UNAVAILABLE,
                format!("cannot start the watcher process: {e}"),
            )
        })?;
    let mut env = vec![
        ("QUORUMLOCK_NAME", args.name().to_owned()),
        ("QUORUMLOCK_FENCING_TOKEN", token.to_string()),
        ("QUORUMLOCK_OWNER", guard.token().to_owned()),
    ];
    // Which permit or reader slot: a permit's fencing token rises across
    // the holders of its slot, not of the whole semaphore.
    if let Some(slot) = held.slot() {
        env.push(("QUORUMLOCK_SLOT", slot.to_string()));
    }
    match args.pass_nodes {
        Some(PassNodes::Redacted) => env.push(("QUORUMLOCK_NODES", shown_urls.join(","))),
        Some(PassNodes::WithPasswords) => env.push(("QUORUMLOCK_NODES", settings.nodes.join(","))),
        None => {}
    }
    let terminal = Terminal::open();
    let mut job = terminal.as_ref().and_then(JobControl::new);
    child::adopt_orphans();
    let mut child = child::spawn(&Spec {
        command: &args.command,
        env,
        // Only a quorumlock in the terminal's foreground hands it over.
        terminal: terminal.as_ref().filter(|t| t.is_ours()),
    })?;
    let group = child.group();
    if let Err(e) = watcher.arm(group) {
        eprintln!("quorumlock: warning: the watcher process is gone ({e})");
    }
    let limits = Limits {
        name: args.name(),
        kill_after: args.kill_after,
        max_hold: args.max_hold,
    };
    let ended = supervise::supervise(&mut child, guard, signals, &limits, job.as_mut()).await;
    let left = supervise::stop_leftovers(group, signals, args.kill_after).await;
    // A group quorumlock signalled may still be on its way out: only
    // leftovers of a command that ended by itself are news.
    if left
        && matches!(
            ended,
            Ended::Exited {
                signalled: false,
                ..
            }
        )
    {
        eprintln!(
            "{}",
            shown::line(&format!(
                "quorumlock: {}: the command left processes in its process group: they were stopped before the release",
                shown::name(args.name())
            ))
        );
    }
    if let Some(terminal) = &terminal {
        terminal.take_back(group);
    }
    watcher.disarm();
    Ok(ended)
}

/// How many rounds the fencing token gets: a round that too few nodes
/// confirm within the node timeout (a busy node) is asked again.
const FENCING_ROUNDS: u32 = 5;

/// The fencing token, asked again while the lock is held if a round fell
/// short.
async fn fencing_token(guard: &LockGuard) -> Result<u64, Error> {
    let mut round = 1;
    loop {
        match guard.fencing_token().await {
            Err(e) if e.is_retryable() && round < FENCING_ROUNDS && guard.is_held() => {
                tokio::time::sleep(std::time::Duration::from_millis(10 * u64::from(round))).await;
                round += 1;
            }
            outcome => return outcome,
        }
    }
}

/// The exit code and message for a lock that was not won.
fn refused(args: &RunArgs, error: &Error) -> Failure {
    let contended = match error {
        Error::Contended { .. } => true,
        Error::WaitBudgetExhausted { last, .. } => matches!(**last, Error::Contended { .. }),
        _ => false,
    };
    let name = shown::name(args.name());
    if contended {
        return Failure::new(
            args.conflict_exit_code,
            format!("{name}: held elsewhere ({error})"),
        );
    }
    match error {
        // The error names the name.
        Error::Config(_) | Error::InvalidKey { .. } | Error::InvalidPermits { .. } => {
            Failure::new(exit::USAGE, error.to_string())
        }
        _ => Failure::new(exit::UNAVAILABLE, format!("{name}: {error}")),
    }
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
