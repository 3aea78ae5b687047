//! `MultiRwLock` against real nodes: readers share, a writer excludes
//! readers and writers, a waiting writer is not starved by a stream of
//! readers, writers' fencing tokens rise (and readers' sit between them),
//! nodes that lost their data vote no writer in, and errors name the lock.
//! The leftover check runs after every test.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, MultiRwLock, ReadGuard, Wait, WriteGuard};
use quorumlock_testbed::{Restart, Testbed};

fn rwlock(testbed: &Testbed) -> MultiRwLock {
    MultiRwLock::new(common::lock(testbed).config().clone())
}

const LONG: Wait = Wait::up_to(Duration::from_secs(20));

async fn read(rw: &MultiRwLock, name: &str) -> ReadGuard {
    rw.read(name, LONG)
        .await
        .unwrap_or_else(|e| panic!("reading {name}: {e}"))
}

async fn write(rw: &MultiRwLock, name: &str) -> WriteGuard {
    rw.write(name, LONG)
        .await
        .unwrap_or_else(|e| panic!("writing {name}: {e}"))
}

fn assert_contended<T: std::fmt::Debug>(result: Result<T, Error>) {
    match result {
        Err(Error::Contended { key, .. }) => assert_eq!(key, "doc", "named by the lock"),
        other => panic!("expected Contended, got {other:?}"),
    }
}

#[tokio::test]
async fn readers_share_and_a_writer_is_alone() {
    let testbed = Testbed::start(3).expect("testbed");
    let rw = rwlock(&testbed);
    let readers = [read(&rw, "doc").await, read(&rw, "doc").await];
    assert_ne!(readers[0].slot(), readers[1].slot());
    assert_contended(rw.try_write("doc").await);
    for reader in readers {
        assert!(reader.release().await.was_held);
    }
    let writer = rw.try_write("doc").await.expect("no reader left");
    assert_eq!(writer.keys().count(), MultiRwLock::READER_SLOTS as usize);
    assert_contended(rw.try_read("doc").await);
    assert_contended(rw.try_write("doc").await);
    assert!(writer.release().await.was_held);
    read(&rw, "doc").await.release().await;
}

/// Readers and writers of several lock services at once: a writer never
/// holds while anyone else does; readers do hold together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_never_overlaps_a_reader_or_a_writer() {
    let testbed = Testbed::start(3).expect("testbed");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let rw = rwlock(&testbed);
        let (readers, writers) = (Arc::clone(&readers), Arc::clone(&writers));
        let most_readers = Arc::clone(&most_readers);
        tasks.push(tokio::spawn(async move {
            for round in 0..8 {
                if (worker + round) % 4 == 0 {
                    let guard = write(&rw, "doc").await;
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with readers");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.was_held);
                } else {
                    let guard = read(&rw, "doc").await;
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.was_held);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    assert!(most_readers.load(Ordering::SeqCst) >= 1);
}

/// The rule: once a writer waits, readers that come after it are refused
/// until it has written. Four readers keep the name read without a gap
/// (each takes it again before it lets go); the writer still gets it, and
/// while it writes no reader holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let testbed = Testbed::start(3).expect("testbed");
    let rw = rwlock(&testbed);
    let written = Arc::new(AtomicBool::new(false));
    let reading = Arc::new(AtomicUsize::new(0));
    // Readers that ran out of rounds before the writer wrote.
    let ran_out = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (rw, written, reading, ran_out) = (
            MultiRwLock::new(rw.lock().config().clone()),
            Arc::clone(&written),
            Arc::clone(&reading),
            Arc::clone(&ran_out),
        );
        readers.push(tokio::spawn(async move {
            let mut held = read(&rw, "doc").await;
            reading.fetch_add(1, Ordering::SeqCst);
            // Bounded: a writer that is never let in fails the test.
            for round in 0..=2_000 {
                if written.load(Ordering::SeqCst) {
                    break;
                }
                if round == 2_000 {
                    ran_out.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                // The next read is asked for before this one ends.
                let next = rw.read("doc", Wait::up_to(Duration::from_millis(2))).await;
                reading.fetch_sub(1, Ordering::SeqCst);
                held.release().await;
                held = match next {
                    Ok(next) => next,
                    Err(_) => read(&rw, "doc").await,
                };
                reading.fetch_add(1, Ordering::SeqCst);
            }
            reading.fetch_sub(1, Ordering::SeqCst);
            held.release().await;
        }));
    }
    common::wait_for("four readers", Duration::from_secs(20), || {
        reading.load(Ordering::SeqCst) == 4
    })
    .await;
    let writer = write(&rw, "doc").await;
    assert_eq!(reading.load(Ordering::SeqCst), 0, "readers while it writes");
    assert_eq!(
        ran_out.load(Ordering::SeqCst),
        0,
        "the writer got in only once the readers stopped"
    );
    written.store(true, Ordering::SeqCst);
    writer.release().await;
    for reader in readers {
        reader.await.expect("reader");
    }
}

#[tokio::test]
async fn tokens_rise_across_writers_and_readers_sit_between_them() {
    let testbed = Testbed::start(3).expect("testbed");
    let rw = rwlock(&testbed);
    let w1 = write(&rw, "doc").await;
    let t1 = w1.fencing_token().await.expect("token");
    w1.release().await;
    let r = read(&rw, "doc").await;
    let tr = r.fencing_token().await.expect("token");
    r.release().await;
    let w2 = write(&rw, "doc").await;
    let t2 = w2.fencing_token().await.expect("token");
    w2.release().await;
    assert!(t1 < tr && tr < t2, "writer {t1}, reader {tr}, writer {t2}");
}

#[tokio::test]
async fn nodes_that_lost_their_data_vote_no_writer_in() {
    let mut testbed = Testbed::start(3).expect("testbed");
    let everywhere = common::every_node_lock(&testbed).await;
    let rw = MultiRwLock::new(everywhere.config().clone());
    rw.lock().warm_up().await;
    let reader = read(&rw, "doc").await;
    for node in 0..2 {
        testbed
            .node_mut(node)
            .restart(Restart::immediate().wiping())
            .expect("restart empty");
    }
    // n0 and n1 would give a writer every slot, but they are young.
    match rwlock(&testbed).try_write("doc").await {
        Err(Error::Contended { .. } | Error::QuorumNotReached { .. }) => {}
        other => panic!("a writer beside a reader: {other:?}"),
    }
    reader.release().await;
}

#[tokio::test]
async fn bad_names_are_refused() {
    let testbed = Testbed::start(1).expect("testbed");
    let rw = rwlock(&testbed);
    for name in ["", "quorumlock:epoch", "quorumlock:rw:doc:1"] {
        assert!(matches!(
            rw.try_read(name).await,
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            rw.try_write(name).await,
            Err(Error::InvalidKey { .. })
        ));
    }
}
