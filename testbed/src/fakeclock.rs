//! A fake wall clock for `redis-server` nodes: make a node's clock run fast
//! or slow, or step it forwards or backwards, while the server keeps running.
//!
//! Redis expires keys by the wall clock: `SET .. PX`, `PEXPIRE` and friends
//! store an absolute Unix time in milliseconds, computed from
//! `gettimeofday`, and a key is expired once the server's wall clock passes
//! it (`TIME` reads the same clock). A node whose wall clock runs fast
//! therefore drops lock keys early, which is exactly what a distributed lock
//! has to survive.
//!
//! # How it works
//!
//! A node started with [`NodeOptions::fake_clock`](crate::NodeOptions::fake_clock)
//! runs its `redis-server` with a small `LD_PRELOAD` shim (C, built by this
//! crate's build script and embedded in the library; it is written into the
//! node directory when needed). The shim interposes
//!
//! - `clock_gettime` for `CLOCK_REALTIME` and `CLOCK_REALTIME_COARSE`,
//! - `gettimeofday`,
//! - `time`,
//!
//! and answers them with
//!
//! ```text
//! fake = real + offset + drift
//! ```
//!
//! where `drift` integrates `rate - 1` over (monotonic) time since the
//! server process started. Changing the rate re-anchors: the fake clock
//! stays continuous and only its speed changes. Changing the offset steps
//! the clock by the difference at once.
//!
//! The settings live in the control file `clock.ctl` in the node directory
//! (one line, `"<rate> <offset_ms>"`), which
//! [`RedisNode::set_clock`](crate::RedisNode::set_clock) replaces atomically.
//! The shim re-reads it at most once per millisecond, lazily, whenever the
//! server reads the wall clock (which Redis does for every command and in
//! its 10 Hz cron), so a change is in effect when `set_clock` returns.
//!
//! # What is not faked
//!
//! - `CLOCK_MONOTONIC` (and every other clock id) passes through untouched.
//!   Redis 7 drives its event loop timers (`serverCron`, client timeouts,
//!   the active expire cycle's time budget) from `CLOCK_MONOTONIC`, so they
//!   run at normal speed; only what is compared against the wall clock
//!   moves: key expiry (lazy, on access, and in the active expire cycle),
//!   the `TIME` reply, `INFO`'s `server_time_usec`, log timestamps.
//! - The drift is not persisted: every (re)start of the server starts with
//!   zero drift and the offset currently in the control file. The file
//!   itself survives restarts (it lives in the node directory), so a
//!   restarted node keeps its rate and offset but loses the drift it had
//!   accumulated: its clock steps back to `real + offset`.
//! - Other processes (the test itself, the lock clients) see the real clock.
//!
//! [`RedisNode::wall_clock_skew`](crate::RedisNode::wall_clock_skew)
//! measures the result from outside: the node's `TIME` minus the local wall
//! clock.
//!
//! ```
//! use quorumlock_testbed::{ClockSkew, NodeOptions, Testbed};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = NodeOptions {
//!     fake_clock: true,
//!     ..NodeOptions::default()
//! };
//! let testbed = Testbed::start_with(1, options)?;
//! let node = testbed.node(0);
//! node.set_clock(ClockSkew {
//!     offset_ms: 60_000,
//!     ..ClockSkew::NORMAL
//! })?;
//! let skew = node.wall_clock_skew()?;
//! assert!((59_900..=60_100).contains(&skew), "{skew}");
//! node.set_clock(ClockSkew::NORMAL)?;
//! # Ok(())
//! # }
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use std::{fmt, fs};

use crate::TestbedError;

/// The shim, built by `build.rs` from `shim/fakeclock.c`.
const SHIM: &[u8] = include_bytes!(env!("QUORUMLOCK_FAKECLOCK_SO"));

/// File name of the shim inside a node directory.
pub(crate) const SHIM_FILE: &str = "libquorumlock_fakeclock.so";
/// File name of the control file inside a node directory.
pub(crate) const CONTROL_FILE: &str = "clock.ctl";
/// Environment variable through which the shim learns the control file.
pub(crate) const CONTROL_ENV: &str = "QUORUMLOCK_FAKECLOCK";
/// How long [`RedisNode::set_clock`](crate::RedisNode::set_clock) waits after
/// replacing the control file: twice the shim's re-read period (1 ms), so
/// every wall-clock read the server makes after the call sees the new file.
pub(crate) const SETTLE: Duration = Duration::from_millis(2);

/// How a node's fake wall clock deviates from the real one; see the
/// [module docs](self) for the exact semantics.
///
/// Build one from [`ClockSkew::NORMAL`]:
///
/// ```
/// use quorumlock_testbed::ClockSkew;
///
/// let fast = ClockSkew { rate: 1.5, ..ClockSkew::NORMAL };
/// let stepped = ClockSkew { offset_ms: -300, ..ClockSkew::NORMAL };
/// assert_eq!(fast.offset_ms, 0);
/// assert_eq!(stepped.rate, 1.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockSkew {
    /// How fast the node's wall clock runs relative to real time: `1.0` is
    /// normal, `2.0` twice as fast, `0.5` half as fast. Must be finite and
    /// in `(0, MAX_RATE]`. Changing it keeps the clock continuous.
    pub rate: f64,
    /// A step added to the node's wall clock, in milliseconds (negative:
    /// back in time). Changing it steps the clock by the difference. At most
    /// [`ClockSkew::MAX_OFFSET_MS`] either way.
    pub offset_ms: i64,
}

impl ClockSkew {
    /// The real clock: rate 1, offset 0.
    pub const NORMAL: Self = Self {
        rate: 1.0,
        offset_ms: 0,
    };

    /// The largest accepted [`rate`](Self::rate).
    pub const MAX_RATE: f64 = 1000.0;

    /// The largest accepted [`offset_ms`](Self::offset_ms) magnitude (about
    /// 31.7 years).
    pub const MAX_OFFSET_MS: i64 = 1_000_000_000_000;

    /// Checks that the shim can run this skew.
    ///
    /// # Errors
    ///
    /// [`TestbedError::InvalidClockSkew`] naming the bad value if the rate
    /// is not finite, not positive or above [`ClockSkew::MAX_RATE`], or if
    /// the offset is beyond [`ClockSkew::MAX_OFFSET_MS`].
    pub fn validate(&self) -> Result<(), TestbedError> {
        let reason = if !self.rate.is_finite() {
            format!("rate {} is not a finite number", self.rate)
        } else if self.rate <= 0.0 {
            format!("rate {} is not greater than 0", self.rate)
        } else if self.rate > Self::MAX_RATE {
            format!("rate {} is above the maximum {}", self.rate, Self::MAX_RATE)
        } else if self.offset_ms.unsigned_abs() > Self::MAX_OFFSET_MS.unsigned_abs() {
            format!(
                "offset_ms {} is beyond ±{}",
                self.offset_ms,
                Self::MAX_OFFSET_MS
            )
        } else {
            return Ok(());
        };
        Err(TestbedError::InvalidClockSkew {
            skew: *self,
            reason,
        })
    }

    /// The control file line for this skew. `{:?}` prints a float in a form
    /// the shim parses (`1.0`, `1.5`, `1e-7`) and that round-trips exactly.
    fn control_line(&self) -> String {
        format!("{:?} {}\n", self.rate, self.offset_ms)
    }
}

impl Default for ClockSkew {
    fn default() -> Self {
        Self::NORMAL
    }
}

impl fmt::Display for ClockSkew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate {} offset {:+} ms", self.rate, self.offset_ms)
    }
}

/// Writes the shim into `dir` unless an identical copy is already there, and
/// returns its path. The file is replaced atomically, so a server that still
/// maps an old copy is not disturbed.
pub(crate) fn install_shim(dir: &Path) -> Result<PathBuf, TestbedError> {
    let path = dir.join(SHIM_FILE);
    if fs::read(&path).is_ok_and(|existing| existing == SHIM) {
        return Ok(path);
    }
    write_atomically(&path, SHIM)?;
    Ok(path)
}

/// Atomically replaces the control file at `path` with `skew`.
pub(crate) fn write_control(path: &Path, skew: ClockSkew) -> Result<(), TestbedError> {
    skew.validate()?;
    write_atomically(path, skew.control_line().as_bytes())
}

/// Writes `contents` to a fresh temporary file next to `path`, then renames
/// it over `path`, so readers see either the old or the new file, whole.
fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), TestbedError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let context = || format!("writing {}", path.display());
    let mut file = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(TestbedError::io(context()))?;
    file.write_all(contents)
        .map_err(TestbedError::io(context()))?;
    file.persist(path)
        .map_err(|err| TestbedError::io(context())(err.error))?;
    Ok(())
}

/// The `LD_PRELOAD` value for `shim`, in front of the inherited one.
///
/// `LD_PRELOAD` separates entries by spaces and colons, so a path containing
/// either cannot be preloaded.
pub(crate) fn ld_preload(shim: &Path, inherited: Option<&str>) -> Result<String, TestbedError> {
    let Some(text) = shim.to_str().filter(|text| !text.contains([' ', ':'])) else {
        return Err(TestbedError::Io {
            context: format!("preloading the fake clock shim {}", shim.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "LD_PRELOAD cannot name a path that is not UTF-8 or contains ' ' or ':'",
            ),
        });
    };
    Ok(
        match inherited.map(str::trim).filter(|rest| !rest.is_empty()) {
            Some(rest) => format!("{text}:{rest}"),
            None => text.to_owned(),
        },
    )
}

/// Microseconds since the Unix epoch (negative before it).
pub(crate) fn unix_micros(time: SystemTime) -> i128 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_micros()).unwrap_or(i128::MAX),
        Err(before) => -i128::try_from(before.duration().as_micros()).unwrap_or(i128::MAX),
    }
}

/// The skew in milliseconds, rounded to the nearest, between a server time
/// of `server_us` and a local reading taken halfway through the request.
pub(crate) fn skew_ms(server_us: i128, local_before_us: i128, local_after_us: i128) -> i64 {
    let local_us = local_before_us + (local_after_us - local_before_us) / 2;
    let diff_us = server_us - local_us;
    let rounded = if diff_us >= 0 {
        (diff_us + 500) / 1000
    } else {
        (diff_us - 500) / 1000
    };
    i64::try_from(rounded).unwrap_or(if rounded > 0 { i64::MAX } else { i64::MIN })
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::Instant;

    use super::*;

    fn rejected(skew: ClockSkew) -> String {
        match skew.validate() {
            Err(err @ TestbedError::InvalidClockSkew { skew: bad, .. }) => {
                assert_eq!(bad.offset_ms, skew.offset_ms);
                err.to_string()
            }
            other => panic!("{skew:?} accepted: {other:?}"),
        }
    }

    #[test]
    fn validation_names_the_bad_value() {
        for rate in [0.0, -0.0, -1.5] {
            let msg = rejected(ClockSkew {
                rate,
                ..ClockSkew::NORMAL
            });
            assert!(msg.contains("not greater than 0"), "{msg}");
        }
        let msg = rejected(ClockSkew {
            rate: f64::NAN,
            ..ClockSkew::NORMAL
        });
        assert!(msg.contains("rate NaN"), "{msg}");
        let msg = rejected(ClockSkew {
            rate: f64::INFINITY,
            ..ClockSkew::NORMAL
        });
        assert!(msg.contains("rate inf"), "{msg}");
        let msg = rejected(ClockSkew {
            rate: 1000.5,
            ..ClockSkew::NORMAL
        });
        assert!(msg.contains("rate 1000.5"), "{msg}");
        let msg = rejected(ClockSkew {
            offset_ms: i64::MIN,
            ..ClockSkew::NORMAL
        });
        assert!(msg.contains(&i64::MIN.to_string()), "{msg}");
        for ok in [
            ClockSkew::NORMAL,
            ClockSkew {
                rate: 1e-9,
                offset_ms: ClockSkew::MAX_OFFSET_MS,
            },
            ClockSkew {
                rate: ClockSkew::MAX_RATE,
                offset_ms: -ClockSkew::MAX_OFFSET_MS,
            },
        ] {
            ok.validate().expect("valid skew");
        }
    }

    #[test]
    fn control_line_format() {
        assert_eq!(ClockSkew::NORMAL.control_line(), "1.0 0\n");
        let line = ClockSkew {
            rate: 1.5,
            offset_ms: -300,
        }
        .control_line();
        assert_eq!(line, "1.5 -300\n");
        let line = ClockSkew {
            rate: 1e-7,
            offset_ms: 2500,
        }
        .control_line();
        assert_eq!(line, "1e-7 2500\n");
    }

    #[test]
    fn skew_rounds_to_nearest_ms_around_the_midpoint() {
        assert_eq!(skew_ms(10_000_000, 10_000_000, 10_000_000), 0);
        assert_eq!(skew_ms(12_500_000, 10_000_000, 10_000_000), 2500);
        assert_eq!(skew_ms(10_000_000, 9_999_000, 10_001_000), 0);
        assert_eq!(skew_ms(9_699_600, 10_000_000, 10_000_000), -300);
        assert_eq!(skew_ms(9_699_400, 10_000_000, 10_000_000), -301);
        assert_eq!(skew_ms(10_000_499, 10_000_000, 10_000_000), 0);
    }

    #[test]
    fn ld_preload_prepends_and_rejects_separators() {
        let shim = Path::new("/tmp/x/libshim.so");
        assert_eq!(ld_preload(shim, None).unwrap(), "/tmp/x/libshim.so");
        assert_eq!(ld_preload(shim, Some("  ")).unwrap(), "/tmp/x/libshim.so");
        assert_eq!(
            ld_preload(shim, Some("/lib/other.so")).unwrap(),
            "/tmp/x/libshim.so:/lib/other.so"
        );
        assert!(ld_preload(Path::new("/tmp/a b/libshim.so"), None).is_err());
        assert!(ld_preload(Path::new("/tmp/a:b/libshim.so"), None).is_err());
    }

    #[test]
    fn control_file_is_replaced_whole() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(CONTROL_FILE);
        write_control(&path, ClockSkew::NORMAL)?;
        assert_eq!(fs::read_to_string(&path)?, "1.0 0\n");
        let fast = ClockSkew {
            rate: 4.0,
            offset_ms: 2500,
        };
        write_control(&path, fast)?;
        assert_eq!(fs::read_to_string(&path)?, "4.0 2500\n");
        let bad = ClockSkew {
            rate: 0.0,
            ..ClockSkew::NORMAL
        };
        assert!(write_control(&path, bad).is_err());
        assert_eq!(fs::read_to_string(&path)?, "4.0 2500\n");
        let names: Vec<_> = fs::read_dir(dir.path())?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<Result<_, _>>()?;
        assert_eq!(names, [CONTROL_FILE], "temporary files left behind");
        Ok(())
    }

    #[test]
    fn shim_is_a_shared_object_installed_once() -> Result<(), Box<dyn std::error::Error>> {
        assert_eq!(&SHIM[..4], b"\x7fELF");
        let dir = tempfile::tempdir()?;
        let path = install_shim(dir.path())?;
        assert_eq!(fs::read(&path)?, SHIM);
        let modified = fs::metadata(&path)?.modified()?;
        assert_eq!(install_shim(dir.path())?, path);
        assert_eq!(fs::metadata(&path)?.modified()?, modified, "rewritten");
        Ok(())
    }

    /// Runs `program args` under the shim with `control` as the control
    /// file's contents (`None`: no file) and returns its stdout.
    fn run_under_shim(control: Option<&str>, program: &str, args: &[&str]) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let shim = install_shim(dir.path()).expect("shim");
        let control_path = dir.path().join(CONTROL_FILE);
        if let Some(text) = control {
            fs::write(&control_path, text).expect("control file");
        }
        let output = Command::new(program)
            .args(args)
            .env("LD_PRELOAD", &shim)
            .env("LC_ALL", "C")
            .env(CONTROL_ENV, &control_path)
            .output()
            .expect("spawn");
        assert!(output.status.success(), "{program} failed: {output:?}");
        assert!(output.stderr.is_empty(), "{output:?}");
        String::from_utf8(output.stdout).expect("utf-8")
    }

    fn now_ms() -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("epoch");
        i64::try_from(now.as_millis()).expect("ms")
    }

    /// `date +%s%3N` (clock_gettime(CLOCK_REALTIME)) under the shim minus
    /// the real time, in ms.
    fn date_skew_ms(control: Option<&str>) -> i64 {
        let before = now_ms();
        let out = run_under_shim(control, "date", &["+%s%3N"]);
        let after = now_ms();
        let fake: i64 = out.trim().parse().expect("date output");
        fake - (before + (after - before) / 2)
    }

    #[test]
    fn shim_steps_the_clock_of_a_plain_program() {
        let day = 86_400_000;
        for (control, expected) in [
            (Some("1.0 86400000\n"), day),
            (Some("  1e0\t-3600000  \r\n"), -3_600_000),
            (Some("1.5 2500"), 2500),
            (None, 0),
            (Some(""), 0),
            (Some("fast 1000\n"), 0),
            (Some("1.0 1000 extra\n"), 0),
            (Some("0 1000\n"), 0),
            (Some("-1 1000\n"), 0),
            (Some("1001 1000\n"), 0),
            (Some("1.0 99999999999999999999\n"), 0),
        ] {
            let skew = date_skew_ms(control);
            assert!(
                (skew - expected).abs() < 1000,
                "control {control:?}: skew {skew} ms, expected ~{expected}"
            );
        }
    }

    /// bash's `$EPOCHREALTIME` reads `gettimeofday`; `sleep` is another
    /// process and sleeps in real time.
    #[test]
    fn shim_runs_the_clock_fast() {
        let script = "echo $EPOCHREALTIME; sleep 0.2; echo $EPOCHREALTIME";
        let started = Instant::now();
        let out = run_under_shim(Some("10 0\n"), "bash", &["-c", script]);
        let real = started.elapsed().as_secs_f64();
        let times: Vec<f64> = out
            .lines()
            .map(|line| line.trim().parse().expect("EPOCHREALTIME"))
            .collect();
        let fake = times[1] - times[0];
        assert!(
            (2.0..=10.0 * real).contains(&fake),
            "fake {fake} s over a real 0.2..{real} s at rate 10"
        );
    }
}
