//! Nothing grows with the work done next to a hostile server: 5,000
//! acquire+release cycles with each misbehaviour as 1 node of 3 leave
//! memory, tasks and connections flat. A test binary of its own: resident
//! memory is the process's, and the tests of `tests/hostile.rs` running
//! beside it (one keeps a 999,999,999-byte reply trickling in) would count.

mod common;

use std::time::Instant;

use common::hostile::{BOUND, acquire_and_release, every_misbehaviour, one_beside, rss};
use quorumlock_testbed::Testbed;

/// 5,000 acquire+release cycles with each misbehaviour as 1 node of 3:
/// memory, tasks and connections stay flat (figures printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_cycles_per_misbehaviour_leave_nothing_growing() {
    let testbed = Testbed::start(2).expect("testbed");
    for misbehaviour in every_misbehaviour() {
        let (hostile, lock) = one_beside(&testbed, misbehaviour.clone(), true).await;
        let cycle = |i: u64| {
            let lock = lock.clone();
            async move { acquire_and_release(&lock, &format!("cycle-{}", i % 64)).await }
        };
        // Warm-up: allocator settled.
        for i in 0..500 {
            cycle(i).await;
        }
        let metrics = tokio::runtime::Handle::current().metrics();
        let (rss_before, tasks_before) = (rss(), metrics.num_alive_tasks());
        let connections_before = hostile.accepted();
        let began = Instant::now();
        for i in 0..5_000 {
            cycle(i).await;
        }
        let took = began.elapsed();
        let (rss_after, tasks_in_flight) = (rss(), metrics.num_alive_tasks());
        // Calls to a late node finish in background tasks, each bounded
        // (a release's by the connect and node timeouts), and calls queued
        // behind one go out when it ends: how many are alive at an instant
        // swings with the timing. Growth is what outlives its bound.
        common::wait_for(
            &format!("{misbehaviour:?}: the background tasks to end"),
            BOUND,
            || metrics.num_alive_tasks() <= tasks_before + 8,
        )
        .await;
        let tasks_after = metrics.num_alive_tasks();
        let connections = hostile.accepted() - connections_before;
        println!(
            "{misbehaviour:?}: 5,000 cycles in {took:.1?} ({:.0} µs each), RSS {:.1} -> {:.1} MiB, \
             tasks {tasks_before} -> {tasks_in_flight} -> {tasks_after}, {connections} new connections, {} commands in all",
            took.as_micros() as f64 / 5_000.0,
            rss_before as f64 / 1048576.0,
            rss_after as f64 / 1048576.0,
            hostile.commands()
        );
        assert!(
            rss_after < rss_before + 4 * 1024 * 1024,
            "{misbehaviour:?}: memory grew"
        );
        assert!(
            tasks_after <= tasks_before + 8,
            "{misbehaviour:?}: tasks grew"
        );
        // No storm of connects: after a failed connect the next waits 25 ms,
        // doubling to 1 s (`node/connection.rs`), so a node that fails every
        // connect gets 7 in its first 1.6 s and one a second after that,
        // whatever the cycles do. The warm-up may end anywhere in that ramp.
        assert!(
            connections as f64 <= took.as_secs_f64() + 8.0,
            "{misbehaviour:?}: {connections} connections"
        );
        drop(lock);
        common::wait_until_gone(&testbed, "cycle-0", "released").await;
    }
}
