//! Parts 5 and 6 of the demo: the watchdog keeping a long job's lock
//! alive (with a node healed under it), and a loss signalled before the
//! deadline.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlock::{Error, HeldLock, Hold, LossNotice, LostReason, MultiLock, Renewal, Stamp, Wait};
use quorumlock_testbed::TestbedError;
use quorumlock_testbed::table::{Align, Table};
use tokio::sync::oneshot;

use super::nodes::LockNodes;
use super::{
    NODES, Stats, TTL, WAIT, connect, event, kill_nodes, kind_name, lock_config, node_list,
    start_nodes, wait_out_quarantine, wait_out_ttl,
};

/// The watchdog part's locks: fresh keys, never touched by the phases.
const LONG_JOB_KEY: &str = "demo:watchdog:long-job";
const LOST_KEY: &str = "demo:watchdog:lost";
/// How long the long job works: 5 × the TTL (room for a container to
/// restart and be healed on the docker testbed), so it only keeps the lock
/// because the watchdog renews it.
const JOB_LENGTH: Duration = TTL.saturating_mul(5);
/// The node killed under the long job, which rejoins empty.
const RESTARTED: usize = 3;
/// The nodes killed under the second job: no quorum left.
const LOST_KILLED: [usize; 3] = [0, 1, 2];
/// Pause between two of the contender's `try_acquire` calls.
const CONTENDER_PAUSE: Duration = Duration::from_millis(20);
/// How often the jobs and the controller look at the lock.
const POLL: Duration = Duration::from_millis(25);
/// Steps of the second job's work (it never gets through them).
const LOST_JOB_STEPS: u32 = 60;

/// The contender of the long job: another client, without the watchdog,
/// calling `try_acquire` on the job's lock for as long as the job works.
#[derive(Default)]
struct Contender {
    /// Set by the job as its work ends, before the release begins: the
    /// contender stops, and a win seen after this is not against the lock.
    holder_done: AtomicBool,
    attempts: AtomicU64,
    contended: AtomicU64,
    /// Other errors (first message kept).
    other: AtomicU64,
    first_other: Mutex<Option<String>>,
    /// Wins while the job still worked: must stay 0.
    won_while_held: AtomicU64,
    /// Wins of a call that overlapped the release.
    won_after: AtomicU64,
}

async fn contend(lock: MultiLock, contender: Arc<Contender>) {
    // The job ends the loop; the bound is a backstop.
    let began = Instant::now();
    while !contender.holder_done.load(Ordering::SeqCst) && began.elapsed() < JOB_LENGTH + TTL * 2 {
        contender.attempts.fetch_add(1, Ordering::Relaxed);
        match lock.try_acquire(LONG_JOB_KEY).await {
            Ok(guard) => {
                if contender.holder_done.load(Ordering::SeqCst) {
                    contender.won_after.fetch_add(1, Ordering::Relaxed);
                } else {
                    contender.won_while_held.fetch_add(1, Ordering::Relaxed);
                }
                guard.release().await;
            }
            Err(Error::Contended { .. }) => {
                contender.contended.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                contender.other.fetch_add(1, Ordering::Relaxed);
                let mut first = contender
                    .first_other
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if first.is_none() {
                    *first = Some(error.to_string());
                }
            }
        }
        tokio::time::sleep(CONTENDER_PAUSE).await;
    }
}

/// How far the second job's work got, and when its future was dropped.
#[derive(Default)]
struct WorkProbe {
    steps: AtomicU64,
    finished: AtomicBool,
    dropped_at: Mutex<Option<Stamp>>,
}

/// Notes when the work's future is dropped: finished or cancelled.
struct DropProbe(Arc<WorkProbe>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        *self
            .0
            .dropped_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Stamp::now());
    }
}

/// Part 5: what the long job saw.
struct LongJob {
    /// `run_exclusive`'s result: the renewals the job saw while it worked.
    result: Result<Vec<Renewal>, Error>,
    contender: Arc<Contender>,
    /// How long after the restarted node came back a renewal re-took the
    /// key there (`None`: not while the job ran).
    healed_after: Option<Duration>,
    /// The contender's acquire right after the release: how long it took.
    after_release: Result<Duration, Error>,
}

/// Part 6: what the loss looked like.
struct LostJob {
    /// `run_exclusive`'s result: must be [`Error::Lost`].
    result: Result<(), Error>,
    /// The notice `lost()` gave (`None`: it did not resolve in time).
    notice: Option<LossNotice>,
    probe: Arc<WorkProbe>,
}

/// What the watchdog part saw, for its summary.
pub(crate) struct WatchdogOutcome {
    long_job: LongJob,
    lost: LostJob,
    stats: quorumlock::LockStats,
}

pub(crate) fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Prints where a job's lock was taken and the validity it got.
fn announce_taken(stats: &Stats, held: &HeldLock) {
    event(
        stats,
        &format!(
            "job: lock taken on {}, validity {:.2}s",
            holds_text(held.nodes()),
            held.validity().as_secs_f64()
        ),
    );
}

/// "5 of 5", or "4 of 5 (node 3 not held)", from a lock's per-node holds.
pub(crate) fn holds_text<'a>(nodes: impl IntoIterator<Item = (&'a str, Hold)>) -> String {
    let nodes: Vec<(&str, Hold)> = nodes.into_iter().collect();
    let held = nodes.iter().filter(|(_, h)| *h == Hold::Held).count();
    let others: Vec<String> = nodes
        .iter()
        .enumerate()
        .filter(|(_, (_, h))| *h != Hold::Held)
        .map(|(i, (_, h))| {
            let what = match h {
                Hold::NotHeld => "not held",
                Hold::Unknown => "not awaited",
                _ => "?",
            };
            format!("node {i} {what}")
        })
        .collect();
    if others.is_empty() {
        format!("{held} of {}", nodes.len())
    } else {
        format!("{held} of {} ({})", nodes.len(), others.join(", "))
    }
}

/// Reads a lock key straight from one node (bounded in time).
async fn read_key(url: &str, key: &str) -> Result<Option<String>, String> {
    let read = async {
        let client = redis::Client::open(url)?;
        let mut con = client.get_multiplexed_async_connection().await?;
        let value: Option<String> = redis::cmd("EVAL")
            .arg(quorumlock_testbed::lock_key::OWNER_SCRIPT)
            .arg(1)
            .arg(key)
            .query_async(&mut con)
            .await?;
        Ok::<_, redis::RedisError>(value)
    };
    match tokio::time::timeout(Duration::from_millis(500), read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 500 ms".to_string()),
    }
}

fn key_text(found: &Result<Option<String>, String>, token: &str) -> String {
    match found {
        Ok(None) => "(nil), the key is gone".to_string(),
        Ok(Some(value)) if value == token => format!("{value} (the holder's token)"),
        Ok(Some(value)) => format!("{value} (another owner's token)"),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// Makes sure every lock node runs. A node found down is started only once
/// the TTL has passed (delayed restart rule); when it died is unknown, so
/// the TTL counts from now.
pub(crate) async fn ensure_all_up(
    testbed: &mut LockNodes,
    stats: &Stats,
) -> Result<(), TestbedError> {
    let down: Vec<usize> = (0..testbed.len())
        .filter(|&i| !testbed.is_running(i))
        .collect();
    if down.is_empty() {
        event(stats, &format!("all {NODES} lock nodes running"));
        return Ok(());
    }
    event(stats, &format!("{} found down", node_list(testbed, &down)));
    wait_out_ttl(stats, Instant::now()).await;
    start_nodes(testbed, &down)?;
    event(
        stats,
        &format!(
            "{} started again: all {NODES} lock nodes running",
            node_list(testbed, &down)
        ),
    );
    wait_out_quarantine(stats, testbed, &down).await;
    Ok(())
}

/// Parts 5 and 6.
pub(crate) async fn watchdog_demo(
    lock_nodes: &mut LockNodes,
    stats: &Stats,
) -> Result<WatchdogOutcome, Box<dyn std::error::Error>> {
    let holder = MultiLock::new(lock_config(lock_nodes.urls(), true)?);
    let contender = MultiLock::new(lock_config(lock_nodes.urls(), false)?);
    let config = holder.config();
    println!();
    println!("Watchdog");
    println!(
        "  A holder with the watchdog on (TTL {:.1}s): renewed on every node every {}, declared lost",
        TTL.as_secs_f64(),
        millis(config.renew_interval()),
    );
    println!(
        "  {} before its deadline if no renewal reached the quorum by then. Fresh keys.",
        millis(config.loss_margin())
    );
    println!();
    ensure_all_up(lock_nodes, stats).await?;
    for lock in [&holder, &contender] {
        connect(lock).await?;
    }

    let long_job = long_job(lock_nodes, stats, &holder, &contender).await?;
    println!();
    let lost = lost_job(lock_nodes, stats, &holder).await?;
    Ok(WatchdogOutcome {
        long_job,
        lost,
        stats: holder.stats(),
    })
}

/// Part 5: the long job, its contender, a node killed under it that rejoins
/// empty and is healed, and the contender's win after the release.
async fn long_job(
    testbed: &mut LockNodes,
    stats: &Stats,
    holder: &MultiLock,
    contender_lock: &MultiLock,
) -> Result<LongJob, Box<dyn std::error::Error>> {
    event(
        stats,
        &format!(
            "part \"long job\": run_exclusive({LONG_JOB_KEY:?}) works {:.1}s (5 × TTL) while a contender",
            JOB_LENGTH.as_secs_f64()
        ),
    );
    println!(
        "            (another client, no watchdog) calls try_acquire on it every {}",
        millis(CONTENDER_PAUSE)
    );
    let contender = Arc::new(Contender::default());
    let printed = AtomicUsize::new(0);
    let settle = holder.config().node_timeout();
    let (handed, handed_rx) = oneshot::channel();
    let job = holder.run_exclusive(LONG_JOB_KEY, Wait::up_to(WAIT), |held| {
        long_job_work(held, stats, handed, &contender, &printed, settle)
    });
    let control = long_job_control(
        testbed,
        stats,
        contender_lock,
        &contender,
        &printed,
        handed_rx,
    );
    let (result, control) = tokio::join!(job, control);
    // The job sets this itself; also when it was cancelled or never ran.
    contender.holder_done.store(true, Ordering::SeqCst);
    let (task, healed_after) = control?;
    if let Some(task) = task
        && task.await.is_err()
    {
        contender.other.fetch_add(1, Ordering::Relaxed);
        *contender
            .first_other
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some("the contender panicked".to_string());
    }
    match &result {
        Ok(_) => event(
            stats,
            &format!(
                "job done after {:.1}s, lock released; contender: {} try_acquire calls, {} won",
                JOB_LENGTH.as_secs_f64(),
                contender.attempts.load(Ordering::Relaxed),
                contender.won_while_held.load(Ordering::Relaxed),
            ),
        ),
        Err(error) => event(stats, &format!("job failed: {error}")),
    }

    let began = Instant::now();
    let after_release = match contender_lock
        .acquire(LONG_JOB_KEY, Wait::up_to(WAIT))
        .await
    {
        Ok(guard) => {
            let took = began.elapsed();
            event(
                stats,
                &format!(
                    "contender right after the release: acquire won in {}",
                    millis(took)
                ),
            );
            guard.release().await;
            Ok(took)
        }
        Err(error) => {
            event(
                stats,
                &format!("contender right after the release: {error}"),
            );
            Err(error)
        }
    };
    Ok(LongJob {
        result,
        contender,
        healed_after,
        after_release,
    })
}

/// The long job's work: hands its lock to the controller, then works for
/// [`JOB_LENGTH`], printing each renewal the watchdog made meanwhile
/// (counted in `printed`) once its round has settled: a round listens for
/// late replies up to the node timeout (`settle`), and the nodes the lock
/// holds are known after that.
async fn long_job_work(
    held: HeldLock,
    stats: &Stats,
    handed: oneshot::Sender<HeldLock>,
    contender: &Contender,
    printed: &AtomicUsize,
    settle: Duration,
) -> Vec<Renewal> {
    announce_taken(stats, &held);
    // The controller only needs it while the job runs.
    let _ = handed.send(held.clone());
    let began = Instant::now();
    let mut renewals: Vec<Renewal> = Vec::new();
    while began.elapsed() < JOB_LENGTH {
        tokio::time::sleep(POLL).await;
        let Some(renewal) = held.last_renewal() else {
            continue;
        };
        if renewals
            .last()
            .is_some_and(|r| r.started == renewal.started)
            || renewal.started.elapsed() < settle
        {
            continue;
        }
        renewals.push(renewal);
        event(
            stats,
            &format!(
                "renewal {}: quorum in {}, held on {}; contender won {} of {}",
                renewals.len(),
                millis(renewal.took),
                holds_text(held.nodes()),
                contender.won_while_held.load(Ordering::Relaxed),
                contender.attempts.load(Ordering::Relaxed),
            ),
        );
        printed.store(renewals.len(), Ordering::SeqCst);
    }
    contender.holder_done.store(true, Ordering::SeqCst);
    renewals
}

/// The long job's controller: starts the contender once the job holds the
/// lock, kills a node after the first renewal, restarts it empty once the
/// TTL has passed, and waits until the watchdog has re-taken the key there.
async fn long_job_control(
    testbed: &mut LockNodes,
    stats: &Stats,
    contender_lock: &MultiLock,
    contender: &Arc<Contender>,
    printed: &AtomicUsize,
    handed: oneshot::Receiver<HeldLock>,
) -> Result<(Option<tokio::task::JoinHandle<()>>, Option<Duration>), TestbedError> {
    // An error here means the job never got the lock; its result says why.
    let Ok(held) = handed.await else {
        return Ok((None, None));
    };
    let job_ends = Instant::now() + JOB_LENGTH;
    let task = tokio::spawn(contend(contender_lock.clone(), Arc::clone(contender)));

    // One renewal on all 5 nodes first, and the job has shown it.
    let first_by = Instant::now() + TTL;
    while printed.load(Ordering::SeqCst) == 0 && Instant::now() < first_by {
        tokio::time::sleep(POLL).await;
    }
    kill_nodes(testbed, &[RESTARTED])?;
    let killed_at = Instant::now();
    event(
        stats,
        &format!(
            "SIGKILL {} under the job: its renewals go on with 4 of 5 nodes",
            node_list(testbed, &[RESTARTED])
        ),
    );
    wait_out_ttl(stats, killed_at).await;
    start_nodes(testbed, &[RESTARTED])?;
    let back_at = Instant::now();
    let url = testbed.url(RESTARTED);
    let found = read_key(&url, LONG_JOB_KEY).await;
    event(
        stats,
        &format!(
            "node {RESTARTED} is back, empty: the owner there is {}; it casts no vote for its quarantine (the TTL), but the renewals re-take the key there meanwhile",
            key_text(&found, held.token())
        ),
    );

    // A renewal re-takes the key there (bounded by the job's end).
    let mut healed_after = None;
    while Instant::now() < job_ends && held.is_held() {
        tokio::time::sleep(POLL).await;
        let all_held = held.nodes().all(|(_, h)| h == Hold::Held);
        // Re-taken at once, counted once the node's quarantine has passed.
        if !all_held {
            continue;
        }
        let found = read_key(&url, LONG_JOB_KEY).await;
        if found
            .as_ref()
            .is_ok_and(|v| v.as_deref() == Some(held.token()))
        {
            let after = back_at.elapsed();
            healed_after = Some(after);
            event(
                stats,
                &format!(
                    "healed {:.2}s after node {RESTARTED} came back: a renewal re-took the key there, its owner is",
                    after.as_secs_f64()
                ),
            );
            println!(
                "            {}; the job holds {}",
                key_text(&found, held.token()),
                holds_text(held.nodes())
            );
            break;
        }
    }
    if healed_after.is_none() {
        event(
            stats,
            &format!("node {RESTARTED} was not healed while the job ran"),
        );
    }
    Ok((Some(task), healed_after))
}

/// Part 6: a `run_exclusive` job that loses its quorum.
async fn lost_job(
    testbed: &mut LockNodes,
    stats: &Stats,
    holder: &MultiLock,
) -> Result<LostJob, Box<dyn std::error::Error>> {
    let step = JOB_LENGTH / LOST_JOB_STEPS;
    event(
        stats,
        &format!(
            "part \"lost before the deadline\": run_exclusive({LOST_KEY:?}), work of {LOST_JOB_STEPS} steps of {}",
            millis(step)
        ),
    );
    let probe = Arc::new(WorkProbe::default());
    let (handed, handed_rx) = oneshot::channel();
    let job = holder.run_exclusive(LOST_KEY, Wait::up_to(WAIT), |held| {
        lost_job_work(held, handed, Arc::clone(&probe), step)
    });
    let settle = holder.config().node_timeout();
    let control = lost_job_control(testbed, stats, handed_rx, settle);
    let (result, control) = tokio::join!(job, control);
    let (killed_at, notice) = control?.unzip();
    let notice = notice.flatten();

    match (&notice, killed_at) {
        (Some(notice), Some(killed_at)) => {
            event(
                stats,
                &format!(
                    "lost() resolved {:.2}s after the kill, {} before the deadline (loss margin {})",
                    notice.at.saturating_since(killed_at).as_secs_f64(),
                    millis(notice.deadline.saturating_since(notice.at)),
                    millis(holder.config().loss_margin()),
                ),
            );
            let (why, reports) = match &notice.reason {
                LostReason::RenewalsFailed(reports) => (
                    "renewals did not reach the quorum before the loss margin".to_string(),
                    Some(reports),
                ),
                LostReason::KeysGone(reports) => (
                    "too few nodes still hold our token".to_string(),
                    Some(reports),
                ),
                other => (other.to_string(), None),
            };
            println!("            reason: {why}; last renewal round, per node:");
            for (i, report) in reports.into_iter().flat_map(|r| r.iter()).enumerate() {
                println!("              node {i}  {report}");
            }
        }
        _ => event(
            stats,
            &format!(
                "lost() did not resolve within {:.1}s",
                (TTL * 2).as_secs_f64()
            ),
        ),
    }
    let dropped_at = *probe
        .dropped_at
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let steps = probe.steps.load(Ordering::Relaxed);
    match (probe.finished.load(Ordering::Relaxed), dropped_at, &notice) {
        (false, Some(dropped), Some(notice)) => event(
            stats,
            &format!(
                "the work was cancelled at step {steps} of {LOST_JOB_STEPS}, {} after the notice, {} before the deadline",
                millis(dropped.saturating_since(notice.at)),
                millis(notice.deadline.saturating_since(dropped)),
            ),
        ),
        (true, _, _) => event(stats, "the work ran to its end: it was not cancelled"),
        _ => event(
            stats,
            &format!("the work stopped at step {steps} of {LOST_JOB_STEPS}"),
        ),
    }
    match &result {
        Err(error) => println!("            run_exclusive returned: {error}"),
        Ok(()) => println!("            run_exclusive returned Ok"),
    }
    Ok(LostJob {
        result,
        notice,
        probe,
    })
}

/// The second job's work: steps that would take [`JOB_LENGTH`], far longer
/// than the lock can last once its quorum is gone.
async fn lost_job_work(
    held: HeldLock,
    handed: oneshot::Sender<HeldLock>,
    probe: Arc<WorkProbe>,
    step: Duration,
) {
    let _ = handed.send(held);
    let _dropped = DropProbe(Arc::clone(&probe));
    for _ in 0..LOST_JOB_STEPS {
        tokio::time::sleep(step).await;
        probe.steps.fetch_add(1, Ordering::Relaxed);
    }
    probe.finished.store(true, Ordering::Relaxed);
}

/// The second job's controller: lets one renewal through (shown once its
/// round has settled, as in the long job), kills 3 of 5 nodes, and waits
/// (bounded) for `lost()`. Returns when the nodes were killed and the
/// notice, or `None` if the job never got the lock.
async fn lost_job_control(
    testbed: &mut LockNodes,
    stats: &Stats,
    handed: oneshot::Receiver<HeldLock>,
    settle: Duration,
) -> Result<Option<(Stamp, Option<LossNotice>)>, TestbedError> {
    let Ok(held) = handed.await else {
        return Ok(None);
    };
    announce_taken(stats, &held);
    let first_by = Instant::now() + TTL;
    while held
        .last_renewal()
        .is_none_or(|r| r.started.elapsed() < settle)
        && Instant::now() < first_by
    {
        tokio::time::sleep(POLL).await;
    }
    if let Some(renewal) = held.last_renewal() {
        event(
            stats,
            &format!(
                "renewal 1: quorum in {}, held on {}",
                millis(renewal.took),
                holds_text(held.nodes())
            ),
        );
    }
    kill_nodes(testbed, &LOST_KILLED)?;
    let killed_at = Stamp::now();
    event(
        stats,
        &format!(
            "SIGKILL {}: 2 of 5 left, renewals cannot reach the quorum",
            node_list(testbed, &LOST_KILLED)
        ),
    );
    let notice = tokio::time::timeout(TTL * 2, held.lost()).await.ok();
    Ok(Some((killed_at, notice)))
}

/// Prints the summary of parts 5 and 6 and returns whether every check
/// passed.
pub(crate) fn watchdog_summary(w: &WatchdogOutcome) -> bool {
    let s = &w.stats;
    let c = &w.long_job.contender;
    println!();
    println!("Watchdog summary");
    println!();
    let mut table = Table::new([Align::Left, Align::Right]).indent(2);
    for (label, n) in [
        ("renewal rounds", s.renewals),
        ("  reached the quorum in time", s.renewed),
        ("  missed it (retried until the margin)", s.renew_failed),
        ("keys re-taken on emptied nodes", s.healed),
        ("locks lost", s.lost),
        ("locks still watched", s.watched),
    ] {
        table.row([label.to_string(), n.to_string()]);
    }
    print!("{table}");
    if let Ok(renewals) = &w.long_job.result
        && !renewals.is_empty()
    {
        let mut took: Vec<Duration> = renewals.iter().map(|r| r.took).collect();
        took.sort();
        println!(
            "  long job's renewals: {}, quorum in min {} / median {} / max {}",
            took.len(),
            millis(took[0]),
            millis(took[took.len() / 2]),
            millis(took[took.len() - 1]),
        );
    }
    let attempts = c.attempts.load(Ordering::Relaxed);
    let won = c.won_while_held.load(Ordering::Relaxed);
    println!(
        "  contender: {attempts} try_acquire calls during the job: {} contended, {} other, {won} won",
        c.contended.load(Ordering::Relaxed),
        c.other.load(Ordering::Relaxed),
    );
    if let Some(first) = c
        .first_other
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_deref()
    {
        println!("    first other error: {first}");
    }
    println!();

    let mut ok = true;
    let mut check = |name: &str, failure: Option<String>| match failure {
        None => println!("{name}: OK"),
        Some(why) => {
            println!("{name}: FAILED ({why})");
            ok = false;
        }
    };
    check(
        "long job held the lock for 5 × TTL and finished",
        w.long_job.result.as_ref().err().map(ToString::to_string),
    );
    check(
        "contender never won while the job held the lock",
        if won > 0 {
            Some(format!("{won} of {attempts} calls won"))
        } else if attempts == 0 {
            Some("the contender never tried".to_string())
        } else {
            None
        },
    );
    check(
        "contender won right after the release",
        w.long_job
            .after_release
            .as_ref()
            .err()
            .map(ToString::to_string),
    );
    check(
        "restarted node healed with the holder's token",
        w.long_job
            .healed_after
            .is_none()
            .then(|| "no renewal re-took the key while the job ran".to_string()),
    );
    let notice = w.lost.notice.as_ref();
    check(
        "lost() signalled before the deadline",
        match notice {
            None => Some("lost() did not resolve".to_string()),
            Some(n) if n.reason == LostReason::Released => {
                Some("the lock was released, not lost".to_string())
            }
            Some(n) if n.at >= n.deadline => Some(format!(
                "{} after the deadline",
                millis(n.at.saturating_since(n.deadline))
            )),
            Some(_) => None,
        },
    );
    let dropped_at = *w
        .lost
        .probe
        .dropped_at
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    check(
        "work cancelled before the deadline, run_exclusive returned Error::Lost",
        if w.lost.probe.finished.load(Ordering::Relaxed) {
            Some("the work finished".to_string())
        } else if !matches!(w.lost.result, Err(Error::Lost { .. })) {
            Some(match &w.lost.result {
                Ok(()) => "run_exclusive returned Ok".to_string(),
                Err(e) => format!("run_exclusive returned {}", kind_name(e)),
            })
        } else if dropped_at
            .zip(notice)
            .is_none_or(|(dropped, n)| dropped >= n.deadline)
        {
            Some("the work was not dropped before the deadline".to_string())
        } else {
            None
        },
    );
    ok
}
