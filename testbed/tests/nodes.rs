//! Integration tests for starting, killing, restarting and pausing nodes.

mod common;

use std::time::{Duration, Instant};

use common::{get, process_exists, set};
use quorumlock_testbed::{NodeOptions, Persistence, RedisNode, Restart, Testbed, TestbedError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn ping(node: &RedisNode) -> Result<String, TestbedError> {
    let mut con = node.connection()?;
    Ok(redis::cmd("PING").query(&mut con)?)
}

#[test]
fn starts_three_nodes_that_answer_ping() -> TestResult {
    let started = Instant::now();
    let testbed = Testbed::start(3)?;
    eprintln!("3 nodes up in {:?}", started.elapsed());
    assert_eq!(testbed.len(), 3);
    assert!(!testbed.is_empty());
    let urls = testbed.urls();
    assert_eq!(urls.len(), 3);
    for (node, url) in testbed.nodes().iter().zip(&urls) {
        assert!(node.is_running());
        assert!(!node.is_paused());
        assert!(node.pid().is_some());
        assert_eq!(url, &format!("redis://127.0.0.1:{}", node.port()));
        assert_eq!(node.url(), *url);
        assert!(node.dir().join("redis.conf").is_file());
        assert_eq!(ping(node)?, "PONG");
    }
    let mut ports: Vec<u16> = testbed.nodes().iter().map(RedisNode::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "ports must be distinct");
    Ok(())
}

#[test]
fn five_nodes_start_quickly() -> TestResult {
    let started = Instant::now();
    let testbed = Testbed::start(5)?;
    let elapsed = started.elapsed();
    eprintln!("5 nodes up in {elapsed:?}");
    assert_eq!(testbed.len(), 5);
    // Generous bound: the 2-core CI machine may be busy with other tests.
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    Ok(())
}

#[test]
fn empty_testbed_is_allowed() -> TestResult {
    let testbed = Testbed::start(0)?;
    assert!(testbed.is_empty());
    assert!(testbed.urls().is_empty());
    Ok(())
}

#[test]
fn kill_and_restart_on_same_port() -> TestResult {
    let mut testbed = Testbed::start(3)?;
    let port = testbed.node(0).port();
    let old_pid = testbed.node(0).pid();

    testbed.node_mut(0).kill()?;
    assert!(!testbed.node(0).is_running());
    assert_eq!(testbed.node(0).pid(), None);
    assert!(testbed.node(0).connection().is_err() || ping(testbed.node(0)).is_err());
    // Killing a stopped node is a no-op.
    testbed.node_mut(0).kill()?;
    // The other nodes are unaffected.
    assert_eq!(ping(testbed.node(1))?, "PONG");

    testbed.node_mut(0).restart(Restart::immediate())?;
    assert!(testbed.node(0).is_running());
    assert_eq!(testbed.node(0).port(), port);
    assert_ne!(testbed.node(0).pid(), old_pid);
    assert_eq!(ping(testbed.node(0))?, "PONG");

    // start() on a running node is refused.
    assert!(matches!(
        testbed.node_mut(0).start(),
        Err(TestbedError::AlreadyRunning { .. })
    ));

    // kill + start works as well, also after a delay.
    testbed.node_mut(0).kill()?;
    testbed.node_mut(0).start()?;
    assert_eq!(ping(testbed.node(0))?, "PONG");
    let started = Instant::now();
    testbed
        .node_mut(0)
        .restart(Restart::after(Duration::from_millis(100)))?;
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(testbed.node(0).port(), port);
    assert_eq!(ping(testbed.node(0))?, "PONG");
    Ok(())
}

#[test]
fn restart_with_open_client_connections_reuses_port() -> TestResult {
    let mut testbed = Testbed::start(1)?;
    let port = testbed.node(0).port();
    // Keep a client connection open across the kill, so the server side of
    // the old connection lingers in TIME_WAIT/CLOSE_WAIT.
    let mut con = testbed.node(0).connection()?;
    let _: String = redis::cmd("PING").query(&mut con)?;
    testbed.node_mut(0).restart(Restart::immediate())?;
    assert_eq!(testbed.node(0).port(), port);
    assert_eq!(ping(testbed.node(0))?, "PONG");
    Ok(())
}

#[test]
fn aof_always_keeps_keys_across_kill() -> TestResult {
    let options = NodeOptions {
        persistence: Persistence::AofAlways,
        ..NodeOptions::default()
    };
    let mut testbed = Testbed::start_with(1, options)?;
    set(testbed.node(0), "k", "v")?;
    testbed.node_mut(0).restart(Restart::immediate())?;
    assert_eq!(get(testbed.node(0), "k")?.as_deref(), Some("v"));
    assert!(testbed.node(0).dir().join("appendonlydir").is_dir());

    // Wiping the data loses the key even with AOF.
    testbed.node_mut(0).restart(Restart::immediate().wiping())?;
    assert_eq!(get(testbed.node(0), "k")?, None);
    Ok(())
}

#[test]
fn no_persistence_loses_keys_across_kill() -> TestResult {
    let mut testbed = Testbed::start(1)?;
    set(testbed.node(0), "k", "v")?;
    assert_eq!(get(testbed.node(0), "k")?.as_deref(), Some("v"));
    testbed.node_mut(0).restart(Restart::immediate())?;
    assert_eq!(get(testbed.node(0), "k")?, None);
    Ok(())
}

#[test]
fn wipe_data_requires_a_stopped_node() -> TestResult {
    let mut testbed = Testbed::start(1)?;
    assert!(matches!(
        testbed.node_mut(0).wipe_data(),
        Err(TestbedError::AlreadyRunning { .. })
    ));
    testbed.node_mut(0).kill()?;
    testbed.node_mut(0).wipe_data()?;
    Ok(())
}

#[test]
fn pause_blocks_replies_and_resume_restores_them() -> TestResult {
    let mut testbed = Testbed::start(2)?;
    let mut before = testbed.node(0).connection()?;
    before.set_read_timeout(Some(Duration::from_millis(200)))?;
    let _: String = redis::cmd("PING").query(&mut before)?;

    testbed.node_mut(0).pause()?;
    assert!(testbed.node(0).is_paused());
    assert!(testbed.node(0).is_running());

    // A connection opened before the pause times out.
    let started = Instant::now();
    let result: redis::RedisResult<String> = redis::cmd("PING").query(&mut before);
    let err = result.err().ok_or("PING to a paused node answered")?;
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    assert!(started.elapsed() >= Duration::from_millis(150));

    // A connection opened during the pause connects, then times out.
    let mut during = testbed.node(0).connection()?;
    during.set_read_timeout(Some(Duration::from_millis(200)))?;
    let result: redis::RedisResult<String> = redis::cmd("PING").query(&mut during);
    assert!(result.is_err_and(|err| err.is_timeout()));

    // The other node is unaffected.
    assert_eq!(ping(testbed.node(1))?, "PONG");

    testbed.node_mut(0).resume()?;
    assert!(!testbed.node(0).is_paused());
    assert_eq!(ping(testbed.node(0))?, "PONG");
    Ok(())
}

#[test]
fn kill_works_on_a_paused_node() -> TestResult {
    let mut testbed = Testbed::start(1)?;
    testbed.node_mut(0).pause()?;
    let pid = testbed.node(0).pid().ok_or("no pid")?;
    testbed.node_mut(0).kill()?;
    assert!(!testbed.node(0).is_running());
    assert!(!testbed.node(0).is_paused());
    assert!(!process_exists(pid));
    assert!(matches!(
        testbed.node_mut(0).resume(),
        Err(TestbedError::NotRunning { .. })
    ));
    assert!(matches!(
        testbed.node_mut(0).pause(),
        Err(TestbedError::NotRunning { .. })
    ));
    testbed.node_mut(0).start()?;
    assert!(!testbed.node(0).is_paused());
    assert_eq!(ping(testbed.node(0))?, "PONG");
    Ok(())
}

#[test]
fn drop_kills_and_reaps_all_processes() -> TestResult {
    let mut testbed = Testbed::start(3)?;
    // One paused node: SIGKILL must still take it down.
    testbed.node_mut(2).pause()?;
    let pids: Vec<u32> = testbed.nodes().iter().filter_map(RedisNode::pid).collect();
    assert_eq!(pids.len(), 3);
    let root = testbed.root().to_path_buf();
    for &pid in &pids {
        assert!(process_exists(pid));
    }
    drop(testbed);
    for pid in pids {
        assert!(!process_exists(pid), "pid {pid} still exists after drop");
    }
    assert!(!root.exists(), "temporary directory not removed");
    Ok(())
}

#[test]
fn drop_during_panic_kills_processes() -> TestResult {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let testbed = match Testbed::start(1) {
            Ok(testbed) => testbed,
            Err(err) => panic!("start failed: {err}"),
        };
        let _ = pid_tx.send(testbed.node(0).pid());
        panic!("simulated test failure");
    })
    .join();
    assert!(result.is_err());
    let pid = pid_rx.recv()?.ok_or("no pid")?;
    assert!(!process_exists(pid), "pid {pid} survived the panic");
    Ok(())
}

#[test]
fn server_exit_is_noticed() -> TestResult {
    let mut testbed = Testbed::start(1)?;
    let mut con = testbed.node(0).connection()?;
    // SHUTDOWN NOSAVE closes the connection instead of replying.
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut con);
    let deadline = Instant::now() + Duration::from_secs(5);
    while testbed.node(0).is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!testbed.node(0).is_running());
    testbed.node_mut(0).start()?;
    assert_eq!(ping(testbed.node(0))?, "PONG");
    Ok(())
}

#[test]
fn extra_config_is_applied() -> TestResult {
    let options = NodeOptions {
        extra_config: vec![("maxmemory".into(), "12345678".into())],
        ..NodeOptions::default()
    };
    let testbed = Testbed::start_with(1, options)?;
    let mut con = testbed.node(0).connection()?;
    let values: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut con)?;
    assert_eq!(values, ["maxmemory", "12345678"]);
    Ok(())
}

#[test]
fn bad_config_gives_start_failed_with_log_tail() {
    let options = NodeOptions {
        extra_config: vec![("no-such-directive".into(), "1".into())],
        ..NodeOptions::default()
    };
    match Testbed::start_with(1, options) {
        Err(TestbedError::StartFailed {
            log_tail, reason, ..
        }) => {
            assert!(reason.contains("exited"), "reason: {reason}");
            assert!(log_tail.contains("no-such-directive"), "log: {log_tail}");
        }
        other => panic!("expected StartFailed, got {other:?}"),
    }
}

#[test]
fn binary_that_exits_gives_start_failed() {
    match Testbed::start_with_binary(1, NodeOptions::default(), "/bin/false") {
        Err(TestbedError::StartFailed { .. }) => {}
        other => panic!("expected StartFailed, got {other:?}"),
    }
}

#[test]
fn log_tail_returns_last_lines() -> TestResult {
    let testbed = Testbed::start(1)?;
    let tail = testbed.node(0).log_tail(3);
    assert!(tail.lines().count() <= 3, "tail: {tail}");
    assert!(
        testbed
            .node(0)
            .log_tail(1000)
            .contains("Ready to accept connections"),
        "log: {}",
        testbed.node(0).log_tail(1000)
    );
    assert_eq!(testbed.node(0).log_tail(0), "");
    Ok(())
}

#[test]
fn testbed_and_nodes_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Testbed>();
    assert_send_sync::<RedisNode>();
    assert_send_sync::<TestbedError>();
}
