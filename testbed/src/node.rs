//! One local `redis-server` process and the fault injection on it.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};
use rustix::process::{Pid, Signal, kill_process};

use crate::fakeclock::{self, CONTROL_ENV, CONTROL_FILE, SHIM_FILE};
use crate::{ClockSkew, NodeOptions, Persistence, Restart, TestbedError};

/// Address every node binds to.
const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How many fresh ports are tried before giving up on the first start.
const MAX_PORT_ATTEMPTS: usize = 10;
/// How many times a restart on the node's fixed port is tried when the port
/// turns out to be busy.
const MAX_SAME_PORT_ATTEMPTS: usize = 5;
/// Pause between two start attempts on the same (busy) port.
const SAME_PORT_RETRY_DELAY: Duration = Duration::from_millis(200);
/// Upper bound on how long one start attempt waits for `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound on the number of readiness probes per start attempt.
const MAX_READY_PROBES: usize = 2_000;
/// Sleep between two readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(5);
/// Connect timeout of one readiness probe.
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
/// Read/write timeout of one readiness probe.
const PROBE_IO_TIMEOUT: Duration = Duration::from_millis(250);
/// Connect, read and write timeout of [`RedisNode::connection`].
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// Number of log lines put into [`TestbedError::StartFailed`].
const START_FAILED_LOG_LINES: usize = 30;
/// Bounded wait for the kernel to report a signalled process as
/// stopped/continued.
const MAX_STATE_POLLS: usize = 200;
/// Sleep between two state polls.
const STATE_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// File names inside the node directory.
const CONFIG_FILE: &str = "redis.conf";
const LOG_FILE: &str = "redis.log";
const STDERR_FILE: &str = "redis.stderr.log";
const PID_FILE: &str = "redis.pid";

/// A local `redis-server` process bound to `127.0.0.1`, with its own data
/// directory, config file and log.
///
/// Created by [`Testbed`](crate::Testbed). The process is killed (`SIGKILL`)
/// and reaped when the node is dropped, also while a test panics.
///
/// After the first successful start the node keeps its port, so
/// [`start`](Self::start) and [`restart`](Self::restart) bring the server back
/// at the same URL.
#[derive(Debug)]
pub struct RedisNode {
    port: u16,
    /// Set after the first successful start; from then on the port never changes.
    port_fixed: bool,
    dir: PathBuf,
    binary: PathBuf,
    options: NodeOptions,
    /// The running server, if any. Behind a mutex so that `&self` queries
    /// can reap a process that exited on its own.
    child: Mutex<Option<Child>>,
    paused: bool,
}

/// Outcome of a failed start attempt.
enum AttemptError {
    /// The port was taken by someone else; another port (or a later retry)
    /// may work.
    PortInUse(TestbedError),
    /// Anything else; retrying will not help.
    Fatal(TestbedError),
}

/// Why a freshly spawned server did not become ready.
struct NotReady {
    reason: String,
    /// A different server answered on our port.
    foreign_server: bool,
}

impl RedisNode {
    /// Creates a stopped node that will live in `dir` (created if missing).
    pub(crate) fn new(
        dir: PathBuf,
        binary: PathBuf,
        options: NodeOptions,
    ) -> Result<Self, TestbedError> {
        fs::create_dir_all(&dir).map_err(TestbedError::io(format!(
            "creating node directory {}",
            dir.display()
        )))?;
        Ok(Self {
            port: 0,
            port_fixed: false,
            dir,
            binary,
            options,
            child: Mutex::new(None),
            paused: false,
        })
    }

    /// The TCP port on `127.0.0.1` the server listens on (`0` before the
    /// first start).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address, `127.0.0.1:PORT` (port `0` before the first
    /// start), e.g. for a [`Proxy`](crate::Proxy) upstream.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((HOST, self.port))
    }

    /// The server URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{HOST}:{}", self.port)
    }

    /// The pid of the server process, or `None` when it is not running
    /// (never started, killed, or exited on its own).
    pub fn pid(&self) -> Option<u32> {
        let mut slot = self.lock_child();
        reap_if_exited(&mut slot);
        slot.as_ref().map(Child::id)
    }

    /// Whether the server process is alive (a paused server counts as
    /// running). A process that exited on its own is noticed and reaped here.
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Whether the server is running and currently stopped by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused && self.is_running()
    }

    /// The node's directory: config file, log, pid file and data files live here.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the generated `redis.conf`.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }

    /// The path of the server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// The path of the fake clock's control file (`clock.ctl` in the node
    /// directory), which [`set_clock`](Self::set_clock) writes. Only read by
    /// servers started with [`NodeOptions::fake_clock`].
    pub fn clock_control_path(&self) -> PathBuf {
        self.dir.join(CONTROL_FILE)
    }

    /// Sets the node's fake wall clock (see [`crate::fakeclock`]): replaces
    /// the control file atomically, then waits 2 ms, so every wall-clock
    /// read the server makes after this returns uses the new setting.
    ///
    /// Works on a stopped node too; the setting then applies from its next
    /// start. The file stays in the node directory across restarts, but each
    /// start begins with zero accumulated drift.
    ///
    /// # Errors
    ///
    /// - [`TestbedError::FakeClockDisabled`] if the node was not configured
    ///   with [`NodeOptions::fake_clock`].
    /// - [`TestbedError::InvalidClockSkew`] if `clock` is rejected by
    ///   [`ClockSkew::validate`] (e.g. a rate that is not finite or ≤ 0).
    /// - [`TestbedError::Io`] if the control file cannot be written.
    pub fn set_clock(&self, clock: ClockSkew) -> Result<(), TestbedError> {
        if !self.options.fake_clock {
            return Err(TestbedError::FakeClockDisabled { port: self.port });
        }
        fakeclock::write_control(&self.clock_control_path(), clock)?;
        thread::sleep(fakeclock::SETTLE);
        Ok(())
    }

    /// The node's wall clock minus the local one, in milliseconds (rounded):
    /// the server's `TIME` reply compared with the local real time halfway
    /// through the request. About `0` for a node with a real clock; the
    /// measurement error is half the round trip (well below 1 ms locally).
    ///
    /// Works on any running node, with or without the fake clock.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotRunning`] if the server is not running,
    /// [`TestbedError::Redis`] if `TIME` fails (e.g. the server is paused:
    /// the connection's 2 s read timeout).
    pub fn wall_clock_skew(&self) -> Result<i64, TestbedError> {
        if !self.is_running() {
            return Err(TestbedError::NotRunning { port: self.port });
        }
        let mut con = self.connection()?;
        let before = fakeclock::unix_micros(SystemTime::now());
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con)?;
        let after = fakeclock::unix_micros(SystemTime::now());
        let server = i128::from(secs) * 1_000_000 + i128::from(micros);
        Ok(fakeclock::skew_ms(server, before, after))
    }

    /// Kills the server with `SIGKILL` (by pid) and reaps it, so the pid is
    /// gone when this returns. Works on a paused server too, and clears the
    /// paused state. Does nothing if the server is not running.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if signalling or reaping the process fails; the
    /// node then still owns the process and will retry on drop.
    pub fn kill(&mut self) -> Result<(), TestbedError> {
        let port = self.port;
        let slot = self.child_slot();
        if let Some(child) = slot.as_mut() {
            kill_and_reap(child).map_err(TestbedError::io(format!(
                "killing redis-server on port {port}"
            )))?;
        }
        *slot = None;
        self.paused = false;
        Ok(())
    }

    /// Starts the server and waits (at most about 10 s) until it answers
    /// `PING`; with [`Persistence::AofAlways`] that includes loading the AOF.
    ///
    /// The first start picks a free port (retrying with other ports if one
    /// is grabbed by another process meanwhile); later starts reuse the same
    /// port, directory and configuration.
    ///
    /// # Errors
    ///
    /// - [`TestbedError::AlreadyRunning`] if the server is running.
    /// - [`TestbedError::StartFailed`] (with the log tail) if the process
    ///   exits or does not answer in time.
    /// - [`TestbedError::Io`] if the config file cannot be written or the
    ///   process cannot be spawned.
    pub fn start(&mut self) -> Result<(), TestbedError> {
        if let Some(pid) = self.pid() {
            return Err(TestbedError::AlreadyRunning {
                port: self.port,
                pid,
            });
        }
        self.paused = false;
        if self.port_fixed {
            return self.start_on_fixed_port();
        }
        self.start_on_fresh_port()?;
        if !self.options.skip_adoption {
            self.adopt()?;
        }
        Ok(())
    }

    /// Adopts the node for quorumlock (see [`NodeOptions::skip_adoption`]);
    /// a replica (read-only) is left as it is.
    fn adopt(&self) -> Result<(), TestbedError> {
        let url = self.url();
        let port = self.port;
        // Its own thread and runtime: the caller may be inside a runtime.
        let outcome = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async move {
                // Generous timeouts: set-up is no test of speed, and a
                // loaded machine stretched the defaults (a 50 ms node
                // timeout) past a fresh server's first replies.
                let config = quorumlock::LockConfig::builder()
                    .node(url)
                    .connect_timeout(Duration::from_secs(10))
                    .node_timeout(Duration::from_secs(3))
                    .build()
                    .map_err(|e| e.to_string())?;
                let lock = quorumlock::MultiLock::new(config);
                match lock.adopt_empty_nodes().await.pop() {
                    Some(Ok(())) => Ok(()),
                    Some(Err(e)) if e.kind() == quorumlock::NodeErrorKind::ReadOnly => Ok(()),
                    Some(Err(e)) => Err(e.to_string()),
                    None => Err("no node".to_string()),
                }
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the adoption thread panicked".to_string()));
        outcome.map_err(|reason| TestbedError::StartFailed {
            port,
            reason: format!("adopting the fresh node for quorumlock: {reason}"),
            log_tail: self.log_tail(20),
        })
    }

    /// Kills the server (if running), deletes its data files if
    /// `how.wipe_data`, sleeps for `how.delay` (blocking the thread) and
    /// starts it again on the same port.
    ///
    /// In async tests prefer [`kill`](Self::kill), an async sleep and
    /// [`start`](Self::start) for long delays, since this blocks the thread.
    ///
    /// # Errors
    ///
    /// Those of [`kill`](Self::kill), [`wipe_data`](Self::wipe_data) and
    /// [`start`](Self::start).
    pub fn restart(&mut self, how: Restart) -> Result<(), TestbedError> {
        self.kill()?;
        if how.wipe_data {
            self.wipe_data()?;
        }
        if !how.delay.is_zero() {
            thread::sleep(how.delay);
        }
        self.start()
    }

    /// Deletes the node's data files: the RDB dump (`dump.rdb`), the AOF
    /// directory (`appendonlydir`) and a legacy top-level AOF file
    /// (`appendonly.aof`), honouring `dbfilename`, `appenddirname` and
    /// `appendfilename` overrides from [`NodeOptions::extra_config`].
    ///
    /// # Errors
    ///
    /// [`TestbedError::AlreadyRunning`] if the server is running (stop it
    /// with [`kill`](Self::kill) first), [`TestbedError::Io`] if a file
    /// cannot be removed.
    pub fn wipe_data(&mut self) -> Result<(), TestbedError> {
        if let Some(pid) = self.pid() {
            return Err(TestbedError::AlreadyRunning {
                port: self.port,
                pid,
            });
        }
        let names = [
            self.config_override("dbfilename")
                .unwrap_or_else(|| "dump.rdb".to_owned()),
            self.config_override("appenddirname")
                .unwrap_or_else(|| "appendonlydir".to_owned()),
            self.config_override("appendfilename")
                .unwrap_or_else(|| "appendonly.aof".to_owned()),
        ];
        for name in names {
            remove_path(&self.dir.join(name))?;
        }
        // Leftovers of interrupted background saves / rewrites.
        let entries = fs::read_dir(&self.dir).map_err(TestbedError::io(format!(
            "listing node directory {}",
            self.dir.display()
        )))?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("temp-") {
                remove_path(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Stops the server with `SIGSTOP`: it keeps its sockets, but answers
    /// nothing until [`resume`](Self::resume), like a hung or partitioned
    /// server. Waits briefly until the kernel reports the process stopped.
    /// Pausing a paused server does nothing.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotRunning`] if the server is not running,
    /// [`TestbedError::Io`] if the signal cannot be sent.
    pub fn pause(&mut self) -> Result<(), TestbedError> {
        let pid = self.signal(Signal::STOP, "pausing")?;
        wait_for_proc_state(pid, true);
        self.paused = true;
        Ok(())
    }

    /// Continues a paused server with `SIGCONT`. Resuming a server that is
    /// not paused does nothing harmful.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotRunning`] if the server is not running,
    /// [`TestbedError::Io`] if the signal cannot be sent.
    pub fn resume(&mut self) -> Result<(), TestbedError> {
        let pid = self.signal(Signal::CONT, "resuming")?;
        wait_for_proc_state(pid, false);
        self.paused = false;
        Ok(())
    }

    /// Opens a synchronous connection for inspecting the server in tests,
    /// with a 2 s connect, read and write timeout.
    ///
    /// The connection skips redis-rs' `CLIENT SETINFO` handshake, so
    /// connecting to a paused server succeeds (the kernel accepts the TCP
    /// connection) and the first command then times out.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`] if the connection cannot be established.
    pub fn connection(&self) -> Result<redis::Connection, TestbedError> {
        let con = connect(self.port, CONNECTION_TIMEOUT, CONNECTION_TIMEOUT)?;
        Ok(con)
    }

    /// The last `lines` lines of the server's log file, followed by the last
    /// lines of its captured stdout/stderr if there are any (config errors
    /// are only reported there). Never fails: problems reading the files are
    /// described in the returned text.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = tail_of_file(&self.dir.join(LOG_FILE), lines);
        let stderr = tail_of_file_if_nonempty(&self.dir.join(STDERR_FILE), lines);
        if let Some(stderr) = stderr {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("--- stdout/stderr ---\n");
            out.push_str(&stderr);
        }
        out
    }

    /// Replaces the options used by the next start (e.g. a replica's
    /// `replicaof` line after a failover).
    pub(crate) fn set_options(&mut self, options: NodeOptions) {
        self.options = options;
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn child_slot(&mut self) -> &mut Option<Child> {
        self.child.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `signal` to the running server, returning its pid.
    fn signal(&mut self, signal: Signal, what: &str) -> Result<Pid, TestbedError> {
        let port = self.port;
        let slot = self.child_slot();
        reap_if_exited(slot);
        let Some(child) = slot.as_ref() else {
            self.paused = false;
            return Err(TestbedError::NotRunning { port });
        };
        let pid = Pid::from_child(child);
        kill_process(pid, signal).map_err(|errno| TestbedError::Io {
            context: format!("{what} redis-server on port {port}"),
            source: errno.into(),
        })?;
        Ok(pid)
    }

    /// The value of the last `directive` line in the extra config, unquoted,
    /// if it is a plain file name.
    fn config_override(&self, directive: &str) -> Option<String> {
        self.options
            .extra_config
            .iter()
            .rev()
            .find(|(key, _)| key.eq_ignore_ascii_case(directive))
            .map(|(_, value)| value.trim().trim_matches('"').to_owned())
            .filter(|name| !name.is_empty() && !name.contains('/') && name != "." && name != "..")
    }

    fn start_on_fresh_port(&mut self) -> Result<(), TestbedError> {
        let mut last_error = None;
        for _ in 0..MAX_PORT_ATTEMPTS {
            self.port = free_port()?;
            match self.try_start_once() {
                Ok(()) => {
                    self.port_fixed = true;
                    return Ok(());
                }
                Err(AttemptError::PortInUse(err)) => last_error = Some(err),
                Err(AttemptError::Fatal(err)) => return Err(err),
            }
        }
        Err(self.retries_exhausted(last_error, MAX_PORT_ATTEMPTS))
    }

    fn start_on_fixed_port(&mut self) -> Result<(), TestbedError> {
        let mut last_error = None;
        for attempt in 0..MAX_SAME_PORT_ATTEMPTS {
            if attempt > 0 {
                thread::sleep(SAME_PORT_RETRY_DELAY);
            }
            match self.try_start_once() {
                Ok(()) => return Ok(()),
                Err(AttemptError::PortInUse(err)) => last_error = Some(err),
                Err(AttemptError::Fatal(err)) => return Err(err),
            }
        }
        Err(self.retries_exhausted(last_error, MAX_SAME_PORT_ATTEMPTS))
    }

    fn retries_exhausted(&self, last_error: Option<TestbedError>, attempts: usize) -> TestbedError {
        match last_error {
            Some(TestbedError::StartFailed {
                port,
                reason,
                log_tail,
            }) => TestbedError::StartFailed {
                port,
                reason: format!("port busy on all {attempts} attempts; last: {reason}"),
                log_tail,
            },
            Some(other) => other,
            None => TestbedError::StartFailed {
                port: self.port,
                reason: "no start attempt was made".to_owned(),
                log_tail: String::new(),
            },
        }
    }

    /// One attempt to start the server on `self.port`.
    fn try_start_once(&mut self) -> Result<(), AttemptError> {
        let port = self.port;
        self.write_config().map_err(AttemptError::Fatal)?;
        let log_offset = file_len(&self.dir.join(LOG_FILE));
        let stderr_offset = file_len(&self.dir.join(STDERR_FILE));
        let mut child = self.spawn().map_err(AttemptError::Fatal)?;
        let ready = wait_ready(&mut child, port).and_then(|()| self.check_shim_loaded(&child));
        match ready {
            Ok(()) => {
                *self.child_slot() = Some(child);
                Ok(())
            }
            Err(not_ready) => {
                // Best effort: the error we report is the start failure.
                let _ = kill_and_reap(&mut child);
                let new_output = format!(
                    "{}{}",
                    read_from(&self.dir.join(LOG_FILE), log_offset),
                    read_from(&self.dir.join(STDERR_FILE), stderr_offset)
                );
                let port_in_use =
                    not_ready.foreign_server || new_output.contains("Address already in use");
                let err = TestbedError::StartFailed {
                    port,
                    reason: not_ready.reason,
                    log_tail: self.log_tail(START_FAILED_LOG_LINES),
                };
                Err(if port_in_use {
                    AttemptError::PortInUse(err)
                } else {
                    AttemptError::Fatal(err)
                })
            }
        }
    }

    fn spawn(&self) -> Result<Child, TestbedError> {
        let stderr_path = self.dir.join(STDERR_FILE);
        let context = || format!("opening {}", stderr_path.display());
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .map_err(TestbedError::io(context()))?;
        let stdout = stderr.try_clone().map_err(TestbedError::io(context()))?;
        let mut command = Command::new(&self.binary);
        command
            .arg(self.config_path())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        if self.options.fake_clock {
            self.preload_fake_clock(&mut command)?;
        }
        command.spawn().map_err(TestbedError::io(format!(
            "spawning {} for port {}",
            self.binary.display(),
            self.port
        )))
    }

    /// Installs the fake clock shim in the node directory (if it is not
    /// there yet) and sets `LD_PRELOAD` and `QUORUMLOCK_FAKECLOCK` for the
    /// server.
    fn preload_fake_clock(&self, command: &mut Command) -> Result<(), TestbedError> {
        let dir = std::path::absolute(&self.dir).map_err(TestbedError::io(format!(
            "resolving node directory {}",
            self.dir.display()
        )))?;
        let shim = fakeclock::install_shim(&dir)?;
        let inherited = std::env::var("LD_PRELOAD").ok();
        command
            .env(
                "LD_PRELOAD",
                fakeclock::ld_preload(&shim, inherited.as_deref())?,
            )
            .env(CONTROL_ENV, dir.join(CONTROL_FILE));
        Ok(())
    }

    /// With the fake clock, checks that the dynamic loader really mapped the
    /// shim into `child` (it only warns on stderr when it cannot). Without
    /// `/proc` the check is skipped.
    fn check_shim_loaded(&self, child: &Child) -> Result<(), NotReady> {
        if !self.options.fake_clock {
            return Ok(());
        }
        let Ok(maps) = fs::read_to_string(format!("/proc/{}/maps", child.id())) else {
            return Ok(());
        };
        if maps.lines().any(|line| line.ends_with(SHIM_FILE)) {
            Ok(())
        } else {
            Err(NotReady {
                reason: format!("the fake clock shim {SHIM_FILE} was not preloaded"),
                foreign_server: false,
            })
        }
    }

    fn write_config(&self) -> Result<(), TestbedError> {
        let path = self.config_path();
        let text = self.config_text()?;
        fs::write(&path, text).map_err(TestbedError::io(format!("writing {}", path.display())))
    }

    fn config_text(&self) -> Result<String, TestbedError> {
        let dir = quoted_path(&self.dir)?;
        let log = quoted_path(&self.dir.join(LOG_FILE))?;
        let pid = quoted_path(&self.dir.join(PID_FILE))?;
        let mut text = String::from("# Generated by quorumlock-testbed.\n");
        // Writing into a String cannot fail.
        let _ = writeln!(text, "bind {HOST}");
        let _ = writeln!(text, "port {}", self.port);
        let _ = writeln!(text, "dir {dir}");
        let _ = writeln!(text, "logfile {log}");
        let _ = writeln!(text, "pidfile {pid}");
        text.push_str("daemonize no\n");
        text.push_str("protected-mode no\n");
        text.push_str("databases 16\n");
        text.push_str("save \"\"\n");
        match self.options.persistence {
            Persistence::None => text.push_str("appendonly no\n"),
            Persistence::AofAlways => text.push_str("appendonly yes\nappendfsync always\n"),
        }
        for (directive, value) in &self.options.extra_config {
            let _ = writeln!(text, "{directive} {value}");
        }
        Ok(text)
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child_slot().take() {
            // Nothing sensible to do about a failure in drop.
            let _ = kill_and_reap(&mut child);
        }
    }
}

/// Reaps the child if it has exited, clearing the slot.
fn reap_if_exited(slot: &mut Option<Child>) {
    if let Some(child) = slot.as_mut() {
        // An error here means the child was already reaped; treat as gone.
        if !matches!(child.try_wait(), Ok(None)) {
            *slot = None;
        }
    }
}

/// `SIGKILL`s the child by pid (unless it already exited) and waits for it.
fn kill_and_reap(child: &mut Child) -> io::Result<()> {
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    match kill_process(Pid::from_child(child), Signal::KILL) {
        // ESRCH cannot really happen for an unreaped child, but is harmless.
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(errno) => return Err(errno.into()),
    }
    child.wait().map(drop)
}

/// Asks the kernel for a currently free port on 127.0.0.1. The listener is
/// dropped before returning, so another process may grab the port; callers
/// retry in that case.
fn free_port() -> Result<u16, TestbedError> {
    let listener = TcpListener::bind((HOST, 0))
        .map_err(TestbedError::io("binding a probe socket on 127.0.0.1:0"))?;
    let addr = listener
        .local_addr()
        .map_err(TestbedError::io("reading the probe socket address"))?;
    Ok(addr.port())
}

/// Connects to the node on `port` without redis-rs' `CLIENT SETINFO`
/// handshake.
fn connect(
    port: u16,
    connect_timeout: Duration,
    io_timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    let info: ConnectionInfo = ConnectionAddr::Tcp(HOST.to_string(), port)
        .into_connection_info()?
        .set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
    let client = redis::Client::open(info)?;
    let con = client.get_connection_with_timeout(connect_timeout)?;
    con.set_read_timeout(Some(io_timeout))?;
    con.set_write_timeout(Some(io_timeout))?;
    Ok(con)
}

/// Probes the server once: `PING` must answer `PONG` (not `LOADING`) and
/// `INFO server` reports the pid of whoever answers.
fn probe(port: u16) -> redis::RedisResult<Option<u32>> {
    let mut con = connect(port, PROBE_CONNECT_TIMEOUT, PROBE_IO_TIMEOUT)?;
    let _pong: String = redis::cmd("PING").query(&mut con)?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con)?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok()))
}

/// Waits until the freshly spawned `child` answers on `port`, bounded in time
/// and number of probes.
fn wait_ready(child: &mut Child, port: u16) -> Result<(), NotReady> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last_probe_error = String::from("no probe made");
    for _ in 0..MAX_READY_PROBES {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(NotReady {
                    reason: format!("redis-server exited during start-up ({status})"),
                    foreign_server: false,
                });
            }
            Ok(None) => {}
            Err(err) => {
                return Err(NotReady {
                    reason: format!("could not check the redis-server process: {err}"),
                    foreign_server: false,
                });
            }
        }
        match probe(port) {
            Ok(Some(pid)) if pid == child.id() => return Ok(()),
            Ok(Some(pid)) => {
                return Err(NotReady {
                    reason: format!("port {port} is answered by another redis-server (pid {pid})"),
                    foreign_server: true,
                });
            }
            Ok(None) => last_probe_error = "INFO server did not report process_id".to_owned(),
            Err(err) => last_probe_error = err.to_string(),
        }
        if Instant::now() >= deadline {
            break;
        }
        thread::sleep(PROBE_INTERVAL);
    }
    Err(NotReady {
        reason: format!("no PONG within {READY_TIMEOUT:?} (last probe error: {last_probe_error})"),
        foreign_server: false,
    })
}

/// Polls `/proc/<pid>/stat` until the process is (or is no longer) in the
/// stopped state, bounded. Without `/proc` this returns at once.
fn wait_for_proc_state(pid: Pid, stopped: bool) {
    let stat_path = format!("/proc/{}/stat", pid.as_raw_nonzero());
    for _ in 0..MAX_STATE_POLLS {
        let Ok(stat) = fs::read_to_string(&stat_path) else {
            return;
        };
        // Format: "pid (comm) S ...", where comm may contain spaces and parens.
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].trim_start().chars().next());
        match state {
            Some(state) if (state == 'T' || state == 't') == stopped => return,
            Some(_) => thread::sleep(STATE_POLL_INTERVAL),
            None => return,
        }
    }
}

/// Quotes a path for redis.conf (double quotes, `\` and `"` escaped).
fn quoted_path(path: &Path) -> Result<String, TestbedError> {
    let Some(text) = path.to_str() else {
        return Err(TestbedError::Io {
            context: format!("writing redis.conf for {}", path.display()),
            source: io::Error::new(io::ErrorKind::InvalidInput, "path is not valid UTF-8"),
        });
    };
    Ok(format!(
        "\"{}\"",
        text.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

/// Removes a file or directory tree; a missing path is fine.
fn remove_path(path: &Path) -> Result<(), TestbedError> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(err) => Err(err),
    };
    match result {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(TestbedError::Io {
            context: format!("removing {}", path.display()),
            source: err,
        }),
    }
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|meta| meta.len()).unwrap_or(0)
}

/// The contents of `path` from byte `offset` on (lossy UTF-8); empty on error.
fn read_from(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_end(&mut bytes)
    });
    match read {
        Ok(_) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    }
}

/// The last `lines` lines of `path`, or a description of why it is unreadable.
fn tail_of_file(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => last_lines(&String::from_utf8_lossy(&bytes), lines),
        Err(err) => format!("<cannot read {}: {err}>", path.display()),
    }
}

/// Like [`tail_of_file`], but `None` when the file is missing or empty.
pub(crate) fn tail_of_file_if_nonempty(path: &Path, lines: usize) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    if text.trim().is_empty() {
        None
    } else {
        Some(last_lines(&text, lines))
    }
}

fn last_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut out = all[start..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_takes_the_tail() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 5), "a\nb\nc\n");
        assert_eq!(last_lines("a\nb\nc", 0), "");
        assert_eq!(last_lines("", 3), "");
    }

    fn node_in(dir: &Path) -> Result<RedisNode, TestbedError> {
        RedisNode::new(
            dir.join("node"),
            crate::redis_server_binary()?,
            NodeOptions::default(),
        )
    }

    #[test]
    fn busy_port_is_reported_as_port_in_use() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let listener = TcpListener::bind((HOST, 0))?;
        let mut node = node_in(dir.path())?;
        node.port = listener.local_addr()?.port();
        match node.try_start_once() {
            Err(AttemptError::PortInUse(TestbedError::StartFailed { log_tail, .. })) => {
                assert!(log_tail.contains("Address already in use"), "{log_tail}");
            }
            Err(AttemptError::PortInUse(other) | AttemptError::Fatal(other)) => {
                panic!("expected PortInUse(StartFailed), got {other:?}")
            }
            Ok(()) => panic!("started on a busy port"),
        }
        assert!(!node.is_running());
        Ok(())
    }

    #[test]
    fn port_answered_by_another_redis_is_port_in_use() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut first = node_in(&dir.path().join("a"))?;
        first.start()?;
        let mut second = node_in(&dir.path().join("b"))?;
        second.port = first.port();
        assert!(matches!(
            second.try_start_once(),
            Err(AttemptError::PortInUse(_))
        ));
        assert!(!second.is_running());
        assert!(first.is_running());
        Ok(())
    }

    #[test]
    fn first_start_fixes_the_port() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut node = node_in(dir.path())?;
        node.start()?;
        assert!(node.port_fixed);
        assert_ne!(node.port(), 0);
        Ok(())
    }

    #[test]
    fn restart_on_busy_fixed_port_fails_after_bounded_retries()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut node = node_in(dir.path())?;
        node.start()?;
        node.kill()?;
        let _squatter = TcpListener::bind((HOST, node.port()))?;
        let started = Instant::now();
        match node.start() {
            Err(TestbedError::StartFailed { port, reason, .. }) => {
                assert_eq!(port, node.port());
                assert!(reason.contains("port busy"), "{reason}");
            }
            other => panic!("expected StartFailed, got {other:?}"),
        }
        assert!(started.elapsed() < READY_TIMEOUT);
        assert!(!node.is_running());
        Ok(())
    }

    #[test]
    fn quoting_escapes_backslash_and_quote() -> Result<(), TestbedError> {
        assert_eq!(quoted_path(Path::new("/tmp/a b"))?, "\"/tmp/a b\"");
        assert_eq!(
            quoted_path(Path::new("/tmp/a\"b\\c"))?,
            "\"/tmp/a\\\"b\\\\c\""
        );
        Ok(())
    }
}
