//! Parts 7 and 8 of the demo: fencing tokens that stop a paused holder's
//! late write and keep increasing across a node that restarts empty; then
//! re-entry, and locks on several names taken at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlock::fenced::{FencedResource, Write};
use quorumlock::{ConfigError, Error, HeldLock, LockConfig, MultiLock, Owner, Quorum, Wait};
use quorumlock_testbed::redis::{self, aio::MultiplexedConnection};
use quorumlock_testbed::table::{Align, Table};
use tokio::sync::oneshot;

use super::nodes::LockNodes;
use super::watchdog::{ensure_all_up, holds_text, millis};
use super::{
    NODES, Stats, TTL, WAIT, connect, event, kill_nodes, node_list, start_nodes, wait_out_ttl,
};

type BoxError = Box<dyn std::error::Error>;

/// Part 7's lock name and the fenced resource it protects (a hash on the
/// resource server).
const FENCED_KEY: &str = "demo:fenced:report";
const REPORT: &str = "demo:report";
/// Part 7's lock TTL: short, so that the pause outlives it quickly.
const PAUSE_TTL: Duration = Duration::from_secs(1);
/// How long holder A pauses: longer than its TTL.
const PAUSE: Duration = Duration::from_millis(1500);
/// Holder B's wait budget: enough to outwait A's keys.
const B_WAIT: Duration = Duration::from_secs(3);
/// The node that dies and comes back without its fencing counters.
const RESTARTED: usize = 4;
/// Holders in a row, with the node down and after it came back.
const TAKES: usize = 3;

/// Part 8: the re-entered lock, and a name used to settle the nodes.
const LEDGER: &str = "demo:ledger";
const PROBE: &str = "demo:ledger:settle-probe";
/// The accounts: a lock name each on the lock nodes, a balance each on the
/// resource server.
const ACCOUNTS: [&str; 3] = ["a", "b", "c"];
/// Which accounts each transfer worker moves money between.
const PAIRS: [[usize; 2]; 3] = [[0, 1], [1, 2], [2, 0]];
/// Each account's opening balance.
const OPENING: i64 = 100;
/// How long the transfer workers run.
const TRANSFER_TIME: Duration = Duration::from_millis(1500);
/// Pause between two partial-hold samples of every node.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

fn account_lock(i: usize) -> String {
    format!("demo:account:{}", ACCOUNTS[i])
}

fn balance_key(i: usize) -> String {
    format!("demo:balance:{}", ACCOUNTS[i])
}

/// The locks of parts 7 and 8: no watchdog, wake-ups on, the default
/// retry policy, and the longest node timeout allowed (a tenth of the TTL),
/// with room for a loaded machine: a round that stalls past it fails.
fn part_config(urls: Vec<String>, ttl: Duration) -> Result<LockConfig, ConfigError> {
    LockConfig::builder()
        .nodes(urls)
        .ttl(ttl)
        .quorum(Quorum::Majority)
        .node_timeout(ttl / 10)
        .watchdog(false)
        .wake_ups(true)
        .build()
}

/// The holder's fencing token. [`Error::FencingUnavailable`] means too few
/// nodes confirmed in time while the lock may still be held: asking again
/// retries (a few times, while the lock is held).
async fn token_of(held: &HeldLock) -> Result<u64, Error> {
    let mut tries = 0;
    loop {
        tries += 1;
        match held.fencing_token().await {
            Err(Error::FencingUnavailable { .. }) if tries < 3 && held.is_held() => continue,
            result => return result,
        }
    }
}

/// Runs one command on one node over a fresh connection (bounded in time):
/// nodes die and restart under these reads.
async fn on_node<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> Result<T, String> {
    let run = async {
        let client = redis::Client::open(url)?;
        let mut con = client.get_multiplexed_async_connection().await?;
        cmd.query_async::<T>(&mut con).await
    };
    match tokio::time::timeout(Duration::from_millis(500), run).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 500 ms".to_string()),
    }
}

/// The fencing counter of `name` on every node (`Ok(None)`: absent;
/// `Err`: the node is down or did not answer). Stored as
/// `<value> <epoch id>`; this is the value.
async fn fence_counters(testbed: &LockNodes, name: &str) -> Vec<Result<Option<u64>, String>> {
    let mut cmd = redis::cmd("GET");
    cmd.arg(format!("quorumlock:fence:{name}"));
    let mut out = Vec::with_capacity(testbed.len());
    for i in 0..testbed.len() {
        out.push(if testbed.is_running(i) {
            on_node::<Option<String>>(&testbed.url(i), &cmd)
                .await
                .and_then(|raw| {
                    raw.map(|raw| {
                        let value = raw.split(' ').next().unwrap_or_default();
                        value.parse().map_err(|_| format!("not a counter: {raw}"))
                    })
                    .transpose()
                })
        } else {
            Err("down".to_string())
        });
    }
    out
}

fn counter_text(counter: &Result<Option<u64>, String>) -> String {
    match counter {
        Ok(Some(v)) => v.to_string(),
        Ok(None) => "(nil)".to_string(),
        Err(e) if e == "down" => "down".to_string(),
        Err(_) => "?".to_string(),
    }
}

fn counters_text(counters: &[Result<Option<u64>, String>]) -> String {
    let values: Vec<String> = counters.iter().map(counter_text).collect();
    format!("[{}]", values.join(", "))
}

fn write_text(write: Write) -> String {
    match write {
        Write::Accepted => "Accepted".to_string(),
        Write::Rejected { last } => format!("Rejected {{ last: {last} }}"),
        other => format!("{other:?}"),
    }
}

fn tokens_text(tokens: &[u64]) -> String {
    tokens
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Part 7: what the paused holder and the holders after it saw.
struct Fencing {
    a_token: u64,
    a_write: Write,
    b_token: u64,
    b_write: Write,
    /// Whether A's lock still counted as held when A resumed.
    held_at_resume: bool,
    stale_write: Write,
    /// Every token handed out in part 7, in order.
    tokens: Vec<u64>,
    /// Writes of the holders after A and B that the resource refused.
    later_rejected: usize,
    /// The restarted node's counter right after it came back, and at the end.
    counter_after_restart: Result<Option<u64>, String>,
    counter_at_end: Result<Option<u64>, String>,
    fencing_tokens: u64,
}

/// Part 8: re-entry and the transfers.
struct Nested {
    /// Hold counts on every node after each step, with the expected count.
    counts: Vec<(&'static str, Vec<Option<i64>>, i64)>,
    /// A fresh owner's `try_acquire` while the lock was re-entered.
    other_refused: Option<String>,
    /// The ledger key on a node after the last release (should be none).
    ledger_left: usize,
    /// `try_acquire_all` of an overlapping set while one was held.
    overlap_refused: Option<String>,
    /// `try_acquire` of the refused set's free name right after.
    free_name_won: Option<String>,
    transfers: Transfers,
}

/// The transfer workers, the sampler and the final state.
struct Transfers {
    /// Transfers per worker (pair), acquires that gave up, other errors.
    done: [u64; 3],
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
    /// Final balance and transfer count of each account.
    accounts: Vec<(i64, u64)>,
    /// Partial-hold samples of every node, and the ones that found a
    /// single name of a pair held alone.
    samples: u64,
    partial: u64,
    first_partial: Option<String>,
    /// Account lock keys left on a node after the workers stopped.
    keys_left: usize,
    woken: u64,
    wake_notices: u64,
    attempts: u64,
}

/// What parts 7 and 8 saw, for their summary.
pub(crate) struct FencingOutcome {
    fencing: Result<Fencing, String>,
    nested: Result<Nested, String>,
}

/// Parts 7 and 8. A part that stops on an error is reported as failed in
/// the summary; the other part still runs.
pub(crate) async fn fencing_demo(
    lock_nodes: &mut LockNodes,
    stats: &Stats,
    resource_url: &str,
) -> FencingOutcome {
    println!();
    println!("Fencing tokens");
    println!(
        "  A lock without the watchdog, TTL {:.1}s, node timeout {}. The protected resource is a",
        PAUSE_TTL.as_secs_f64(),
        millis(PAUSE_TTL / 10)
    );
    println!(
        "  FencedResource on the resource server ({REPORT:?}): it accepts a write only with a fencing"
    );
    println!("  token at least as large as the last one it accepted.");
    println!();
    let fencing = fenced_part(lock_nodes, stats, resource_url)
        .await
        .map_err(|e| e.to_string());
    if let Err(e) = &fencing {
        event(stats, &format!("part 7 stopped: {e}"));
    }

    println!();
    println!("Re-entry and several names at once");
    println!(
        "  Locks without the watchdog, TTL {:.1}s, node timeout {}, wake-ups on. Fresh keys.",
        TTL.as_secs_f64(),
        millis(TTL / 10)
    );
    println!();
    let nested = nested_part(lock_nodes, stats, resource_url)
        .await
        .map_err(|e| e.to_string());
    if let Err(e) = &nested {
        event(stats, &format!("part 8 stopped: {e}"));
    }
    FencingOutcome { fencing, nested }
}

/// Part 7.
async fn fenced_part(
    testbed: &mut LockNodes,
    stats: &Stats,
    resource_url: &str,
) -> Result<Fencing, BoxError> {
    ensure_all_up(testbed, stats).await?;
    let a_lock = MultiLock::new(part_config(testbed.urls(), PAUSE_TTL)?);
    let b_lock = MultiLock::new(part_config(testbed.urls(), PAUSE_TTL)?);
    for lock in [&a_lock, &b_lock] {
        connect(lock).await?;
    }
    let resource = FencedResource::open(resource_url, REPORT).await?;

    event(
        stats,
        &format!(
            "part \"a paused holder is fenced off\": holders A and B (two clients) take {FENCED_KEY:?}"
        ),
    );
    let a = a_lock.acquire(FENCED_KEY, Wait::up_to(WAIT)).await?;
    let a_token = token_of(&a).await?;
    let a_write = resource.write(a_token, "report by A").await?;
    event(
        stats,
        &format!(
            "A: lock taken on {}, validity {}, fencing token {a_token}; its write: {}",
            holds_text(a.handle().nodes()),
            millis(a.validity()),
            write_text(a_write)
        ),
    );
    event(
        stats,
        &format!(
            "A pauses for {:.1}s: a simulated GC or VM pause (the task just sleeps, past its validity,",
            PAUSE.as_secs_f64()
        ),
    );
    println!(
        "            renewing nothing); B calls acquire with a wait budget of {:.1}s (wake-ups on)",
        B_WAIT.as_secs_f64()
    );

    let (written, written_rx) = oneshot::channel::<()>();
    let a_side = async {
        tokio::time::sleep(PAUSE).await;
        // B wrote long before; should B have failed, A resumes anyway.
        let _ = written_rx.await;
        let held = a.is_held();
        event(
            stats,
            &format!(
                "A resumes: is_held() is now {held} (validity {}), but like a real paused process A does",
                millis(a.validity())
            ),
        );
        println!("            not check: its write goes out with its old token {a_token}");
        let stale = resource
            .write(a_token, "report by A, after its pause")
            .await;
        (held, stale)
    };
    let b_side = async {
        let began = Instant::now();
        let b = b_lock.acquire(FENCED_KEY, Wait::up_to(B_WAIT)).await?;
        let waited = began.elapsed();
        let b_token = token_of(&b).await?;
        let b_write = resource.write(b_token, "report by B").await?;
        let s = b_lock.stats();
        event(
            stats,
            &format!(
                "B: won after {:.2}s and {} attempts, once A's keys expired, fencing token {b_token}; its write: {}",
                waited.as_secs_f64(),
                s.attempts,
                write_text(b_write)
            ),
        );
        println!(
            "            (A never released, so no release notice came: woken {}; B retried on its backoff,",
            s.woken
        );
        println!("            never sleeping past A's remaining TTL)");
        let _ = written.send(());
        Ok::<_, BoxError>((b, b_token, b_write))
    };
    let ((held_at_resume, stale), b) = tokio::join!(a_side, b_side);
    let (b, b_token, b_write) = b?;
    let stale_write = stale?;
    match stale_write {
        Write::Rejected { last } => event(
            stats,
            &format!(
                "the resource refuses it: Rejected {{ last: {last} }} ({a_token} < {last}); B's report stands"
            ),
        ),
        other => event(
            stats,
            &format!(
                "the resource answered {}: the paused holder overwrote B's report",
                write_text(other)
            ),
        ),
    }
    let a_release = a.release().await;
    event(
        stats,
        &format!(
            "A releases: was_held = {}, its hold found on {} of {NODES} nodes (B's keys are not touched);",
            a_release.was_held, a_release.released
        ),
    );
    println!(
        "            B still holds the lock: is_held() = {}; B releases",
        b.is_held()
    );
    b.release().await;
    if let Some((token, value)) = resource.read().await? {
        println!("            resource now: token {token}, value {value:?}");
    }

    // Tokens across a node that dies and comes back empty.
    println!();
    let mut tokens = vec![a_token, b_token];
    event(
        stats,
        &format!(
            "part \"tokens across a node that restarts empty\": counters quorumlock:fence:{FENCED_KEY} on nodes 0-4:"
        ),
    );
    println!(
        "            {}",
        counters_text(&fence_counters(testbed, FENCED_KEY).await)
    );
    kill_nodes(testbed, &[RESTARTED])?;
    let killed_at = Instant::now();
    event(
        stats,
        &format!(
            "SIGKILL {}: its counter dies with it",
            node_list(testbed, &[RESTARTED])
        ),
    );
    let mut later_rejected = 0;
    let (first, rejected) = take_turns(&b_lock, &resource, "with node down").await?;
    later_rejected += rejected;
    event(
        stats,
        &format!(
            "{TAKES} holders in a row with 4 of {NODES} nodes: tokens {}; counters {}",
            tokens_text(&first),
            counters_text(&fence_counters(testbed, FENCED_KEY).await)
        ),
    );
    tokens.extend(&first);
    wait_out_ttl(stats, killed_at).await;
    start_nodes(testbed, &[RESTARTED])?;
    connect(&b_lock).await?;
    let counter_after_restart = fence_counters(testbed, FENCED_KEY).await[RESTARTED].clone();
    event(
        stats,
        &format!(
            "node {RESTARTED} is back, empty (it kept nothing): counters {}",
            counters_text(&fence_counters(testbed, FENCED_KEY).await)
        ),
    );
    let (second, rejected) = take_turns(&b_lock, &resource, "after the restart").await?;
    later_rejected += rejected;
    tokens.extend(&second);
    let counters = fence_counters(testbed, FENCED_KEY).await;
    event(
        stats,
        &format!(
            "{TAKES} more holders: tokens {}; counters {}",
            tokens_text(&second),
            counters_text(&counters)
        ),
    );
    println!(
        "            a token is one more than the largest counter read, and the reads must include a counter"
    );
    println!(
        "            from a majority of the nodes (an empty one does not count): node {RESTARTED} cannot pull tokens"
    );
    println!("            down, and each holder's raise brings its counter back up");
    let fencing_tokens = a_lock.stats().fencing_tokens + b_lock.stats().fencing_tokens;
    Ok(Fencing {
        a_token,
        a_write,
        b_token,
        b_write,
        held_at_resume,
        stale_write,
        tokens,
        later_rejected,
        counter_after_restart,
        counter_at_end: counters[RESTARTED].clone(),
        fencing_tokens,
    })
}

/// [`TAKES`] holders one after another: each takes the lock, gets its
/// token, writes, releases. Returns the tokens and how many writes the
/// resource refused.
async fn take_turns(
    lock: &MultiLock,
    resource: &FencedResource,
    when: &str,
) -> Result<(Vec<u64>, usize), BoxError> {
    let mut tokens = Vec::with_capacity(TAKES);
    let mut rejected = 0;
    for i in 0..TAKES {
        let guard = lock.acquire(FENCED_KEY, Wait::up_to(WAIT)).await?;
        let token = token_of(&guard).await?;
        if resource
            .write(token, &format!("report {} {when}", i + 1))
            .await?
            != Write::Accepted
        {
            rejected += 1;
        }
        tokens.push(token);
        guard.release().await;
    }
    Ok((tokens, rejected))
}

/// The holds of lock key `KEYS[1]`: 1 for its string form (`"<owner>
/// <entry>"`, `" w"` after it once a waiter marked it), the hash's fields
/// less `owner` and a waiter's mark for its hash form (re-entered), 0 when
/// absent; an error for a key that is not a lock key.
const HOLDS: &str = r"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' then
  local _, _, rest = string.match(v, '^([0-9a-f]+) ([0-9a-f]+)(.*)$')
  if rest == '' or rest == ' w' then
    return 1
  end
  return redis.error_reply('not a lock key')
elseif not v then
  return 0
end
return redis.call('HLEN', KEYS[1]) - 1 - redis.call('HEXISTS', KEYS[1], 'waiters')
";

/// The hold count ([`HOLDS`]) of `key` on every node, once everything
/// `lock` sent has run there: an acquire returns at its quorum, and a probe
/// hold released through the same connections is queued behind the rest.
async fn hold_counts(lock: &MultiLock, testbed: &LockNodes, key: &str) -> Vec<Option<i64>> {
    if let Ok(probe) = lock.try_acquire(PROBE).await {
        probe.release().await;
    }
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(HOLDS).arg(1).arg(key);
    let mut out = Vec::with_capacity(testbed.len());
    for url in testbed.urls() {
        out.push(on_node::<i64>(&url, &cmd).await.ok().map(|n| n.max(0)));
    }
    out
}

fn counts_text(counts: &[Option<i64>]) -> String {
    let values: Vec<String> = counts
        .iter()
        .map(|c| c.map_or("?".to_string(), |n| n.to_string()))
        .collect();
    format!("[{}]", values.join(", "))
}

/// Part 8.
async fn nested_part(
    testbed: &mut LockNodes,
    stats: &Stats,
    resource_url: &str,
) -> Result<Nested, BoxError> {
    ensure_all_up(testbed, stats).await?;
    let lock = MultiLock::new(part_config(testbed.urls(), TTL)?);
    let other = MultiLock::new(part_config(testbed.urls(), TTL)?);
    for l in [&lock, &other] {
        connect(l).await?;
    }

    event(
        stats,
        &format!(
            "part \"re-entry\": nested code takes {LEDGER:?} again through the hold its caller holds"
        ),
    );
    let mut counts = Vec::new();
    let outer = lock.acquire(LEDGER, Wait::up_to(WAIT)).await?;
    let middle = outer.reenter().await?;
    let inner = middle.reenter().await?;
    let now = hold_counts(&lock, testbed, LEDGER).await;
    let (t_outer, t_inner) = (token_of(&outer).await?, token_of(&inner).await?);
    event(
        stats,
        &format!(
            "depth 3 (acquire, reenter, reenter): hold count on nodes 0-4 {}; one owner,",
            counts_text(&now)
        ),
    );
    println!(
        "            one fencing token for all three holds: outer {t_outer}, innermost {t_inner}"
    );
    counts.push(("after 3 holds", now, 3));
    let other_refused = match other.try_acquire(LEDGER).await {
        Err(e @ Error::Contended { .. }) => {
            event(stats, &format!("another owner's try_acquire: {e}"));
            None
        }
        Err(e) => Some(format!("another owner's try_acquire failed otherwise: {e}")),
        Ok(g) => {
            g.release().await;
            Some("another owner took the lock while it was re-entered".to_string())
        }
    };
    for (guard, step, expected) in [(inner, "innermost", 2), (middle, "middle", 1)] {
        let report = guard.release().await;
        let now = hold_counts(&lock, testbed, LEDGER).await;
        event(
            stats,
            &format!(
                "{step} release: the key stays on {} of {NODES} nodes, hold count {}",
                report.kept,
                counts_text(&now)
            ),
        );
        counts.push((step, now, expected));
    }
    let owner = Owner::from_token(outer.token())?;
    let handed = lock.acquire_as(&owner, LEDGER, Wait::NONE).await?;
    let now = hold_counts(&lock, testbed, LEDGER).await;
    event(
        stats,
        &format!(
            "code handed only the owner token re-enters with acquire_as(Owner::from_token(..)): count {}",
            counts_text(&now)
        ),
    );
    counts.push(("acquire_as", now, 2));
    handed.release().await;
    outer.release().await;
    let now = hold_counts(&lock, testbed, LEDGER).await;
    let mut exists = redis::cmd("EXISTS");
    exists.arg(LEDGER);
    let mut ledger_left = 0;
    for url in testbed.urls() {
        if on_node::<i64>(&url, &exists).await != Ok(0) {
            ledger_left += 1;
        }
    }
    event(
        stats,
        &format!(
            "its release, then the outer one (the last hold): hold count {}, {}",
            counts_text(&now),
            if ledger_left == 0 {
                "the key is gone from every node".to_string()
            } else {
                format!("the key is still on {ledger_left} of {NODES} nodes")
            }
        ),
    );
    counts.push(("last release", now, 0));

    // Several names at once.
    println!();
    let names: Vec<String> = (0..ACCOUNTS.len()).map(account_lock).collect();
    event(
        stats,
        "part \"several names at once\": a transfer locks both accounts at once with acquire_all:",
    );
    println!(
        "            one guard for {} and {}, all or nothing on every node",
        names[0], names[1]
    );
    let ab = lock.try_acquire_all(&[&names[0], &names[1]]).await?;
    let (overlap_refused, free_name_won) = match other
        .try_acquire_all(&[&names[1], &names[2]])
        .await
    {
        Err(Error::Contended { free_in, .. }) => {
            let c = other.try_acquire(&names[2]).await;
            let won = match c {
                Ok(g) => {
                    g.release().await;
                    None
                }
                Err(e) => Some(e.to_string()),
            };
            event(
                stats,
                &format!(
                    "a+b held; another client's try_acquire_all([b, c]): Contended, refused as a whole{}",
                    free_in.map_or(String::new(), |d| format!(
                        " (free in {:.2}s)",
                        d.as_secs_f64()
                    ))
                ),
            );
            println!(
                "            try_acquire(c) right after: {}",
                if won.is_none() {
                    "won at once, the refused attempt left nothing on c"
                } else {
                    "refused"
                }
            );
            (None, won)
        }
        Err(e) => (Some(e.to_string()), None),
        Ok(g) => {
            g.release().await;
            (Some("an overlapping set was granted".to_string()), None)
        }
    };
    ab.release().await;

    let transfers = run_transfers(testbed, stats, resource_url, &names).await?;
    Ok(Nested {
        counts,
        other_refused,
        ledger_left,
        overlap_refused,
        free_name_won,
        transfers,
    })
}

/// One transfer worker's tally.
#[derive(Default)]
struct Worker {
    done: AtomicU64,
    gave_up: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Worker {
    fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        first.get_or_insert(e);
    }
}

/// Moves `amount` from one account to the other with a deliberately
/// non-atomic read, pause and write, and counts the transfer on both.
async fn transfer(
    con: &mut MultiplexedConnection,
    from: usize,
    to: usize,
    amount: i64,
) -> redis::RedisResult<()> {
    let read = |i: usize| {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(balance_key(i)).arg("balance").arg("transfers");
        cmd
    };
    let (fb, ft): (i64, u64) = read(from).query_async(con).await?;
    let (tb, tt): (i64, u64) = read(to).query_async(con).await?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    for (i, balance, count) in [(from, fb - amount, ft + 1), (to, tb + amount, tt + 1)] {
        redis::cmd("HSET")
            .arg(balance_key(i))
            .arg("balance")
            .arg(balance)
            .arg("transfers")
            .arg(count)
            .exec_async(con)
            .await?;
    }
    Ok(())
}

async fn transfer_worker(
    lock: MultiLock,
    mut con: MultiplexedConnection,
    pair: [usize; 2],
    stop: Arc<AtomicBool>,
    tally: Arc<Worker>,
) {
    let names = [account_lock(pair[0]), account_lock(pair[1])];
    let mut n: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        match lock.acquire_all(&names, Wait::up_to(WAIT)).await {
            Ok(guard) => {
                if guard.is_held() {
                    n += 1;
                    let (from, to) = if n % 2 == 0 {
                        (pair[0], pair[1])
                    } else {
                        (pair[1], pair[0])
                    };
                    match transfer(&mut con, from, to, 1 + n % 7).await {
                        Ok(()) => {
                            tally.done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => tally.error(e.to_string()),
                    }
                }
                guard.release().await;
            }
            Err(Error::WaitBudgetExhausted { .. }) => {
                tally.gave_up.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tally.error(e.to_string()),
        }
    }
}

/// Reads the owners of `names` on one node and describes any partial hold:
/// an owner holding one name of a pair without the other.
async fn sample(
    con: &mut MultiplexedConnection,
    names: &[String],
) -> redis::RedisResult<Option<String>> {
    let owners: Vec<Option<String>> = redis::cmd("EVAL")
        .arg(quorumlock_testbed::lock_key::OWNERS_SCRIPT)
        .arg(names.len())
        .arg(names)
        .query_async(con)
        .await?;
    let mut by_owner: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, owner) in names.iter().zip(&owners) {
        if let Some(owner) = owner {
            by_owner.entry(owner).or_default().push(name);
        }
    }
    Ok(by_owner
        .into_iter()
        .find(|(_, held)| held.len() != 2)
        .map(|(owner, held)| format!("owner {owner} holds only {}", held.join(", "))))
}

/// Samples every node until `stop`: (samples, partial holds, first one).
async fn sampler(
    urls: Vec<String>,
    names: Vec<String>,
    stop: Arc<AtomicBool>,
) -> (u64, u64, Option<String>) {
    let mut cons = Vec::new();
    for url in &urls {
        if let Ok(client) = redis::Client::open(url.as_str())
            && let Ok(con) = client.get_multiplexed_async_connection().await
        {
            cons.push((url.clone(), con));
        }
    }
    let (mut samples, mut partial, mut first) = (0, 0, None);
    while !stop.load(Ordering::SeqCst) {
        for (url, con) in &mut cons {
            if let Ok(found) = sample(con, &names).await {
                samples += 1;
                if let Some(what) = found {
                    partial += 1;
                    first.get_or_insert(format!("{url}: {what}"));
                }
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    (samples, partial, first)
}

/// The transfer workers (one client each), the sampler, and the checks of
/// the final state.
async fn run_transfers(
    testbed: &LockNodes,
    stats: &Stats,
    resource_url: &str,
    names: &[String],
) -> Result<Transfers, BoxError> {
    let client = redis::Client::open(resource_url)?;
    let mut resource = client.get_multiplexed_async_connection().await?;
    for i in 0..ACCOUNTS.len() {
        redis::cmd("HSET")
            .arg(balance_key(i))
            .arg("balance")
            .arg(OPENING)
            .arg("transfers")
            .arg(0)
            .exec_async(&mut resource)
            .await?;
    }
    let mut locks = Vec::new();
    for _ in PAIRS {
        let lock = MultiLock::new(part_config(testbed.urls(), TTL)?);
        connect(&lock).await?;
        locks.push(lock);
    }
    event(
        stats,
        &format!(
            "3 workers (a client each) transfer between a+b, b+c and c+a for {:.1}s: every pair overlaps",
            TRANSFER_TIME.as_secs_f64()
        ),
    );
    println!(
        "            the others; balances (opening {OPENING} each) are read, then written, non-atomically, on the"
    );
    println!(
        "            resource server; meanwhile every lock node is sampled for a name held without its pair"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Worker>> = PAIRS.iter().map(|_| Arc::default()).collect();
    let workers: Vec<_> = PAIRS
        .iter()
        .zip(&locks)
        .zip(&tallies)
        .map(|((&pair, lock), tally)| {
            tokio::spawn(transfer_worker(
                lock.clone(),
                resource.clone(),
                pair,
                Arc::clone(&stop),
                Arc::clone(tally),
            ))
        })
        .collect();
    let checker = tokio::spawn(sampler(testbed.urls(), names.to_vec(), Arc::clone(&stop)));
    tokio::time::sleep(TRANSFER_TIME).await;
    stop.store(true, Ordering::SeqCst);
    for (worker, tally) in workers.into_iter().zip(&tallies) {
        if worker.await.is_err() {
            tally.error("the worker panicked".to_string());
        }
    }
    let (samples, partial, first_partial) = checker.await.unwrap_or((0, 1, None));

    let mut accounts = Vec::new();
    for i in 0..ACCOUNTS.len() {
        let (balance, count): (i64, u64) = redis::cmd("HMGET")
            .arg(balance_key(i))
            .arg("balance")
            .arg("transfers")
            .query_async(&mut resource)
            .await?;
        accounts.push((balance, count));
    }
    let mut exists = redis::cmd("EXISTS");
    exists.arg(names);
    let mut keys_left = 0;
    for url in testbed.urls() {
        match on_node::<usize>(&url, &exists).await {
            Ok(n) => keys_left += n,
            Err(_) => keys_left += names.len(),
        }
    }

    let done: [u64; 3] = std::array::from_fn(|i| tallies[i].done.load(Ordering::Relaxed));
    let sum = |f: fn(&Worker) -> &AtomicU64| {
        tallies
            .iter()
            .map(|t| f(t).load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let lock_stats: Vec<_> = locks.iter().map(MultiLock::stats).collect();
    let transfers = Transfers {
        done,
        gave_up: sum(|w| &w.gave_up),
        errors: sum(|w| &w.errors),
        first_error: tallies.iter().find_map(|t| {
            t.first_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }),
        accounts,
        samples,
        partial,
        first_partial,
        keys_left,
        woken: lock_stats.iter().map(|s| s.woken).sum(),
        wake_notices: lock_stats.iter().map(|s| s.wake_notices).sum(),
        attempts: lock_stats.iter().map(|s| s.attempts).sum(),
    };
    let t = &transfers;
    event(
        stats,
        &format!(
            "stopped: transfers a+b {}, b+c {}, c+a {}; balances a {}, b {}, c {} (sum {})",
            t.done[0],
            t.done[1],
            t.done[2],
            t.accounts[0].0,
            t.accounts[1].0,
            t.accounts[2].0,
            t.accounts.iter().map(|a| a.0).sum::<i64>()
        ),
    );
    println!(
        "            transfers counted per account a {} (= {} + {}), b {} (= {} + {}), c {} (= {} + {});",
        t.accounts[0].1,
        t.done[0],
        t.done[2],
        t.accounts[1].1,
        t.done[0],
        t.done[1],
        t.accounts[2].1,
        t.done[1],
        t.done[2]
    );
    println!(
        "            {} samples of the lock nodes, {} with a name held without its pair;",
        t.samples, t.partial
    );
    println!(
        "            account lock keys left on the nodes: {}; waits woken by a release notice: {} ({} notices)",
        t.keys_left, t.woken, t.wake_notices
    );
    Ok(transfers)
}

/// The figures of parts 7 and 8 that ran: tokens and writes, transfers,
/// wake-ups and partial-hold samples.
fn figures_table(o: &FencingOutcome) -> Table {
    let mut table = Table::new([Align::Left, Align::Right, Align::Left]).indent(2);
    if let Ok(f) = &o.fencing {
        table.row([
            "fencing tokens handed out".to_string(),
            f.fencing_tokens.to_string(),
            format!("({})", tokens_text(&f.tokens)),
        ]);
        table.text(format!(
            "  paused holder A: token {}, first write {}, write after the pause {}",
            f.a_token,
            write_text(f.a_write),
            write_text(f.stale_write)
        ));
        table.text(format!(
            "  holder B: token {}, write {}",
            f.b_token,
            write_text(f.b_write)
        ));
        table.text(format!(
            "  node {RESTARTED}'s counter: {} after its restart, {} at the end",
            counter_text(&f.counter_after_restart),
            counter_text(&f.counter_at_end)
        ));
    }
    if let Ok(n) = &o.nested {
        let t = &n.transfers;
        table.row([
            "transfers".to_string(),
            t.done.iter().sum::<u64>().to_string(),
            format!(
                "(a+b {}, b+c {}, c+a {}; {} acquire_all attempts)",
                t.done[0], t.done[1], t.done[2], t.attempts
            ),
        ]);
        table.row([
            "acquires that gave up / other errors".to_string(),
            format!("{} / {}", t.gave_up, t.errors),
        ]);
        if let Some(first) = &t.first_error {
            table.text(format!("    first error: {first}"));
        }
        table.row([
            "waits woken by a release notice".to_string(),
            t.woken.to_string(),
            format!("({} notices received)", t.wake_notices),
        ]);
        table.row([
            "partial-hold samples of the nodes".to_string(),
            t.samples.to_string(),
            format!("({} partial)", t.partial),
        ]);
    }
    table
}

/// Prints the summary of parts 7 and 8 and returns whether every check
/// passed.
pub(crate) fn fencing_summary(o: &FencingOutcome) -> bool {
    println!();
    println!("Fencing and re-entry summary");
    println!();
    print!("{}", figures_table(o));
    println!();

    let mut ok = true;
    let mut check = |name: &str, failure: Option<String>| match failure {
        None => println!("{name}: OK"),
        Some(why) => {
            println!("{name}: FAILED ({why})");
            ok = false;
        }
    };
    match &o.fencing {
        Err(e) => {
            check("fencing part ran", Some(e.clone()));
        }
        Ok(f) => {
            check(
                "stale write of the paused holder rejected",
                if f.a_write != Write::Accepted || f.b_write != Write::Accepted {
                    Some(format!(
                        "A's first write {}, B's write {}",
                        write_text(f.a_write),
                        write_text(f.b_write)
                    ))
                } else if f.held_at_resume {
                    Some("A's lock still counted as held after its pause".to_string())
                } else if f.stale_write != (Write::Rejected { last: f.b_token }) {
                    Some(format!(
                        "A's write with token {} after its pause: {}",
                        f.a_token,
                        write_text(f.stale_write)
                    ))
                } else {
                    None
                },
            );
            let decreasing = f.tokens.windows(2).find(|w| w[0] >= w[1]);
            check(
                &format!(
                    "fencing tokens strictly increasing, also after node {RESTARTED} restarted empty"
                ),
                if let Some(w) = decreasing {
                    Some(format!("token {} after {}", w[1], w[0]))
                } else if f.tokens.len() != 2 + 2 * TAKES {
                    Some(format!(
                        "{} tokens, expected {}",
                        f.tokens.len(),
                        2 + 2 * TAKES
                    ))
                } else if f.later_rejected > 0 {
                    Some(format!(
                        "{} later holders' writes rejected",
                        f.later_rejected
                    ))
                } else if f.counter_after_restart != Ok(None) {
                    Some(format!(
                        "node {RESTARTED}'s counter after the restart: {:?}, expected none",
                        f.counter_after_restart
                    ))
                } else {
                    None
                },
            );
        }
    }
    match &o.nested {
        Err(e) => {
            check("re-entry and multi-name part ran", Some(e.clone()));
        }
        Ok(n) => {
            // An acquire returns at its quorum: a request to a slow node
            // may be dropped before it was sent, leaving that node a count
            // lower. A majority must show the count, and no node more.
            let wrong = n.counts.iter().find(|(_, counts, expected)| {
                let matching = counts.iter().filter(|c| **c == Some(*expected)).count();
                matching < NODES / 2 + 1 || counts.iter().any(|c| c.is_none_or(|c| c > *expected))
            });
            check(
                "re-entry: hold count 3, 2, 1 on the nodes, key gone after the last release",
                if let Some((step, counts, expected)) = wrong {
                    Some(format!(
                        "{step}: counts {}, expected {expected}",
                        counts_text(counts)
                    ))
                } else if n.ledger_left > 0 {
                    Some(format!(
                        "the key is left on {} nodes after the last release",
                        n.ledger_left
                    ))
                } else {
                    n.other_refused.clone()
                },
            );
            check(
                "an overlapping set refused whole, leaving nothing behind",
                n.overlap_refused
                    .clone()
                    .or_else(|| n.free_name_won.clone()),
            );
            let t = &n.transfers;
            let total: i64 = t.accounts.iter().map(|a| a.0).sum();
            let expected_counts: Vec<u64> = (0..ACCOUNTS.len())
                .map(|i| {
                    PAIRS
                        .iter()
                        .zip(t.done)
                        .filter(|(pair, _)| pair.contains(&i))
                        .map(|(_, d)| d)
                        .sum()
                })
                .collect();
            let counted: Vec<u64> = t.accounts.iter().map(|a| a.1).collect();
            check(
                "transfers consistent: balances keep their sum, every transfer counted",
                if total != OPENING * ACCOUNTS.len() as i64 {
                    Some(format!(
                        "balances sum to {total}, expected {}",
                        OPENING * ACCOUNTS.len() as i64
                    ))
                } else if counted != expected_counts {
                    Some(format!(
                        "transfer counts {counted:?}, expected {expected_counts:?}"
                    ))
                } else if let Some(i) = t.done.iter().position(|&d| d == 0) {
                    Some(format!("worker {} never transferred", i + 1))
                } else if t.errors > 0 {
                    Some(format!(
                        "{} errors, first: {}",
                        t.errors,
                        t.first_error.as_deref().unwrap_or("?")
                    ))
                } else {
                    None
                },
            );
            check(
                "no partial hold on any node, no lock key left",
                if t.partial > 0 {
                    Some(format!(
                        "{} of {} samples, first: {}",
                        t.partial,
                        t.samples,
                        t.first_partial.as_deref().unwrap_or("?")
                    ))
                } else if t.samples == 0 {
                    Some("no node was sampled".to_string())
                } else if t.keys_left > 0 {
                    Some(format!("{} account lock keys left", t.keys_left))
                } else {
                    None
                },
            );
        }
    }
    ok
}
