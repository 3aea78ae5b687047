//! `quorumlock`: run a command under a distributed lock across N Redis
//! masters (a distributed flock), inspect locks, check nodes. See
//! `quorumlock --help`.
// One unsafe block, `run::child::before_exec`: what the command's process
// does between fork and exec (std's `pre_exec`), with its safety argument.
#![deny(unsafe_code)]

mod adopt;
mod args;
mod connect;
mod doctor;
mod lock_key;
mod nodes;
mod release;
mod run;
mod shown;
mod slots;
mod status;
mod watch;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::args::{Cli, Command, exit};
use crate::nodes::Settings;

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            // --help and --version print and succeed; the rest are usage errors.
            let code = if error.use_stderr() { exit::USAGE } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    if let Command::Watch = cli.command {
        return ExitCode::from(watch::watch());
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("quorumlock: cannot start: {error}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let from_command_line = nodes::CommandLine {
        nodes: matches.value_source("nodes") == Some(ValueSource::CommandLine),
        node_timeout: matches.value_source("node_timeout") == Some(ValueSource::CommandLine),
    };
    // On this (the main) thread: `run` starts the command from here, and
    // its parent-death signal is bound to the thread that forks it.
    let outcome = runtime.block_on(async {
        let settings = Settings::resolve(&cli.nodes, from_command_line)?;
        nodes::warn_if_password_in_argv(&settings);
        match cli.command {
            Command::Run(args) => run::run(&settings, args).await,
            Command::Status(args) => status::status(&settings, args).await,
            Command::Doctor(args) => doctor::doctor(&settings, args).await,
            Command::Release(args) => release::release(&settings, args).await,
            Command::Adopt(args) => adopt::adopt(&settings, args).await,
            Command::Watch => Ok(watch::watch()),
        }
    });
    finish_background_work(&runtime);
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("{}", shown::line(&format!("quorumlock: {failure}")));
            ExitCode::from(failure.code)
        }
    }
}

/// The longest the process waits for the library's work in the background.
const BACKGROUND_BOUND: Duration = Duration::from_secs(5);

/// Lets the library's background work finish before the process exits: a
/// rollback or release still on its way to a slow node (the library stops
/// waiting for such a node, never sending to it). Dropping the runtime
/// would cancel it and leave a key on that node until its TTL. Once every
/// lock service is dropped, what is left is that work; it is bounded by
/// the library (connect timeout + node timeout), and here too.
fn finish_background_work(runtime: &tokio::runtime::Runtime) {
    runtime.block_on(async {
        let began = Instant::now();
        let mut turns = 0u32;
        while runtime.metrics().num_alive_tasks() > 0 && began.elapsed() < BACKGROUND_BOUND {
            // Most of it ends within a few polls (connections closing):
            // yield first, and sleep only for what takes longer.
            if turns < 64 {
                turns += 1;
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
}
