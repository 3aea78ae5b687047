//! Integration tests of the replica pair: a write lost on failover, rejoin
//! and a second failover, cut and heal. They change `iptables` (root
//! needed) and run one at a time, so each can check that no chain of this
//! process is left behind.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use common::{get, process_exists, set};
use quorumlock_testbed::{
    LinkCutChain, NodeOptions, RedisNode, ReplicaPair, TestbedError, sweep_stale_chains,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// How long a healthy replica is given to catch up.
const SYNC: Duration = Duration::from_secs(30);
/// How long `WAIT` gives a cut-off replica to (wrongly) acknowledge.
const NO_ACK_WAIT_MS: u64 = 300;

/// The tests share the process's chain prefix; one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `SET key value` on `master`, then `WAIT 1 timeout_ms` on the same
/// connection: how many replicas acknowledged the write (0 or 1), waiting
/// at most `timeout_ms`.
fn set_acked(
    master: &RedisNode,
    key: &str,
    value: &str,
    timeout_ms: u64,
) -> Result<i64, TestbedError> {
    let mut con = master.connection()?;
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(&mut con)?;
    Ok(redis::cmd("WAIT").arg(1).arg(timeout_ms).query(&mut con)?)
}

fn role(node: &RedisNode) -> Result<String, TestbedError> {
    let mut con = node.connection()?;
    let info: String = redis::cmd("INFO").arg("replication").query(&mut con)?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("role:"))
        .unwrap_or_default()
        .trim()
        .to_owned())
}

fn iptables_rules() -> Result<String, Box<dyn std::error::Error>> {
    let output = Command::new("iptables").args(["-w", "-S"]).output()?;
    assert!(output.status.success(), "iptables -S: {output:?}");
    Ok(String::from_utf8(output.stdout)?)
}

/// Every `iptables -S` line that names a chain of this process.
fn our_rules() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let ours = format!("QLCHAOS-{}-", std::process::id());
    Ok(iptables_rules()?
        .lines()
        .filter(|line| line.contains(&ours))
        .map(str::to_owned)
        .collect())
}

/// Asserts that no chain of this process (nor a jump to one) is left.
fn assert_no_chain_left() -> TestResult {
    let rules = our_rules()?;
    assert!(rules.is_empty(), "chains left behind: {rules:?}");
    Ok(())
}

#[test]
fn a_write_during_a_cut_is_lost_on_failover() -> TestResult {
    let _serial = serial();
    let (master_pid, replica_pid) = {
        let mut pair = ReplicaPair::start(NodeOptions::default())?;
        let pids = (pair.master().pid(), pair.replica().pid());
        assert_eq!(role(pair.master())?, "master");
        assert_eq!(role(pair.replica())?, "slave");

        // Replication works before the cut.
        assert_eq!(set_acked(pair.master(), "before", "1", 10_000)?, 1);
        assert_eq!(get(pair.replica(), "before")?.as_deref(), Some("1"));
        pair.wait_in_sync(SYNC)?;

        pair.cut_link()?;
        assert!(pair.is_link_cut());
        let chain = pair.link_cut_chain().ok_or("no chain")?.to_owned();
        assert!(iptables_rules()?.contains(&format!("-N {chain}")));
        let before = pair.offsets()?;
        assert_eq!(before.master, before.replica);

        // Clients still reach the master; the replica never gets the lock.
        assert_eq!(
            set_acked(pair.master(), "lock", "holder-1", NO_ACK_WAIT_MS)?,
            0
        );
        assert_eq!(get(pair.master(), "lock")?.as_deref(), Some("holder-1"));
        let after = pair.offsets()?;
        assert!(after.master > before.master, "{after:?}");
        assert_eq!(after.replica, before.replica);
        assert_eq!(get(pair.replica(), "lock")?, None);

        let old_master_pid = pair.master().pid().ok_or("master not running")?;
        let old_master_port = pair.master().port();
        let new_master = pair.fail_over()?;
        assert_eq!(new_master, pair.master().addr());
        assert_ne!(pair.master().port(), old_master_port);
        assert_eq!(pair.replica().port(), old_master_port);
        assert!(!pair.replica().is_running());
        assert!(!process_exists(old_master_pid));
        assert!(!pair.is_link_cut());
        assert_no_chain_left()?;

        // The lost-lock fault: the promoted replica never had it.
        assert_eq!(role(pair.master())?, "master");
        assert_eq!(get(pair.master(), "lock")?, None);
        assert_eq!(get(pair.master(), "before")?.as_deref(), Some("1"));
        set(pair.master(), "lock", "holder-2")?;
        assert_eq!(get(pair.master(), "lock")?.as_deref(), Some("holder-2"));
        pids
    };
    for pid in [master_pid, replica_pid].into_iter().flatten() {
        assert!(!process_exists(pid), "pid {pid} outlived the pair");
    }
    assert_no_chain_left()
}

#[test]
fn rejoin_makes_a_second_failover_possible() -> TestResult {
    let _serial = serial();
    {
        let mut pair = ReplicaPair::start(NodeOptions::default())?;
        let first_port = pair.master().port();
        assert!(matches!(
            pair.rejoin(),
            Err(TestbedError::AlreadyRunning { .. })
        ));

        assert_eq!(set_acked(pair.master(), "old", "1", 10_000)?, 1);
        pair.fail_over()?;
        let started = Instant::now();
        pair.rejoin()?;
        eprintln!("rejoined in {:?}", started.elapsed());
        assert_eq!(pair.replica().port(), first_port);
        assert_eq!(role(pair.replica())?, "slave");
        // Rejoined empty, then synced from the new master.
        assert_eq!(get(pair.replica(), "old")?.as_deref(), Some("1"));
        assert_eq!(set_acked(pair.master(), "k", "v", 10_000)?, 1);
        assert_eq!(get(pair.replica(), "k")?.as_deref(), Some("v"));

        // The second failover loses a write the same way.
        pair.cut_link()?;
        assert_eq!(set_acked(pair.master(), "lost", "x", NO_ACK_WAIT_MS)?, 0);
        pair.fail_over()?;
        assert_eq!(pair.master().port(), first_port);
        assert_eq!(get(pair.master(), "lost")?, None);
        assert_eq!(get(pair.master(), "k")?.as_deref(), Some("v"));

        // A restarted master stays a master: its config has no replicaof.
        pair.master_mut()
            .restart(quorumlock_testbed::Restart::immediate())?;
        assert_eq!(role(pair.master())?, "master");
        pair.rejoin()?;
        assert_eq!(set_acked(pair.master(), "third", "3", 10_000)?, 1);
    }
    assert_no_chain_left()
}

#[test]
fn cut_and_heal_keep_replication_working() -> TestResult {
    let _serial = serial();
    {
        let mut pair = ReplicaPair::start(NodeOptions::default())?;
        for round in 0..2 {
            pair.cut_link()?;
            pair.cut_link()?; // idempotent
            assert_eq!(
                our_rules()?.iter().filter(|l| l.starts_with("-N ")).count(),
                1
            );
            let key = format!("during-{round}");
            assert_eq!(set_acked(pair.master(), &key, "x", NO_ACK_WAIT_MS)?, 0);
            assert_eq!(get(pair.replica(), &key)?, None);
            match pair.wait_in_sync(Duration::from_millis(100)) {
                Err(TestbedError::NotInSync { waited, .. }) => {
                    assert!(waited >= Duration::from_millis(100));
                }
                other => panic!("in sync across a cut: {other:?}"),
            }

            pair.heal_link()?;
            assert!(!pair.is_link_cut());
            assert_no_chain_left()?;
            let started = Instant::now();
            pair.wait_in_sync(SYNC)?;
            eprintln!(
                "round {round}: in sync {:?} after the heal",
                started.elapsed()
            );
            assert_eq!(get(pair.replica(), &key)?.as_deref(), Some("x"));
            assert_eq!(
                set_acked(pair.master(), "after", &round.to_string(), 10_000)?,
                1
            );
            assert_eq!(get(pair.replica(), "after")?, Some(round.to_string()));
        }
        pair.heal_link()?; // healing a healthy link does nothing
    }
    assert_no_chain_left()
}

#[test]
fn a_panic_while_cut_still_removes_the_chain() -> TestResult {
    const PANIC: &str = "test panic while the link is cut";
    let _serial = serial();
    let result = std::panic::catch_unwind(|| {
        let mut pair = ReplicaPair::start(NodeOptions::default()).expect("pair starts");
        pair.cut_link().expect("link cut");
        assert!(!our_rules().expect("iptables -S").is_empty());
        std::panic::panic_any(PANIC);
    });
    let payload = result.err().ok_or("the closure did not panic")?;
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    assert_eq!(message, Some(PANIC), "not the test's own panic");
    assert_no_chain_left()
}

#[test]
fn sweep_removes_chains_of_dead_processes_only() -> TestResult {
    let _serial = serial();
    let mut child = Command::new("true").spawn()?;
    let dead_pid = child.id();
    child.wait()?;
    assert!(!process_exists(dead_pid));
    let stale = format!("QLCHAOS-{dead_pid}-0");
    let run = |args: &[&str]| -> TestResult {
        let status = Command::new("iptables").arg("-w").args(args).status()?;
        assert!(status.success(), "iptables {args:?}");
        Ok(())
    };
    #[rustfmt::skip]
    let stale_commands: [&[&str]; 3] = [
        &["-N", &stale],
        &["-A", &stale, "-p", "tcp", "-s", "127.0.0.3/32", "-j", "DROP"],
        &["-A", "OUTPUT", "-o", "lo", "-j", &stale],
    ];
    for args in stale_commands {
        run(args)?;
    }
    // A chain of this (living) process; the guard removes it, also if an
    // assertion below fails.
    let live = LinkCutChain::cut(
        Ipv4Addr::new(127, 0, 0, 3),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
    )?;
    let live_name = live.name().to_owned();
    let removed = sweep_stale_chains()?;
    let rules = iptables_rules()?;
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(!removed.contains(&live_name), "{removed:?}");
    assert!(!rules.contains(&stale), "{rules}");
    assert!(rules.contains(&format!("-N {live_name}")), "{rules}");
    live.remove()?;
    assert_no_chain_left()
}
