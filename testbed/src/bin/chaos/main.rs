//! `testbed/run chaos`: the failover chaos suite.
//!
//! - `chaos [--duration 120s] [--nodes 5] [--seed N] [--faults a,b,…]`
//!   runs the mix and writes `target/chaos/<run>/history.jsonl`,
//!   `report.json` and `timeline.svg`, then prints the summary table.
//! - `chaos --docker [--duration …] [--seed …]` runs the same mix on the
//!   docker testbed (`testbed/docker-compose.yml`, brought up if it is not
//!   up, and down again afterwards) with container-level faults.
//! - `chaos control [NAME…]` runs negative controls (all by default); each
//!   must be caught by the checker.
//! - `chaos worker …` is one worker process (started by the run).
//!
//! Exit status: 0 when the mix passes (or every control is caught), 1 when
//! it fails or is invalid (coverage below its floors), 2 on bad usage.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use quorumlock_testbed::chaos::checker::{CheckReport, Floors, Verdict, ViolationKind};
use quorumlock_testbed::chaos::controls::{self, Control};
use quorumlock_testbed::chaos::docker_faults;
use quorumlock_testbed::chaos::docker_mix::{self, DockerMixOptions};
use quorumlock_testbed::chaos::faults;
use quorumlock_testbed::chaos::mix::{self, External, MixOptions};
use quorumlock_testbed::chaos::worker::{self, WorkerOptions};
use quorumlock_testbed::chaos::{self, ChaosError};

#[derive(Parser, Debug)]
#[command(name = "chaos", about = "quorumlock's failover chaos suite")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    mix: MixArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run negative controls (all of them by default).
    Control {
        /// Which: single_node_failover, immediate_restart, fast_clocks,
        /// client_pause, lost_release, extra_permit, partial_writer.
        names: Vec<String>,
        /// Where runs go (a subdirectory per run).
        #[arg(long, default_value = "target/chaos")]
        out: PathBuf,
    },
    /// Check a run's history again (e.g. after changing the checker): reads
    /// DIR/history.jsonl (unchanged), rewrites DIR/report.json and
    /// DIR/timeline.svg, prints the table. No coverage floors.
    Check {
        /// The run's directory.
        dir: PathBuf,
    },
    /// One worker process (started by the run, not by hand).
    #[command(hide = true)]
    Worker(Box<WorkerArgs>),
}

#[derive(Args, Debug)]
struct MixArgs {
    /// How long faults are injected: 120s, 2m, 90 (seconds).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    duration: Duration,
    /// Lock nodes (at least 3; the last is a master with a replica).
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Seed of every random choice; the default is the current time.
    #[arg(long)]
    seed: Option<u64>,
    /// Fault kinds, comma-separated, or `all`.
    #[arg(long, default_value = "all")]
    faults: String,
    /// Worker processes.
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// Read-write lock tasks per worker (reads and writes of rw0 and rw1;
    /// 0: none).
    #[arg(long, default_value_t = 1)]
    rw_tasks: usize,
    /// Semaphore tasks per worker (permits of `sem`; 0: none).
    #[arg(long, default_value_t = 1)]
    permit_tasks: usize,
    /// The semaphore's number of permits K.
    #[arg(long, default_value_t = 3)]
    permits: u32,
    /// Where runs go (a subdirectory per run).
    #[arg(long, default_value = "target/chaos")]
    out: PathBuf,
    /// Run against servers you started (e.g. testbed/docker-compose.yml):
    /// the lock nodes' URLs, comma-separated. Only link and client faults
    /// apply; needs --resource.
    #[arg(long, value_delimiter = ',', requires = "resource")]
    external: Vec<String>,
    /// With --external: the server for the protected counters.
    #[arg(long)]
    resource: Option<String>,
    /// Run on the docker testbed (testbed/docker-compose.yml, project
    /// quorumlock-testbed): brought up if it is not up, and down again
    /// afterwards; container-level faults (--faults takes their names).
    /// Lock nodes: node1… and the Sentinel group (--nodes 3 to 6).
    #[arg(long, conflicts_with = "external")]
    docker: bool,
    /// With --docker: the image to bring the deployment up with, unless
    /// QUORUMLOCK_REDIS_IMAGE names one.
    #[arg(long, default_value = quorumlock_testbed::docker::LOCAL_IMAGE)]
    image: String,
    /// With --docker: leave a deployment the run brought up running.
    #[arg(long)]
    keep_up: bool,
    /// Coverage floors of the full run: acquisitions (scaled to the
    /// duration: 125 per second, 25 with --docker), faults (one per 4 s),
    /// every kind given (with --docker each 5 times in 120 s), 25% of
    /// acquisitions started during a fault. `--no-floors` checks safety
    /// only.
    #[arg(long)]
    no_floors: bool,
}

#[derive(Args, Debug)]
struct WorkerArgs {
    #[arg(long)]
    id: String,
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    #[arg(long)]
    resource: String,
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    #[arg(long)]
    long_key: Option<String>,
    #[arg(long)]
    tasks: usize,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    node_timeout_ms: u64,
    #[arg(long)]
    drift_factor: f64,
    #[arg(long)]
    history: PathBuf,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    pause_before_write: Option<u64>,
    #[arg(long)]
    holds_per_task: Option<u64>,
    #[arg(long, value_delimiter = ',')]
    rw_keys: Vec<String>,
    #[arg(long, default_value_t = 0)]
    rw_tasks: usize,
    #[arg(long, requires = "permits")]
    semaphore: Option<String>,
    #[arg(long)]
    permits: Option<u32>,
    #[arg(long, default_value_t = 0)]
    permit_tasks: usize,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => t.split_at(at),
        None => (t, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("bad duration {text:?}: use e.g. 120s, 2m or 90"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("bad duration {text:?}: too long")),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("bad duration {text:?}: the units are ms, s and m")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Worker(args)) => run_worker(*args),
        Some(Command::Control { names, out }) => run_controls(&names, &out),
        Some(Command::Check { dir }) => recheck(&dir),
        None => run_mix(cli.mix),
    }
}

fn run_worker(args: WorkerArgs) -> ExitCode {
    let options = WorkerOptions {
        id: args.id,
        nodes: args.nodes,
        resource: args.resource,
        keys: args.keys,
        long_key: args.long_key,
        tasks: args.tasks,
        ttl: Duration::from_millis(args.ttl_ms),
        node_timeout: Duration::from_millis(args.node_timeout_ms),
        drift_factor: args.drift_factor,
        history: args.history,
        seed: args.seed,
        pause_before_write: args.pause_before_write,
        holds_per_task: args.holds_per_task,
        rw_keys: args.rw_keys,
        rw_tasks: args.rw_tasks,
        semaphore: args.semaphore.zip(args.permits),
        permit_tasks: args.permit_tasks,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("worker: starting a Tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(worker::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::FAILURE
        }
    }
}

fn self_exe() -> Result<PathBuf, ExitCode> {
    std::env::current_exe().map_err(|e| {
        eprintln!("chaos: cannot find its own binary to start workers: {e}");
        ExitCode::FAILURE
    })
}

/// The kinds `--faults` names, or the exit status of a list that names
/// none or an unknown one.
fn chosen<K, E: std::fmt::Display>(
    parsed: Result<Vec<K>, E>,
    text: &str,
) -> Result<Vec<K>, ExitCode> {
    match parsed {
        Ok(kinds) if !kinds.is_empty() => Ok(kinds),
        Ok(_) => {
            eprintln!("chaos: --faults {text:?} names no fault");
            Err(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("chaos: --faults: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// A seed from the clock, when none is given.
fn default_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() % 100_000)
        .unwrap_or(1)
}

fn run_id(prefix: &str, seed: u64) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{prefix}-{secs}-seed{seed}")
}

fn run_mix(args: MixArgs) -> ExitCode {
    if args.docker {
        return run_docker(args);
    }
    let external = match (&args.external[..], &args.resource) {
        ([], None) => None,
        ([], Some(_)) => {
            eprintln!("chaos: --resource only applies with --external");
            return ExitCode::from(2);
        }
        (nodes, Some(resource)) => Some(External {
            nodes: nodes.to_vec(),
            resource: resource.clone(),
        }),
        (_, None) => {
            eprintln!("chaos: --external needs --resource");
            return ExitCode::from(2);
        }
    };
    let parsed = faults::parse_list(&args.faults).map(|kinds| {
        if external.is_some() && args.faults == "all" {
            kinds
                .into_iter()
                .filter(|k| External::applicable(*k))
                .collect()
        } else {
            kinds
        }
    });
    let kinds = match chosen(parsed, &args.faults) {
        Ok(kinds) => kinds,
        Err(code) => return code,
    };
    let exe = match self_exe() {
        Ok(exe) => exe,
        Err(code) => return code,
    };
    let seed = args.seed.unwrap_or_else(default_seed);
    let dir = args.out.join(run_id("mix", seed));
    let mut options = MixOptions::new(dir, exe);
    options.duration = args.duration;
    options.nodes = args.nodes;
    options.seed = seed;
    options.workers = args.workers;
    options.rw_tasks = args.rw_tasks;
    options.permit_tasks = args.permit_tasks;
    options.permits = args.permits;
    options.floors = if args.no_floors {
        Floors::none()
    } else {
        full_run_floors(args.duration, kinds.iter().map(|k| k.name()), NATIVE_RATE)
    };
    options.faults = kinds;
    options.external = external;
    verdict(
        mix::run(&options).map(|outcome| outcome.report),
        &options.dir,
    )
}

/// Prints the summary table and where the files are; 0 only for a pass.
fn verdict(checked: Result<CheckReport, ChaosError>, dir: &Path) -> ExitCode {
    match checked {
        Ok(report) => {
            println!("{}", report.summary_table());
            println!(
                "files: {}/{{history.jsonl,report.json,timeline.svg}}",
                dir.display()
            );
            if report.verdict == Verdict::Pass {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Acquisitions per second of faults the native run must make.
const NATIVE_RATE: f64 = 125.0;
/// The same on the docker testbed, lower: a crashed container sends no
/// reset, so its node is out until TCP retransmits to the restarted host;
/// a failover keeps the group out for the TTL plus the replica lag plus
/// 2 s; one-way drops cost a node timeout per call. Measured 50–65 per
/// second on this 2-core machine under load; the floor leaves room for a
/// loaded CI machine.
const DOCKER_RATE: f64 = 25.0;

/// The targets for the full 120 s run, scaled to the duration.
fn full_run_floors<'a>(
    duration: Duration,
    kinds: impl Iterator<Item = &'a str>,
    per_second: f64,
) -> Floors {
    let secs = duration.as_secs_f64();
    Floors {
        min_acquisitions: (per_second * secs) as u64,
        min_faults: (secs / 4.0) as u64,
        required_kinds: kinds.map(str::to_string).collect(),
        min_during_fault_ratio: 0.25,
        unfenced_is_protected: false,
    }
}

/// `--docker`: the mix on the docker testbed. Each kind must be injected
/// 5 times in a full run (scaled down for a shorter one, at least once).
fn run_docker(args: MixArgs) -> ExitCode {
    let kinds = match chosen(docker_faults::parse_list(&args.faults), &args.faults) {
        Ok(kinds) => kinds,
        Err(code) => return code,
    };
    let exe = match self_exe() {
        Ok(exe) => exe,
        Err(code) => return code,
    };
    let compose = match quorumlock_testbed::docker::Compose::testbed() {
        Ok(compose) => compose,
        Err(e) => {
            eprintln!("chaos: {e}");
            return ExitCode::FAILURE;
        }
    };
    let seed = args.seed.unwrap_or_else(default_seed);
    let dir = args.out.join(run_id("docker", seed));
    let mut base = MixOptions::new(dir, exe);
    base.duration = args.duration;
    base.nodes = args.nodes;
    base.seed = seed;
    base.workers = args.workers;
    let (floors, min_per_kind) = if args.no_floors {
        (Floors::none(), 0)
    } else {
        let per_kind = ((args.duration.as_secs_f64() / 24.0) as u64).clamp(1, 5);
        (
            full_run_floors(args.duration, kinds.iter().map(|k| k.name()), DOCKER_RATE),
            per_kind,
        )
    };
    base.floors = floors;
    let options = DockerMixOptions {
        base,
        faults: kinds,
        min_per_kind,
        image: args.image,
        keep: args.keep_up,
    };
    verdict(
        docker_mix::run(&options, compose).map(|outcome| outcome.report),
        &options.base.dir,
    )
}

fn run_controls(names: &[String], out: &Path) -> ExitCode {
    let chosen: Vec<Control> = if names.is_empty() || names.iter().any(|n| n == "all") {
        Control::ALL.to_vec()
    } else {
        match names
            .iter()
            .map(|n| n.parse())
            .collect::<Result<Vec<Control>, _>>()
        {
            Ok(list) => list,
            Err(e) => {
                eprintln!("chaos: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let exe = match self_exe() {
        Ok(exe) => exe,
        Err(code) => return code,
    };
    let mut all_caught = true;
    println!(
        "{:<22} {:>7}  {:<8} violations",
        "control", "took", "caught"
    );
    for control in chosen {
        let dir = out.join(run_id(&format!("control-{}", control.name()), 0));
        match controls::run(control, &dir, &exe) {
            Ok(outcome) => {
                all_caught &= outcome.caught;
                println!(
                    "{:<22} {:>6.1}s  {:<8} {}   ({})",
                    control.name(),
                    outcome.took.as_secs_f64(),
                    if outcome.caught { "yes" } else { "NO" },
                    violations_line(&outcome.report),
                    outcome.dir.display()
                );
            }
            Err(e) => {
                all_caught = false;
                println!("{:<22} {:>7}  {:<8} {e}", control.name(), "-", "ERROR");
            }
        }
    }
    if all_caught {
        println!("every control was caught");
        ExitCode::SUCCESS
    } else {
        println!("a control came back clean or could not run: the checker proves nothing");
        ExitCode::FAILURE
    }
}

/// `overlap 1, token_regression 1` — the kinds found, with counts.
fn violations_line(report: &CheckReport) -> String {
    let found: Vec<String> = ViolationKind::ALL
        .into_iter()
        .filter(|k| report.count(*k) > 0)
        .map(|k| format!("{} {}", k.name(), report.count(k)))
        .collect();
    if found.is_empty() {
        "none".to_string()
    } else {
        found.join(", ")
    }
}

fn recheck(dir: &Path) -> ExitCode {
    verdict(chaos::recheck(dir, &Floors::none()), dir)
}
