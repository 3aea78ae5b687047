//! `quorumlock`: run a command under a distributed lock across N Redis
//! masters (a distributed flock), inspect locks, check nodes. See
//! `quorumlock --help`.
#![forbid(unsafe_code)]

mod args;
mod connect;
mod doctor;
mod nodes;
mod release;
mod run;
mod shown;
mod status;

use std::process::ExitCode;

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
    let from_command_line = matches.value_source("nodes") == Some(ValueSource::CommandLine);
    let outcome = runtime.block_on(async {
        let settings = Settings::resolve(&cli.nodes, from_command_line)?;
        nodes::warn_if_password_in_argv(&settings);
        match cli.command {
            Command::Run(args) => run::run(&settings, args).await,
            Command::Status(args) => status::status(&settings, args).await,
            Command::Doctor(args) => doctor::doctor(&settings, args).await,
            Command::Release(args) => release::release(&settings, args).await,
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("{}", shown::line(&format!("quorumlock: {failure}")));
            ExitCode::from(failure.code)
        }
    }
}
