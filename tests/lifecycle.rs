//! The lifecycle of a lock as a user meets it, over the whole matrix of
//! settings: holds of 0.1, 1, 2 and 5 s × 3, 5 and 7 nodes × majority, all
//! and at least k × the watchdog on and off × wake-ups on and off.
//!
//! * In one process: once `release()` has returned, no node keeps the key
//!   (every node is healthy, so the release waits for each).
//! * The same for a semaphore's permit, a reader and a writer.
//! * In two: a waiter in another process gets the name within its retry
//!   delay plus a few round trips of the release, never the TTL, and
//!   nothing is left once it lets go.
//!
//! Every case runs at once, on its own name, over one testbed of 7 nodes
//! (a lock of 3 or 5 nodes uses the first 3 or 5).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use quorumlock::{
    LockConfig, MultiLock, MultiRwLock, MultiSemaphore, Permit, Quorum, ReadGuard, Wait, WriteGuard,
};
use quorumlock_testbed::Testbed;

/// The environment variable that turns [`lifecycle_waiter_process`] into
/// the waiter: the cases to wait for, one per line.
const WAITER_ENV: &str = "QL_LIFECYCLE_WAITER";

/// What starts each line the waiter process prints for the test.
const MARK: &str = "lifecycle> ";

/// The TTL with the watchdog: short, so that the holds of 2 and 5 s see
/// renewals (every TTL / 3).
const WATCHED_TTL: Duration = Duration::from_secs(5);
/// The TTL without: the default, so that a key left behind would outlive
/// every bound here by far.
const UNWATCHED_TTL: Duration = Duration::from_secs(30);

/// The TTL of every lock in the two-process test, watched or not: a key
/// left on a node would keep the waiter out for at least this minus the
/// longest hold (25 s). The one-process test covers renewals.
const TWO_PROCESS_TTL: Duration = UNWATCHED_TTL;

/// How long past a release the waiter may take before the test calls it a
/// key left behind: far below [`TWO_PROCESS_TTL`] minus the longest hold,
/// and far above the retry delay (200 ms at most) plus a few round trips
/// on any machine. The latency itself (median and slowest, well under a
/// second on an idle machine, up to about 3.5 s with both cores loaded
/// and a 7-node group) is printed: a figure, not an assertion.
const WAITER_BOUND: Duration = Duration::from_secs(10);

/// How long a node the release did not hear from in time (a busy machine
/// can stretch a round trip past the 50 ms node timeout) may keep the key:
/// its release goes on in the background and lands at its next reply.
const BACKGROUND_BOUND: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
struct Case {
    hold_ms: u64,
    nodes: usize,
    quorum: Quorum,
    watchdog: bool,
    wake_ups: bool,
}

impl Case {
    fn all() -> Vec<Case> {
        let mut cases = Vec::new();
        for nodes in [3, 5, 7] {
            let at_least = match nodes {
                3 => 2,
                5 => 4,
                _ => 5,
            };
            for hold_ms in [100, 1000, 2000, 5000] {
                for quorum in [Quorum::Majority, Quorum::All, Quorum::AtLeast(at_least)] {
                    for watchdog in [false, true] {
                        for wake_ups in [false, true] {
                            cases.push(Case {
                                hold_ms,
                                nodes,
                                quorum,
                                watchdog,
                                wake_ups,
                            });
                        }
                    }
                }
            }
        }
        cases
    }

    /// The case's lock name, unique per case and per test.
    fn name(&self, test: &str) -> String {
        let quorum = match self.quorum {
            Quorum::Majority => "majority".to_string(),
            Quorum::All => "all".to_string(),
            Quorum::AtLeast(k) => format!("k{k}"),
            other => format!("{other:?}"),
        };
        format!(
            "life:{test}:{}ms:n{}:{quorum}:wd{}:wu{}",
            self.hold_ms,
            self.nodes,
            u8::from(self.watchdog),
            u8::from(self.wake_ups)
        )
    }

    /// The case's lock; `watched_ttl` is its TTL when the watchdog is on.
    fn lock(&self, urls: &[String], watched_ttl: Duration) -> MultiLock {
        let ttl = if self.watchdog {
            watched_ttl
        } else {
            UNWATCHED_TTL
        };
        MultiLock::new(
            LockConfig::builder()
                .nodes(urls[..self.nodes].iter().cloned())
                .quorum(self.quorum)
                .ttl(ttl)
                .watchdog(self.watchdog)
                .wake_ups(self.wake_ups)
                // Hundreds of locks connect at the start of a test.
                .connect_timeout(Duration::from_secs(5))
                .build()
                .expect("valid case"),
        )
    }

    /// One line for the waiter process.
    fn encode(&self) -> String {
        let quorum = match self.quorum {
            Quorum::AtLeast(k) => k,
            Quorum::All => 0,
            _ => 1,
        };
        format!(
            "{} {} {quorum} {} {}",
            self.hold_ms,
            self.nodes,
            u8::from(self.watchdog),
            u8::from(self.wake_ups)
        )
    }

    fn decode(line: &str) -> Case {
        let f: Vec<u64> = line
            .split(' ')
            .map(|x| x.parse().expect("a number"))
            .collect();
        Case {
            hold_ms: f[0],
            nodes: f[1] as usize,
            quorum: match f[2] {
                0 => Quorum::All,
                1 => Quorum::Majority,
                k => Quorum::AtLeast(k as usize),
            },
            watchdog: f[3] == 1,
            wake_ups: f[4] == 1,
        }
    }
}

/// A connected lock for every case, as a user has one: a lock shared by
/// several holds would hide what a lone hold meets (another hold's release
/// shows its nodes alive). Connected a few at a time.
async fn locks(cases: &[Case], urls: &[String], watched_ttl: Duration) -> Vec<MultiLock> {
    let mut locks = Vec::with_capacity(cases.len());
    for chunk in cases.chunks(8) {
        let connected = chunk
            .iter()
            .map(|c| common::connected(c.lock(urls, watched_ttl)));
        locks.extend(join_all(connected).await);
    }
    locks
}

/// The cases in groups of one node count (48 each), run one group after
/// the other so that a test needs a few hundred connections at a time.
fn groups() -> Vec<Vec<Case>> {
    Case::all()
        .chunk_by(|a, b| a.nodes == b.nodes)
        .map(<[Case]>::to_vec)
        .collect()
}

/// The nodes (of the first `n`) that still have `key`.
fn holding(testbed: &Testbed, n: usize, key: &str) -> Vec<usize> {
    (0..n)
        .filter(|&i| common::value_on(testbed.node(i), key).is_some())
        .collect()
}

/// The nodes (of the first `n`) where `key` still belongs to `token` once
/// [`BACKGROUND_BOUND`] has passed (none may: a release that timed out
/// must still land).
async fn still_owned(testbed: &Testbed, n: usize, key: &str, token: &str) -> Vec<usize> {
    within_background_bound(|| {
        (0..n)
            .filter(|&i| common::value_on(testbed.node(i), key).as_deref() == Some(token))
            .collect()
    })
    .await
}

/// What `left` finds once it finds nothing, or once [`BACKGROUND_BOUND`]
/// has passed: a release that timed out goes on in the background.
async fn within_background_bound(left: impl Fn() -> Vec<usize>) -> Vec<usize> {
    let give_up = Instant::now() + BACKGROUND_BOUND;
    let mut found = left();
    while !found.is_empty() && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
        found = left();
    }
    found
}

/// What a release left: the nodes that keep `key` although they answered
/// the release in time (none may), and those that keep it past the
/// background bound (a release that timed out must still land).
async fn left_after(
    testbed: &Testbed,
    n: usize,
    key: &str,
    report: &quorumlock::ReleaseReport,
) -> (Vec<usize>, Vec<usize>) {
    let late: Vec<&str> = report.failed.iter().map(|e| e.node()).collect();
    let urls = testbed.urls();
    let answered_but_kept = holding(testbed, n, key)
        .into_iter()
        .filter(|&i| !late.contains(&urls[i].as_str()))
        .collect();
    let kept = within_background_bound(|| holding(testbed, n, key)).await;
    (answered_but_kept, kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_lets_go_on_every_node() {
    let testbed = Testbed::start(7).expect("testbed");
    let urls = testbed.urls();
    let mut outcomes = Vec::new();
    for cases in groups() {
        let locks = locks(&cases, &urls, WATCHED_TTL).await;
        outcomes.extend(
            join_all(cases.into_iter().zip(locks).map(|(case, lock)| {
                let testbed = &testbed;
                async move {
                    let name = case.name("one");
                    let guard = common::take_free(&lock, &name).await;
                    tokio::time::sleep(Duration::from_millis(case.hold_ms)).await;
                    let report = guard.release().await;
                    let left = left_after(testbed, case.nodes, &name, &report).await;
                    (case, report, left)
                }
            }))
            .await,
        );
    }
    let late = outcomes
        .iter()
        .filter(|(_, report, _)| !report.failed.is_empty())
        .count();
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|(_, _, (kept, still))| !kept.is_empty() || !still.is_empty())
        .map(|(case, report, (kept, still))| {
            format!("{case:?}: kept by nodes that answered {kept:?}, past the bound {still:?}; {report:?}")
        })
        .collect();
    println!(
        "{} cases: {} with a key left once release() returned, {late} with a node that answered \
         the release late (a busy machine)",
        outcomes.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// What a slot primitive holds in one case of
/// [`every_release_of_a_permit_a_reader_or_a_writer_lets_go_on_every_node`].
#[derive(Clone, Copy, Debug)]
enum Slots {
    Permit,
    Read,
    Write,
}

/// The same for the primitives built on slots: a permit (one slot of
/// four), a reader (one reader slot) and a writer (all of them), each
/// held 0.1, 1 and 2 s, watched or not, on a majority and on all of 5
/// nodes: once `release()` has returned, no node that answered keeps any
/// of its slot keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_of_a_permit_a_reader_or_a_writer_lets_go_on_every_node() {
    let testbed = Testbed::start(5).expect("testbed");
    let urls = testbed.urls();
    let mut cases = Vec::new();
    for kind in [Slots::Permit, Slots::Read, Slots::Write] {
        for hold_ms in [100, 1000, 2000] {
            for quorum in [Quorum::Majority, Quorum::All] {
                for watchdog in [false, true] {
                    let case = Case {
                        hold_ms,
                        nodes: 5,
                        quorum,
                        watchdog,
                        wake_ups: true,
                    };
                    cases.push((kind, case));
                }
            }
        }
    }
    let plain: Vec<Case> = cases.iter().map(|(_, c)| c.clone()).collect();
    let locks = locks(&plain, &urls, WATCHED_TTL).await;
    let outcomes = join_all(cases.into_iter().zip(locks).map(|((kind, case), lock)| {
        let testbed = &testbed;
        async move {
            let name = case.name(&format!("{kind:?}"));
            let wait = Wait::up_to(Duration::from_secs(20));
            let guard = match kind {
                Slots::Permit => MultiSemaphore::over(&lock)
                    .acquire(&name, 4, wait)
                    .await
                    .map(Permit::into_guard),
                Slots::Read => MultiRwLock::new(lock.config().clone())
                    .read(&name, wait)
                    .await
                    .map(ReadGuard::into_guard),
                Slots::Write => MultiRwLock::new(lock.config().clone())
                    .write(&name, wait)
                    .await
                    .map(WriteGuard::into_guard),
            }
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let keys: Vec<String> = guard.keys().map(str::to_owned).collect();
            tokio::time::sleep(Duration::from_millis(case.hold_ms)).await;
            let report = guard.release().await;
            let mut left = Vec::new();
            for key in &keys {
                let (kept, still) = left_after(testbed, case.nodes, key, &report).await;
                if !kept.is_empty() || !still.is_empty() {
                    left.push(format!("{key}: kept by {kept:?}, past the bound {still:?}"));
                }
            }
            (kind, case, report, left)
        }
    }))
    .await;
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|(.., left)| !left.is_empty())
        .map(|(kind, case, report, left)| format!("{kind:?} {case:?}: {left:?}; {report:?}"))
        .collect();
    println!(
        "{} cases: {} with a slot key left once release() returned",
        outcomes.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The waiter's side, in a process of its own (this test binary run again
/// with [`WAITER_ENV`] set): waits for every case's name at once and prints
/// (after [`MARK`]) `ready <name>` once its first attempt was refused (it
/// waits), `got <name>` when it has the name, and `done <name>` once it let
/// go again.
/// Without the variable (a normal test run) it does nothing.
#[test]
fn lifecycle_waiter_process() {
    let Ok(spec) = std::env::var(WAITER_ENV) else {
        return;
    };
    let mut lines = spec.lines();
    let urls: Vec<String> = lines
        .next()
        .expect("the urls")
        .split(' ')
        .map(String::from)
        .collect();
    let cases: Vec<Case> = lines.map(Case::decode).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = move |what: &str, name: &str| {
        let mut out = out.lock().expect("stdout");
        writeln!(out, "{MARK}{what} {name}").expect("stdout");
        out.flush().expect("stdout");
    };
    runtime.block_on(async {
        let locks = locks(&cases, &urls, TWO_PROCESS_TTL).await;
        join_all(cases.iter().zip(&locks).map(|(case, lock)| {
            let say = &say;
            async move {
                let name = case.name("two");
                let wait =
                    Wait::up_to(Duration::from_millis(case.hold_ms) + Duration::from_secs(40));
                // "ready" once an attempt has been refused: the waiter then
                // truly waits (between attempts, or for a notice), and what
                // the test measures is how fast a release reaches it, not
                // how long this process takes to start 48 acquire calls at
                // once (3.4 s on a busy machine, once).
                let refused = async {
                    common::wait_for("an attempt refused", Duration::from_secs(40), || {
                        let stats = lock.stats();
                        stats.contended + stats.quorum_not_reached + stats.validity_used_up > 0
                    })
                    .await;
                    say("ready", &name);
                };
                let (guard, ()) = tokio::join!(lock.acquire(&name, wait), refused);
                let guard = guard.expect("the waiter's turn");
                say("got", &name);
                guard.release().await;
                say("done", &name);
            }
        }))
        .await
    });
}

/// The waiter process, killed by its pid if the test ends first.
struct Waiter(Child);

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the waiter said, and when this process heard it.
type Heard = Arc<Mutex<HashMap<(String, String), Instant>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_process_gets_the_name_at_once() {
    let testbed = Testbed::start(7).expect("testbed");
    let mut latencies = Vec::new();
    for cases in groups() {
        latencies.extend(one_waiter_process(&testbed, cases).await);
    }
    let mut sorted: Vec<_> = latencies.iter().map(|(_, _, l)| *l).collect();
    sorted.sort();
    let by = |wake_ups: bool| {
        let mut l: Vec<_> = latencies
            .iter()
            .filter(|(c, _, _)| c.wake_ups == wake_ups)
            .map(|(_, _, l)| *l)
            .collect();
        l.sort();
        (l[l.len() / 2], l[l.len() - 1])
    };
    println!(
        "{} cases: the waiter got the name {:?} (median) / {:?} (slowest) after release() \
         returned; with wake-ups {:?}, without {:?} (median, slowest)",
        latencies.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        by(true),
        by(false),
    );
    let bad: Vec<String> = latencies
        .iter()
        .filter(|(_, _, late)| *late > WAITER_BOUND)
        .map(|(case, report, late)| format!("{case:?}: {late:?}; {report:?}"))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    for case in Case::all() {
        let left = holding(&testbed, case.nodes, &case.name("two"));
        assert!(left.is_empty(), "{case:?}: left on {left:?}");
    }
}

/// Holds every case's name here, starts one waiter process for them all,
/// and releases each once the waiter waits for it: how long after each
/// release the waiter had the name.
async fn one_waiter_process(
    testbed: &Testbed,
    cases: Vec<Case>,
) -> Vec<(Case, quorumlock::ReleaseReport, Duration)> {
    let urls = &testbed.urls();
    // Every name held before the waiter starts.
    let locks = locks(&cases, urls, TWO_PROCESS_TTL).await;
    let guards = join_all(
        cases
            .iter()
            .zip(&locks)
            .map(|(case, lock)| async move { common::take_free(lock, &case.name("two")).await }),
    )
    .await;
    let mut spec = urls.join(" ");
    for case in &cases {
        spec.push('\n');
        spec.push_str(&case.encode());
    }
    // What the waiter process prints besides its lines, for a failure.
    let waiter_log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lifecycle-waiter.log");
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "lifecycle_waiter_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WAITER_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&waiter_log).expect("the waiter's log"))
        .spawn()
        .expect("start the waiter process");
    let stdout = child.stdout.take().expect("piped");
    let waiter = Waiter(child);
    let heard: Heard = Arc::default();
    let reader = {
        let heard = Arc::clone(&heard);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness may print before a line of ours.
                let Some((_, ours)) = line.split_once(MARK) else {
                    continue;
                };
                if let Some((what, name)) = ours.split_once(' ') {
                    let mut heard = heard.lock().expect("heard");
                    heard.insert((what.to_string(), name.to_string()), Instant::now());
                }
            }
        })
    };
    let said = |what: &'static str, name: String| {
        let heard = Arc::clone(&heard);
        let waiter_log = &waiter_log;
        async move {
            common::wait_for(
                &format!(
                    "the waiter to say {what} {name} (its log: {})",
                    waiter_log.display()
                ),
                Duration::from_secs(60),
                || {
                    heard
                        .lock()
                        .expect("heard")
                        .contains_key(&(what.to_string(), name.clone()))
                },
            )
            .await;
            heard.lock().expect("heard")[&(what.to_string(), name)]
        }
    };
    let latencies = join_all(cases.into_iter().zip(guards).map(|(case, guard)| {
        let said = &said;
        async move {
            let name = case.name("two");
            said("ready", name.clone()).await;
            tokio::time::sleep(Duration::from_millis(case.hold_ms)).await;
            let token = guard.token().to_string();
            let report = guard.release().await;
            let released = Instant::now();
            // The invariant itself: the holder's own key is gone from every
            // node within the background bound (the waiter's may be there).
            let kept = still_owned(testbed, case.nodes, &name, &token).await;
            assert!(kept.is_empty(), "{case:?}: kept by {kept:?}; {report:?}");
            let got = said("got", name.clone()).await;
            said("done", name).await;
            (case, report, got.saturating_duration_since(released))
        }
    }))
    .await;
    drop(waiter);
    let _ = reader.join();
    latencies
}
