//! The command line: what each subcommand takes, with the help text users
//! read. Parsing only; the subcommands' modules do the work.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Exit codes, as in sysexits.h where one fits (cron wrappers and shell
/// scripts test for them).
pub mod exit {
    /// The name is held by someone else (`--nonblock`, or `--wait` ran
    /// out). EX_TEMPFAIL; `--conflict-exit-code` changes it.
    pub const CONFLICT: u8 = 75;
    /// The lock was lost while the command ran: it was sent SIGTERM (then
    /// SIGKILL after `--kill-after`).
    pub const LOST: u8 = 76;
    /// Bad flags or arguments. EX_USAGE.
    pub const USAGE: u8 = 64;
    /// Too few nodes answered to decide. EX_UNAVAILABLE.
    pub const UNAVAILABLE: u8 = 69;
    /// A bad configuration value or file. EX_CONFIG.
    pub const CONFIG: u8 = 78;
    /// The command could not be started (as a shell's 127 / 126).
    pub const NOT_FOUND: u8 = 127;
    pub const NOT_EXECUTABLE: u8 = 126;
    /// `doctor` found an error.
    pub const DOCTOR_ERRORS: u8 = 1;
}

const AFTER_HELP: &str = "\
Nodes come from --nodes, else QUORUMLOCK_NODES, else the `nodes` of the --config file.
Durations: 30s, 1500ms, 2m, 1h 30m.

Exit codes of `run`:
  the command's own status   it ran under the lock (128+N if killed by signal N)
  75                         the name is held elsewhere (--conflict-exit-code)
  76                         the lock was lost while the command ran; it was signalled
  69                         too few nodes answered
  64                         bad flags or arguments
  78                         bad configuration
  126, 127                   the command could not be executed, or was not found";

/// Distributed locks across N independent Redis masters: run a command
/// under a lock (a distributed flock), see who holds a name, check nodes.
#[derive(Debug, Parser)]
#[command(name = "quorumlock", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub nodes: NodeArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the nodes come from.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The nodes: comma-separated redis:// (or rediss://) URLs, one per
    /// independent master.
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub nodes: Vec<String>,
    /// A TOML file with `nodes = ["redis://…", …]` and optional `ttl`,
    /// `quarantine` (durations as strings).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding NAME on a quorum of the nodes, renewed
    /// until the command ends.
    ///
    /// The command gets QUORUMLOCK_NAME, QUORUMLOCK_FENCING_TOKEN (larger
    /// than every earlier holder's: pass it to what the command writes) and
    /// QUORUMLOCK_OWNER in its environment. SIGINT, SIGTERM and SIGHUP are
    /// forwarded to it. If the lock is lost while it runs, it gets SIGTERM,
    /// then SIGKILL after --kill-after, and quorumlock exits with 76. The
    /// lock is released when the command ends, also when quorumlock itself
    /// gets SIGTERM (forwarded; the command's end is awaited first).
    #[command(after_help = AFTER_HELP)]
    Run(RunArgs),
    /// Show, per node, who holds each NAME: owner, hold count, time to
    /// live, fencing counter, and the node's epoch and quarantine.
    Status(StatusArgs),
    /// Check every node: reachability and round trip, server version,
    /// persistence, maxmemory-policy, clock offsets, ACL permissions, TLS.
    /// Exits with 1 if any finding is an error.
    Doctor(DoctorArgs),
    /// Release NAME on every node whatever its owner (an operator's tool:
    /// the holder learns at its next renewal).
    Release(ReleaseArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Wait at most this long for the name (default: wait until it is
    /// free).
    #[arg(long, short = 'w', value_parser = duration, value_name = "DURATION", conflicts_with = "nonblock")]
    pub wait: Option<Duration>,
    /// Do not wait: one attempt, and exit with the conflict code if the
    /// name is held.
    #[arg(long, short = 'n')]
    pub nonblock: bool,
    /// The exit code when the name is held elsewhere.
    #[arg(long, value_name = "CODE", default_value_t = exit::CONFLICT)]
    pub conflict_exit_code: u8,
    /// The lock's time to live on the nodes; the watchdog renews it every
    /// third of it while the command runs.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// Stop renewing after this long: the command is then signalled as for
    /// a lost lock.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub max_hold: Option<Duration>,
    /// After a lost lock's SIGTERM, how long the command has before SIGKILL.
    #[arg(long, value_parser = duration, value_name = "DURATION", default_value = "10s")]
    pub kill_after: Duration,
    /// The lock name.
    pub name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The lock names.
    #[arg(required = true)]
    pub names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON instead of one line per finding.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Required: release whatever the owner.
    #[arg(long, required = true)]
    pub force: bool,
    /// The lock name.
    pub name: String,
}

/// A duration like `30s` or `1500ms`; the error names the value.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("invalid duration {text:?}: {e}"))
}
