//! Integration tests for the fake wall clock (`NodeOptions::fake_clock`,
//! `RedisNode::set_clock`, `RedisNode::wall_clock_skew`) against real
//! `redis-server` processes.
//!
//! Every wait is a bounded poll on a condition; timing assertions compare
//! the server's clock with local readings taken around each request, so
//! they hold however slowly the machine runs.

use std::fs;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorumlock_testbed::redis::{self, Connection};
use quorumlock_testbed::{ClockSkew, NodeOptions, Persistence, Restart, Testbed, TestbedError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Sleep between two polls of a condition.
const POLL: Duration = Duration::from_millis(5);
/// Allowed error of `wall_clock_skew` (half a round trip), generous for a
/// loaded CI machine.
const SKEW_TOLERANCE_MS: i64 = 50;

fn fake_clock_options() -> NodeOptions {
    // Raw server behaviour under the shim: no quorumlock marker key.
    NodeOptions {
        fake_clock: true,
        skip_adoption: true,
        ..NodeOptions::default()
    }
}

fn skew(rate: f64, offset_ms: i64) -> ClockSkew {
    ClockSkew { rate, offset_ms }
}

fn unix_us(time: SystemTime) -> i128 {
    i128::try_from(
        time.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_micros(),
    )
    .expect("fits")
}

/// One `TIME` round trip: the server's clock and the local clock halfway
/// through the request, in µs since the epoch, and the round trip in µs.
#[derive(Clone, Copy, Debug)]
struct Sample {
    local_us: i128,
    server_us: i128,
    rtt_us: i128,
}

impl Sample {
    fn skew_us(&self) -> i128 {
        self.server_us - self.local_us
    }
}

fn sample(con: &mut Connection) -> redis::RedisResult<Sample> {
    let before = unix_us(SystemTime::now());
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con)?;
    let after = unix_us(SystemTime::now());
    Ok(Sample {
        local_us: before + (after - before) / 2,
        server_us: i128::from(secs) * 1_000_000 + i128::from(micros),
        rtt_us: after - before,
    })
}

fn exists(con: &mut Connection, key: &str) -> redis::RedisResult<bool> {
    redis::cmd("EXISTS").arg(key).query(con)
}

fn pttl(con: &mut Connection, key: &str) -> redis::RedisResult<i64> {
    redis::cmd("PTTL").arg(key).query(con)
}

fn set_px(con: &mut Connection, key: &str, px: u64) -> redis::RedisResult<()> {
    redis::cmd("SET")
        .arg(key)
        .arg("v")
        .arg("PX")
        .arg(px)
        .query(con)
}

fn assert_near(actual: i64, expected: i64, tolerance: i64, what: &str) {
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what}: {actual}, expected {expected} ± {tolerance}"
    );
}

/// A bounded mix of ordinary commands that must all work under the shim.
fn exercise(con: &mut Connection) -> TestResult {
    let pong: String = redis::cmd("PING").query(con)?;
    assert_eq!(pong, "PONG");
    redis::cmd("SET")
        .arg("plain")
        .arg("value")
        .query::<()>(con)?;
    let value: String = redis::cmd("GET").arg("plain").query(con)?;
    assert_eq!(value, "value");
    for i in 1..=100 {
        let n: i64 = redis::cmd("INCR").arg("counter").query(con)?;
        assert_eq!(n, i);
    }
    let len: i64 = redis::cmd("RPUSH")
        .arg("list")
        .arg(&["a", "b", "c"])
        .query(con)?;
    assert_eq!(len, 3);
    let items: Vec<String> = redis::cmd("LRANGE").arg("list").arg(0).arg(-1).query(con)?;
    assert_eq!(items, ["a", "b", "c"]);
    redis::cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("1")
        .query::<()>(con)?;
    let field: String = redis::cmd("HGET").arg("hash").arg("f").query(con)?;
    assert_eq!(field, "1");
    let set: bool = redis::cmd("EXPIRE").arg("hash").arg(100).query(con)?;
    assert!(set);
    let ttl: i64 = redis::cmd("TTL").arg("hash").query(con)?;
    assert!((99..=100).contains(&ttl), "TTL {ttl}");
    let script: i64 = redis::cmd("EVAL")
        .arg("return redis.call('INCR', KEYS[1])")
        .arg(1)
        .arg("counter")
        .query(con)?;
    assert_eq!(script, 101);
    let info: String = redis::cmd("INFO").arg("everything").query(con)?;
    assert!(info.contains("redis_version:"), "{info}");
    let dbsize: i64 = redis::cmd("DBSIZE").query(con)?;
    assert_eq!(dbsize, 4);
    Ok(())
}

/// Runs `BGSAVE` (a fork; the child runs under the shim too) and waits,
/// bounded, until it finished successfully.
fn bgsave(con: &mut Connection) -> TestResult {
    redis::cmd("BGSAVE").query::<()>(con)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(con)?;
        if info.contains("rdb_bgsave_in_progress:0") {
            assert!(info.contains("rdb_last_bgsave_status:ok"), "{info}");
            return Ok(());
        }
        assert!(Instant::now() < deadline, "BGSAVE did not finish: {info}");
        thread::sleep(POLL);
    }
}

/// (a) With no control file, and with rate 1 offset 0, the clock is the
/// real one and the server works normally, also across a restart.
#[test]
fn normal_fake_clock_is_the_real_clock() -> TestResult {
    let mut testbed = Testbed::start_with(1, fake_clock_options())?;
    assert!(!testbed.node(0).clock_control_path().exists());
    assert_near(
        testbed.node(0).wall_clock_skew()?,
        0,
        SKEW_TOLERANCE_MS,
        "skew, no file",
    );

    testbed.node(0).set_clock(ClockSkew::NORMAL)?;
    assert_eq!(
        fs::read_to_string(testbed.node(0).clock_control_path())?,
        "1.0 0\n"
    );
    assert_near(
        testbed.node(0).wall_clock_skew()?,
        0,
        SKEW_TOLERANCE_MS,
        "skew, rate 1",
    );
    let mut con = testbed.node(0).connection()?;
    exercise(&mut con)?;
    let s = sample(&mut con)?;
    assert!(s.skew_us().abs() <= 20_000, "{s:?}");
    bgsave(&mut con)?;

    testbed.node_mut(0).restart(Restart::immediate())?;
    assert_near(
        testbed.node(0).wall_clock_skew()?,
        0,
        SKEW_TOLERANCE_MS,
        "skew after restart",
    );
    let mut con = testbed.node(0).connection()?;
    redis::cmd("FLUSHALL").query::<()>(&mut con)?;
    exercise(&mut con)?;
    Ok(())
}

/// (b) An offset step moves `TIME` at once and expires keys whose deadline
/// it jumps over; a step back revives their TTL; the offset survives a
/// restart (the control file stays in the node directory).
#[test]
fn offset_steps_time_and_expiry() -> TestResult {
    let mut testbed = Testbed::start_with(1, fake_clock_options())?;
    let node = testbed.node(0);
    let mut con = node.connection()?;
    set_px(&mut con, "short", 2000)?;
    set_px(&mut con, "long", 10_000)?;
    let before = sample(&mut con)?;

    node.set_clock(skew(1.0, 2500))?;
    assert!(
        !exists(&mut con, "short")?,
        "PX 2000 key survived a +2.5 s step"
    );
    assert!(exists(&mut con, "long")?);
    let after = sample(&mut con)?;
    let jump_us = after.skew_us() - before.skew_us();
    let tolerance_us = (before.rtt_us + after.rtt_us) / 2 + 2000;
    assert!(
        (jump_us - 2_500_000).abs() <= tolerance_us,
        "TIME jumped by {jump_us} µs (tolerance {tolerance_us})"
    );
    assert_near(
        node.wall_clock_skew()?,
        2500,
        SKEW_TOLERANCE_MS,
        "skew after +2500",
    );
    let ttl = pttl(&mut con, "long")?;
    assert!((7_000..=7_500).contains(&ttl), "PTTL after +2.5 s: {ttl}");

    // Steps go backwards too: 2.8 s back, and the TTL grows by as much.
    node.set_clock(skew(1.0, -300))?;
    assert_near(
        node.wall_clock_skew()?,
        -300,
        SKEW_TOLERANCE_MS,
        "skew after -300",
    );
    let ttl_back = pttl(&mut con, "long")?;
    assert!(
        (ttl + 2_700..=ttl + 2_800).contains(&ttl_back),
        "PTTL {ttl} -> {ttl_back} after stepping 2.8 s back"
    );

    testbed.node_mut(0).restart(Restart::immediate())?;
    assert_near(
        testbed.node(0).wall_clock_skew()?,
        -300,
        SKEW_TOLERANCE_MS,
        "skew after restart",
    );
    Ok(())
}

/// (c) At rate 4 a PX 2000 key lives about 500 ms of real time: present
/// until then (e.g. at ~100 ms), gone soon after, surely by 1000 ms.
#[test]
fn fast_clock_expires_keys_early() -> TestResult {
    let testbed = Testbed::start_with(1, fake_clock_options())?;
    let node = testbed.node(0);
    node.set_clock(skew(4.0, 0))?;
    let mut con = node.connection()?;

    let t0 = Instant::now();
    set_px(&mut con, "k", 2000)?;
    let t1 = Instant::now();
    // The key expires when the fake clock has run 2000 ms, i.e. at a real
    // instant in [t0 + 500 ms, t1 + 500 ms].
    let expires_earliest = t0 + Duration::from_millis(500);
    let expires_latest = t1 + Duration::from_millis(500);
    let deadline = t0 + Duration::from_millis(1000);
    let mut seen_present_after_100ms = false;
    let gone_at = loop {
        let asked = Instant::now();
        let present = exists(&mut con, "k")?;
        let answered = Instant::now();
        if present {
            // A small margin for the µs the shim needs between reading the
            // real clocks and the command reading the cached time.
            assert!(
                asked <= expires_latest + Duration::from_millis(10),
                "still present {:?} after SET",
                asked - t0
            );
            seen_present_after_100ms |= asked >= t0 + Duration::from_millis(100);
        } else {
            assert!(
                answered + Duration::from_millis(10) >= expires_earliest,
                "gone already {:?} after SET",
                answered - t0
            );
            break answered - t0;
        }
        assert!(
            Instant::now() < deadline,
            "PX 2000 key still present 1000 ms after SET at rate 4"
        );
        thread::sleep(POLL);
    };
    assert!(seen_present_after_100ms, "no poll saw the key after 100 ms");
    eprintln!("PX 2000 key gone after {gone_at:?} at rate 4");
    Ok(())
}

/// Asserts that between `a` and `b` the server clock advanced at a rate
/// between `min_rate` and `max_rate` (so it did not jump), allowing the
/// measurement error of both samples.
fn assert_continuous(a: Sample, b: Sample, min_rate: f64, max_rate: f64) {
    let local = (b.local_us - a.local_us) as f64;
    let server = (b.server_us - a.server_us) as f64;
    // Each midpoint is off by at most half its round trip, during which the
    // server clock moves at most max_rate times as far; plus the µs between
    // the shim's two clock reads.
    let tolerance = max_rate * (a.rtt_us + b.rtt_us) as f64 / 2.0 + 1000.0;
    assert!(
        server >= min_rate * local - tolerance && server <= max_rate * local + tolerance,
        "server clock advanced {server} µs over {local} µs local \
         (allowed rate {min_rate}..{max_rate}, ± {tolerance} µs): {a:?} -> {b:?}"
    );
}

/// Polls (bounded) until `node`'s skew satisfies `done`.
fn wait_for_skew(
    con: &mut Connection,
    done: impl Fn(i128) -> bool,
) -> Result<Sample, TestbedError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = sample(con)?;
        if done(s.skew_us()) {
            return Ok(s);
        }
        assert!(Instant::now() < deadline, "skew never got there: {s:?}");
        thread::sleep(POLL);
    }
}

/// Polls (bounded) until at least `span` of local time passed since `from`.
fn sample_after(
    con: &mut Connection,
    from: Sample,
    span: Duration,
) -> Result<Sample, TestbedError> {
    let span_us = i128::try_from(span.as_micros()).expect("fits");
    let deadline = Instant::now() + span + Duration::from_secs(5);
    loop {
        let s = sample(con)?;
        if s.local_us - from.local_us >= span_us {
            return Ok(s);
        }
        assert!(Instant::now() < deadline);
        thread::sleep(POLL);
    }
}

/// (d) Rate changes keep the clock continuous: the drift accumulated so far
/// stays, only the speed changes.
#[test]
fn rate_changes_keep_the_clock_continuous() -> TestResult {
    let testbed = Testbed::start_with(1, fake_clock_options())?;
    let node = testbed.node(0);
    let mut con = node.connection()?;

    node.set_clock(skew(4.0, 0))?;
    let fast_start = sample(&mut con)?;
    // Accumulate at least 300 ms of drift.
    let fast = wait_for_skew(&mut con, |skew_us| skew_us >= 300_000)?;
    assert_continuous(fast_start, fast, 4.0 - 0.01, 4.0 + 0.01);

    node.set_clock(skew(1.0, 0))?;
    let normal = sample(&mut con)?;
    assert_continuous(fast, normal, 1.0, 4.0);
    assert!(normal.skew_us() >= 300_000, "drift lost: {normal:?}");
    let normal_later = sample_after(&mut con, normal, Duration::from_millis(100))?;
    assert_continuous(normal, normal_later, 1.0 - 0.01, 1.0 + 0.01);

    node.set_clock(skew(0.25, 0))?;
    let slow = sample(&mut con)?;
    assert_continuous(normal_later, slow, 0.25, 1.0);
    let slow_later = sample_after(&mut con, slow, Duration::from_millis(100))?;
    assert_continuous(slow, slow_later, 0.25 - 0.01, 0.25 + 0.01);

    // A rate change together with an offset change: continuous apart from
    // exactly the offset step.
    node.set_clock(skew(2.0, 1000))?;
    let stepped = sample(&mut con)?;
    let unstepped = Sample {
        server_us: stepped.server_us - 1_000_000,
        ..stepped
    };
    assert_continuous(slow_later, unstepped, 0.25, 2.0);
    Ok(())
}

/// (e) Typed errors: no shim, bad rates and offsets; the control file is
/// left alone by a rejected skew.
#[test]
fn set_clock_errors_are_typed() -> TestResult {
    let mut plain = Testbed::start(1)?;
    let port = plain.node(0).port();
    match plain.node(0).set_clock(ClockSkew::NORMAL) {
        Err(TestbedError::FakeClockDisabled { port: p }) => assert_eq!(p, port),
        other => panic!("expected FakeClockDisabled, got {other:?}"),
    }
    assert!(!plain.node(0).clock_control_path().exists());
    // Measuring the skew needs no shim.
    assert_near(
        plain.node(0).wall_clock_skew()?,
        0,
        SKEW_TOLERANCE_MS,
        "plain node skew",
    );
    plain.node_mut(0).kill()?;
    assert!(matches!(
        plain.node(0).wall_clock_skew(),
        Err(TestbedError::NotRunning { .. })
    ));

    let testbed = Testbed::start_with(1, fake_clock_options())?;
    let node = testbed.node(0);
    node.set_clock(skew(1.0, 42))?;
    for (bad, named) in [
        (skew(f64::NAN, 0), "rate NaN"),
        (skew(f64::INFINITY, 0), "rate inf"),
        (skew(f64::NEG_INFINITY, 0), "rate -inf"),
        (skew(0.0, 0), "rate 0"),
        (skew(-0.0, 0), "rate -0"),
        (skew(-2.0, 0), "rate -2"),
        (skew(1e6, 0), "rate 1000000"),
        (skew(1.0, i64::MAX), "offset_ms 9223372036854775807"),
    ] {
        match node.set_clock(bad) {
            Err(err @ TestbedError::InvalidClockSkew { .. }) => {
                let message = err.to_string();
                assert!(message.contains(named), "{message:?} lacks {named:?}");
            }
            other => panic!("{bad:?}: expected InvalidClockSkew, got {other:?}"),
        }
    }
    assert_eq!(fs::read_to_string(node.clock_control_path())?, "1.0 42\n");
    assert_near(node.wall_clock_skew()?, 42, SKEW_TOLERANCE_MS, "skew kept");
    Ok(())
}

/// A small deterministic generator for the churn workload.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The server keeps serving for a few seconds at rate 1.5 under key churn
/// from several connections (short-lived keys expired lazily and by the
/// active expire cycle, AOF with its background fsync thread, an AOF
/// rewrite fork), while a second node's clock stays normal.
#[test]
fn fast_clock_survives_key_churn() -> TestResult {
    let options = NodeOptions {
        fake_clock: true,
        persistence: Persistence::AofAlways,
        extra_config: vec![
            ("appendfsync".into(), "everysec".into()),
            ("hz".into(), "50".into()),
        ],
        skip_adoption: true,
    };
    let testbed = Testbed::start_with(2, options)?;
    let node = testbed.node(0);
    let set_started = Instant::now();
    node.set_clock(skew(1.5, 0))?;
    let set_done = Instant::now();

    let churn = Duration::from_secs(3);
    let deadline = Instant::now() + churn;
    let total_ops: u64 = thread::scope(|scope| {
        let workers: Vec<_> = (0..3u64)
            .map(|worker| {
                scope.spawn(move || -> Result<u64, TestbedError> {
                    let mut con = node.connection()?;
                    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (worker + 1));
                    let mut ops = 0;
                    while Instant::now() < deadline {
                        let key = format!("churn:{worker}:{}", rng.next() % 64);
                        match rng.next() % 8 {
                            0..=2 => set_px(&mut con, &key, 1 + rng.next() % 50)?,
                            3 => {
                                let _: Option<String> =
                                    redis::cmd("GET").arg(&key).query(&mut con)?;
                            }
                            4 => {
                                let _: i64 = redis::cmd("INCR")
                                    .arg(format!("counter:{worker}"))
                                    .query(&mut con)?;
                            }
                            5 => {
                                let _: bool =
                                    redis::cmd("PEXPIRE").arg(&key).arg(20).query(&mut con)?;
                            }
                            6 => {
                                let _: i64 = pttl(&mut con, &key)?;
                            }
                            _ => {
                                let _: String = redis::cmd("INFO").arg("stats").query(&mut con)?;
                                let _: (i64, i64) = redis::cmd("TIME").query(&mut con)?;
                            }
                        }
                        ops += 1;
                    }
                    Ok(ops)
                })
            })
            .collect();
        let mut con = node.connection()?;
        redis::cmd("BGREWRITEAOF").query::<()>(&mut con)?;
        let mut total = 0;
        for worker in workers {
            total += worker.join().expect("worker panicked")?;
        }
        Ok::<_, TestbedError>(total)
    })?;
    eprintln!("{total_ops} commands in {churn:?} at rate 1.5");
    assert!(total_ops >= 300, "only {total_ops} commands in {churn:?}");

    // The only keys without a TTL are the three counters; every churn key
    // had at most a 50 ms TTL, so expiry (active or lazy) removes them all.
    let mut con = node.connection()?;
    let expiry_deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con)?;
        let counters: i64 = redis::cmd("EXISTS")
            .arg(&["counter:0", "counter:1", "counter:2"])
            .query(&mut con)?;
        if dbsize == counters {
            break;
        }
        assert!(
            Instant::now() < expiry_deadline,
            "{dbsize} keys left, {counters} of them counters"
        );
        thread::sleep(POLL);
    }

    // The drift is half the real time since the rate change.
    let before = Instant::now();
    let skew = node.wall_clock_skew()?;
    let after = Instant::now();
    let min = i64::try_from((before - set_done).as_millis() / 2)? - 20;
    let max = i64::try_from((after - set_started).as_millis() / 2)? + 20;
    assert!(
        (min..=max).contains(&skew),
        "skew {skew} ms not in {min}..={max}"
    );
    assert_near(
        testbed.node(1).wall_clock_skew()?,
        0,
        SKEW_TOLERANCE_MS,
        "the other node",
    );
    assert!(node.is_running());
    Ok(())
}
