//! The command line: what each subcommand takes, with the help text users
//! read. Parsing only; the subcommands' modules do the work.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use quorumlock::MultiSemaphore;

/// Exit codes, as in sysexits.h where one fits (cron wrappers and shell
/// scripts test for them). GUIDE.md's table and `--help` say the same.
pub mod exit {
    /// The name is held by someone else (`--nonblock`, or `--wait` ran
    /// out). EX_TEMPFAIL; `--conflict-exit-code` changes it.
    pub const CONFLICT: u8 = 75;
    /// The command was stopped because the lock was lost or `--max-hold`
    /// was reached: it was sent SIGTERM (then SIGKILL after `--kill-after`).
    pub const LOST: u8 = 76;
    /// Bad flags or arguments, including a bad `--nodes` /
    /// `QUORUMLOCK_NODES` value and a reserved name. EX_USAGE.
    pub const USAGE: u8 = 64;
    /// Too few nodes answered (or could vote) to decide. EX_UNAVAILABLE.
    pub const UNAVAILABLE: u8 = 69;
    /// A bad `--config` file. EX_CONFIG.
    pub const CONFIG: u8 = 78;
    /// The command could not be started (as a shell's 127 / 126).
    pub const NOT_FOUND: u8 = 127;
    pub const NOT_EXECUTABLE: u8 = 126;
    /// `doctor` found an error, or `adopt` left a node unadopted.
    pub const FINDINGS: u8 = 1;
}

const AFTER_HELP: &str = "\
Nodes come from --nodes, else QUORUMLOCK_NODES, else the `nodes` of the --config file.
A password in --nodes is visible to every user of this host (ps, /proc): prefer
QUORUMLOCK_NODES or a --config file only you can read. rediss:// nodes are checked
against the webpki roots (public CAs), or the CA of --tls-ca.
Durations: 30 (seconds), 1.5, 30s, 1500ms, 2m, 1h 30m.

Exit codes:
  its status     `run`: the command ran under the lock: its exit status (128+N if
                 signal N ended it)
  75             the name is held elsewhere (--nonblock, --wait ran out); see
                 --conflict-exit-code
  76             `run`: the lock was lost or --max-hold reached: the command was stopped
  69             too few nodes answered, or could vote yet (quarantine)
  64             bad flags or arguments: a bad --nodes or QUORUMLOCK_NODES, a reserved
                 name
  78             a bad --config file
  126, 127       `run`: the command could not be executed, or was not found
  128+N          `run`: quorumlock got signal N while it waited for the name
  1              `doctor` found an error; `adopt` left a node unadopted
  0              success";

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
    /// independent master. A password here shows in the process list:
    /// prefer QUORUMLOCK_NODES or --config.
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub nodes: Vec<String>,
    /// A TOML file with `nodes = ["redis://…", …]` and optional `ttl`,
    /// `quarantine`, `node_timeout` (durations: "30s", or a number of
    /// seconds) and `tls_ca` (a path, relative to the file).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How long each node may take to answer one call before it counts as
    /// failed (default 50ms): raise it for distant or busy nodes. Overrides
    /// the config file's `node_timeout`.
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_NODE_TIMEOUT",
        value_parser = positive_duration,
        value_name = "DURATION"
    )]
    pub node_timeout: Option<Duration>,
    /// A PEM file with the CA that signed the rediss:// nodes'
    /// certificates (default: the webpki roots, public CAs).
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_TLS_CA",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub tls_ca: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding NAME on a quorum of the nodes, renewed
    /// until the command ends.
    ///
    /// NAME is a mutex: one command at a time. With --shared or
    /// --exclusive it is a read-write lock instead (many readers or one
    /// writer), with --permits K a semaphore (at most K at once): three
    /// primitives that do not exclude each other, even under one name.
    ///
    /// The command gets QUORUMLOCK_NAME, QUORUMLOCK_FENCING_TOKEN (larger
    /// than every earlier holder's: pass it to what the command writes) and
    /// QUORUMLOCK_OWNER in its environment, and not the node URLs
    /// (QUORUMLOCK_NODES is removed; see --pass-nodes).
    ///
    /// The command runs in a process group of its own. SIGINT, SIGTERM and
    /// SIGHUP are forwarded to that group. Run from an interactive shell,
    /// the command gets the terminal, and when it is stopped (Ctrl-Z, or
    /// reading the terminal from the background) quorumlock stops too, so
    /// that the shell's `fg` and `bg` work. If the lock is lost, or
    /// --max-hold is reached, the group gets SIGTERM, then SIGKILL after
    /// --kill-after, and quorumlock exits with 76. When the command ends,
    /// processes it left in its group get SIGTERM (SIGKILL after
    /// --kill-after): nothing of it runs once the lock is released. The
    /// lock is released after that, also when quorumlock itself gets
    /// SIGTERM, SIGINT or SIGHUP (forwarded; the command's end is awaited
    /// first).
    ///
    /// If quorumlock dies without releasing (SIGKILL, a crash), the command
    /// dies with it: on Linux the kernel sends it SIGKILL at once
    /// (PR_SET_PDEATHSIG), and a watcher process SIGKILLs the rest of its
    /// process group. The name stays held on the nodes until its TTL runs
    /// out.
    ///
    /// Waiting for the name, quorumlock says why on stderr after 1 s, and
    /// again when the reason changes (held by whom and for how long, nodes
    /// quarantined or unreachable); --quiet silences it.
    #[command(after_help = AFTER_HELP)]
    Run(RunArgs),
    /// Show, per node, who holds each NAME: owner, hold count, time to
    /// live, fencing counter, and the node's epoch and quarantine. Without
    /// names, the names held on any node (found with a bounded SCAN).
    ///
    /// Besides the lock NAME (the `mutex` row), the held slots of the
    /// semaphore and the read-write lock NAME (`run --permits`, `--shared`,
    /// `--exclusive`): a row per permit and per reader (with how many
    /// the node holds), one for a writer.
    Status(StatusArgs),
    /// Check every node: reachability and round trip, server version,
    /// persistence, maxmemory-policy, clock offsets, ACL permissions, TLS.
    /// Exits with 1 if any finding is an error.
    Doctor(DoctorArgs),
    /// Release NAME on every node whatever its owner (an operator's tool:
    /// the holder learns at its next renewal).
    Release(ReleaseArgs),
    /// Let brand-new, empty servers vote at once instead of after the
    /// quarantine. Only for servers that never held this deployment's
    /// locks: see the warning it prints. Exits with 1 if a node was not
    /// adopted.
    Adopt(AdoptArgs),
    /// Internal: the watcher `run` starts to SIGKILL the command's process
    /// group if quorumlock dies.
    #[command(name = "__watch", hide = true)]
    Watch,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Wait at most this long for the name (default: wait until it is
    /// free). A bare number is seconds, as for flock -w.
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
    /// The longest the command may hold the name: then it is stopped as
    /// for a lost lock (SIGTERM to its group, SIGKILL after --kill-after,
    /// exit 76). The lock stays renewed until the command has ended, then
    /// it is released.
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub max_hold: Option<Duration>,
    /// After the SIGTERM of a lost lock or --max-hold, how long the command
    /// has before SIGKILL.
    #[arg(long, value_parser = duration, value_name = "DURATION", default_value = "10s")]
    pub kill_after: Duration,
    /// Print nothing while waiting for the name.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Give the command QUORUMLOCK_NODES: the URLs with their passwords
    /// replaced by *** (`redacted`, the default), or as configured
    /// (`with-passwords`).
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "redacted"
    )]
    pub pass_nodes: Option<PassNodes>,
    /// Run as a reader of the read-write lock NAME: readers run together
    /// (up to 32 at once), never beside an --exclusive writer of NAME. A
    /// read-write lock is not the mutex a plain `run NAME` takes: a
    /// reader does not exclude, and is not excluded by, a plain `run` of
    /// the same name. The command also gets QUORUMLOCK_SLOT (its reader
    /// slot, 0-31).
    #[arg(long, conflicts_with_all = ["exclusive", "permits"])]
    pub shared: bool,
    /// Run as the writer of the read-write lock NAME: alone, once its
    /// --shared readers and any other --exclusive writer have ended
    /// (readers that come while it waits wait behind it). Like --shared, it does not exclude a plain
    /// `run NAME` (the mutex): give every command on NAME --shared or
    /// --exclusive.
    #[arg(long, conflicts_with = "permits")]
    pub exclusive: bool,
    /// Take one of K permits of the semaphore NAME: at most K commands
    /// with --permits run on NAME at once (K: 1 to 1024; give every
    /// command on NAME the same K). Not the mutex of a plain `run NAME`, nor the read-write
    /// lock of --shared. The command also gets QUORUMLOCK_SLOT (which
    /// permit, 0 to K-1); its QUORUMLOCK_FENCING_TOKEN rises across the
    /// holders of that permit.
    #[arg(long, value_name = "K", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=i64::from(MultiSemaphore::MAX_PERMITS)))]
    pub permits: Option<u32>,
    /// The lock name, if it starts with `-` (as a NAME it would be taken
    /// for a flag).
    #[arg(long = "name", value_name = "NAME", conflicts_with = "name")]
    pub name_flag: Option<String>,
    /// The lock name.
    #[arg(required_unless_present = "name_flag")]
    pub name: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What `run` takes of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The mutex (no flag).
    Mutex,
    /// `--shared`: a reader of the read-write lock.
    Reader,
    /// `--exclusive`: the writer of the read-write lock.
    Writer,
    /// `--permits K`: one of K permits of the semaphore.
    Permit(u32),
}

impl RunArgs {
    pub fn mode(&self) -> Mode {
        match (self.shared, self.exclusive, self.permits) {
            (true, _, _) => Mode::Reader,
            (_, true, _) => Mode::Writer,
            (_, _, Some(k)) => Mode::Permit(k),
            _ => Mode::Mutex,
        }
    }

    /// The lock name, as NAME or `--name`.
    pub fn name(&self) -> &str {
        self.name_flag
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or_default()
    }
}

/// How `run --pass-nodes` gives the command the node URLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PassNodes {
    /// Passwords replaced by `***`.
    Redacted,
    /// As configured, passwords included.
    WithPasswords,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Without names: list at most this many held names.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
    /// The lock names (none: the names held on any node).
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

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// Required: the operator's word that every node is a brand-new server
    /// that never held this deployment's locks.
    #[arg(long)]
    pub confirm_new_servers: bool,
}

/// A duration like `30s`, `1500ms`, or a bare number of seconds (`30`,
/// `1.5`, as flock(1) takes them); the error names the value.
pub fn duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return trimmed
            .parse::<f64>()
            .ok()
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .ok_or_else(|| format!("invalid duration {text:?}: not a number of seconds"));
    }
    humantime::parse_duration(trimmed).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// A [`duration`] above zero.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        d if d.is_zero() => Err(format!("invalid duration {text:?}: must be above zero")),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_are_seconds() {
        assert_eq!(duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1500ms"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn bad_durations_name_the_value() {
        for bad in [
            "",
            "1.2.3",
            ".",
            "3x",
            "-1",
            "1e999",
            "99999999999999999999999",
        ] {
            let error = duration(bad).expect_err(bad);
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
        assert!(positive_duration("0").is_err());
    }
}
