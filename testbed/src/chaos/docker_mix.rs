//! The chaos mix on the docker testbed: the same workers and checker as
//! the native run ([`super::mix`]), against the containers of
//! `testbed/docker-compose.yml`, with container-level faults
//! ([`super::docker_faults`]). Clients reach each container at its own
//! address, so partitions and one-way drops are real packet loss.
//!
//! The lock nodes are `node1`… and the Sentinel group (5 by default:
//! node1–node4, then the group), so a bare majority meets another in one
//! node, as in the native run. Same history, `report.json` and
//! `timeline.svg`.

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::book::{FaultBook, by_lane, progress};
use super::checker::{CheckReport, Verdict};
use super::docker_faults::{DockerFault, Injector, Stage};
use super::history::{HistoryWriter, What};
use super::mix::{MixOptions, Outcome, count_won, reset_counters};
use super::worker::{WorkerOptions, read_counters};
use super::workers::Workers;
use super::{ChaosError, finish};
use crate::docker::{Compose, Deployment};

/// Settings of one docker mix.
#[derive(Clone, Debug)]
pub struct DockerMixOptions {
    /// Everything the native mix has but its fault kinds (`base.faults`
    /// is not used) and its `external` servers.
    pub base: MixOptions,
    /// The fault kinds to inject.
    pub faults: Vec<DockerFault>,
    /// Each kind must have been injected at least this often, or the run
    /// is invalid.
    pub min_per_kind: u64,
    /// The image to bring the deployment up with (when it is not up).
    pub image: String,
    /// Leave a deployment the run brought up running afterwards.
    pub keep: bool,
}

/// Brings the deployment up if it is not (and down again afterwards if it
/// did), runs the mix on it, checks it.
///
/// # Errors
///
/// [`ChaosError`] when the deployment or the run could not be carried out;
/// a run that found violations is an [`Outcome`] whose report says so.
pub fn run(options: &DockerMixOptions, compose: Compose) -> Result<Outcome, ChaosError> {
    let say = |text: &str| {
        if options.base.progress {
            eprintln!("{text}");
        }
    };
    let began = Instant::now();
    say(&format!(
        "chaos --docker: {} (healthy or brought up)",
        compose.shown()
    ));
    let deployment = Deployment::up(compose, &options.image, Duration::from_secs(180))?;
    say(&format!(
        "chaos --docker: deployment {} in {:.1}s",
        if deployment.started_here() {
            "brought up"
        } else {
            "already up, used as it is"
        },
        began.elapsed().as_secs_f64()
    ));
    let outcome = run_on(options, &deployment);
    if options.keep && deployment.started_here() {
        say("chaos --docker: the deployment stays up (--keep-up)");
    } else if deployment.started_here() {
        say("chaos --docker: taking the deployment down");
        deployment.down()?;
    }
    outcome
}

fn run_on(options: &DockerMixOptions, deployment: &Deployment) -> Result<Outcome, ChaosError> {
    let base = &options.base;
    std::fs::create_dir_all(&base.dir)
        .map_err(ChaosError::io(format!("creating {}", base.dir.display())))?;
    let dir =
        std::path::absolute(&base.dir).map_err(ChaosError::io("resolving the run directory"))?;
    let stage = Stage::new(deployment, base.nodes)?;
    if base.progress {
        eprintln!(
            "chaos --docker: {} lock nodes ({}), {} workers × {} tasks, {} names + 1 long, TTL {:?}, seed {}, {:?} of faults",
            base.nodes,
            (0..base.nodes)
                .map(|i| format!("{:?}", stage.role(i)))
                .collect::<Vec<_>>()
                .join(" "),
            base.workers,
            base.tasks,
            base.keys,
            base.ttl,
            base.seed,
            base.duration
        );
    }
    let keys: Vec<String> = (0..base.keys).map(|i| format!("k{i}")).collect();
    let mut names = keys.clone();
    names.push("job".to_string());
    reset_counters(&mut deployment.resource.connection()?, &names)?;
    let chaos_history = dir.join("history-chaos.jsonl");
    let log = HistoryWriter::create(&chaos_history, "chaos")
        .map_err(ChaosError::io("creating the chaos history"))?;
    let template = WorkerOptions {
        id: String::new(),
        nodes: stage.urls(),
        resource: deployment.resource.url(),
        keys,
        long_key: Some("job".to_string()),
        tasks: base.tasks,
        ttl: base.ttl,
        node_timeout: base.node_timeout,
        drift_factor: base.drift_factor,
        history: PathBuf::new(),
        seed: base.seed,
        pause_before_write: None,
        holds_per_task: None,
        // The read-write and semaphore workloads run in the native mix.
        rw_keys: Vec::new(),
        rw_tasks: 0,
        semaphore: None,
        permit_tasks: 0,
    };
    let workers = Workers::new(&base.worker_bin, &dir, template);
    for _ in 0..base.workers {
        workers.spawn()?;
    }
    warm_up(&workers, base.workers);
    let book = FaultBook::new(log.clone());
    book.note("faults start".into());
    inject_for(options, &stage, &book, &workers);
    book.note("faults end".into());
    if base.progress {
        eprintln!("chaos --docker: faults over; healing every container and stopping the workers");
    }
    if let Err(e) = stage.heal_all() {
        book.problem(format!("healing: {e}"));
    }
    let killed = workers.stop_all(base.ttl * 3 + Duration::from_secs(5));
    if !killed.is_empty() {
        book.problem(format!("workers that did not stop in time: {killed:?}"));
    }
    // Quiet: every key a holder did not release must expire by its TTL.
    thread::sleep(base.ttl + base.ttl / 2 + Duration::from_millis(500));
    let keys_left = stage.lock_keys()?;
    let (fenced, unfenced) = read_counters(&mut deployment.resource.connection()?, &names)
        .map_err(crate::TestbedError::from)?;
    let _ = log.log(What::Final {
        fenced,
        unfenced,
        keys_left,
    });
    book.note_problems();
    let mut inputs = workers.histories();
    inputs.push(chaos_history);
    let mut report = finish(&dir, &inputs, &base.floors)?;
    apply_per_kind_floor(&mut report, &options.faults, options.min_per_kind);
    write_report(&dir, &report)?;
    Ok(Outcome { dir, report })
}

/// Runs the three lanes (and the progress line) until the faults end.
fn inject_for(options: &DockerMixOptions, stage: &Stage<'_>, book: &FaultBook, workers: &Workers) {
    let base = &options.base;
    let end = Instant::now() + base.duration;
    let running = move || Instant::now() < end;
    let injector = Injector {
        stage,
        book,
        workers,
        ttl: base.ttl,
        running: &running,
    };
    thread::scope(|scope| {
        for (kinds, seed) in by_lane(&options.faults, DockerFault::lane, base.seed) {
            let injector = &injector;
            scope.spawn(move || injector.run_lane(&kinds, StdRng::seed_from_u64(seed)));
        }
        if base.progress {
            scope.spawn(|| progress(book, workers, end, base.duration));
        }
    });
}

/// Lets the workers connect and settle (every node's quarantine passes
/// first on a fresh deployment) before the first fault.
fn warm_up(workers: &Workers, n: usize) {
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_secs(15)
        && count_won(&workers.histories()) < (n * 20) as u64
    {
        thread::sleep(Duration::from_millis(50));
    }
}

/// Every kind given must have been injected `min` times: below that the
/// run is invalid (a pass needs every fault kind exercised, not once by
/// luck).
pub fn apply_per_kind_floor(report: &mut CheckReport, kinds: &[DockerFault], min: u64) {
    for kind in kinds {
        let count = report
            .stats
            .faults_per_kind
            .iter()
            .find(|k| k.kind == kind.name())
            .map_or(0, |k| k.count);
        if count < min {
            let problem = format!("only {count} faults of kind {kind} (floor {min} of each kind)");
            report.coverage_problems.push(problem.clone());
            report.reasons.push(problem);
            if report.verdict == Verdict::Pass {
                report.verdict = Verdict::Invalid;
            }
        }
    }
}

fn write_report(dir: &std::path::Path, report: &CheckReport) -> Result<(), ChaosError> {
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| ChaosError::io("encoding report.json")(std::io::Error::other(e)))?;
    std::fs::write(dir.join("report.json"), json).map_err(ChaosError::io("writing report.json"))
}
