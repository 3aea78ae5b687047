//! A fault-injecting TCP proxy to put in front of one node: delay, loss,
//! partition and reset between a client and a server, without `tc netem`.
//!
//! A [`Proxy`] listens on `127.0.0.1:<free port>` and forwards every
//! accepted connection to its upstream. [`Proxy::set_fault`] changes what
//! the network does, at once, for open and new connections alike, and
//! [`Proxy::set_upstream`] points the proxy at another server (the address
//! switch of a failover). All proxies of a process share one small tokio
//! runtime on background threads, so they are driven from synchronous code.
//!
//! The faults model TCP, never a broken byte stream: bytes are never dropped
//! or reordered within a live connection (a Redis client would desync). A
//! "lost" chunk is delivered late, like a retransmission; a partition holds
//! bytes and delivers them in order when it is lifted.
//!
//! Why not `noxious` (the Rust port of Toxiproxy)? Its last release, 1.0.4,
//! is from April 2021 and pulls in tokio-util 0.6, rand 0.8, `bmrng` and
//! `async-trait`; it is a library for its own HTTP-API server rather than
//! an in-process API. A proxy's upstream is fixed at creation, so a
//! failover's address switch means tearing the proxy down and re-binding.
//! Its `timeout` toxic discards the bytes it swallows, which desyncs a Redis
//! connection once lifted, it has no reset toxic, loss is per connection
//! (`toxicity`) rather than per chunk, and its latency toxic delays chunks
//! one after another, so pipelined chunks add up their delays. Our own few
//! hundred lines on tokio give stream-preserving faults, upstream switching and
//! a plain copy loop when no fault is set.
//!
//! ```
//! use std::time::Duration;
//! use quorumlock_testbed::{NetFault, Proxy, Testbed};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let testbed = Testbed::start(1)?;
//! let proxy = Proxy::start(testbed.node(0).addr())?;
//! let client = redis::Client::open(proxy.url())?;
//! let mut con = client.get_connection()?;
//! let pong: String = redis::cmd("PING").query(&mut con)?;
//! assert_eq!(pong, "PONG");
//!
//! proxy.set_fault(NetFault::Delay {
//!     latency: Duration::from_millis(5),
//!     jitter: Duration::from_millis(2),
//! })?;
//! let pong: String = redis::cmd("PING").query(&mut con)?; // about 10 ms later
//! assert_eq!(pong, "PONG");
//! proxy.set_fault(NetFault::None)?;
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use rand::SeedableRng as _;
use rand::rngs::SmallRng;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::TestbedError;

/// Read buffer of one direction of one connection.
const BUFFER_SIZE: usize = 16 * 1024;
/// Chunks one direction holds back (delayed, stalled or partitioned) before
/// it stops reading, so the sender sees back-pressure like over a full TCP
/// window instead of the proxy buffering without bound.
const MAX_HELD_CHUNKS: usize = 256;
/// Longest delay or stall a fault may ask for.
const MAX_FAULT_DURATION: Duration = Duration::from_secs(3600);
/// How long dropping a proxy waits for its tasks to close their sockets.
const DROP_WAIT: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// Worker threads of the runtime shared by all proxies.
const RUNTIME_THREADS: usize = 2;
/// Name of those threads (also used to detect a drop from inside the runtime).
const RUNTIME_THREAD_NAME: &str = "quorumlock-proxy";

/// What the network between the clients and the upstream does.
///
/// Chunks are whatever one `read` returned. Every fault keeps each
/// direction's byte stream intact and in order; see [`Proxy::set_fault`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum NetFault {
    /// Forward everything at once.
    #[default]
    None,
    /// Every chunk, in each direction, is delayed by `latency` ± a uniform
    /// random `jitter`, but never overtakes an earlier chunk (a chunk due
    /// earlier than its predecessor waits for it). A round trip so takes at
    /// least `2 × (latency − jitter)`. `jitter` must not exceed `latency`.
    Delay {
        /// Mean one-way delay of a chunk.
        latency: Duration,
        /// Largest deviation from `latency`, either way.
        jitter: Duration,
    },
    /// TCP-like loss: each chunk is "lost" with `probability` and delivered
    /// after `stall` instead (its retransmission). Later chunks of the same
    /// direction wait behind it; nothing is dropped from the stream.
    /// `probability` must be within `0.0..=1.0`.
    Loss {
        /// Chance that one chunk is lost, `0.0..=1.0`.
        probability: f64,
        /// How late a lost chunk arrives.
        stall: Duration,
    },
    /// A partition: nothing passes either way. Bytes are held, not dropped,
    /// and delivered in order when the fault is lifted, as TCP would after
    /// retransmission. New connections are accepted but get nothing, and
    /// are only connected upstream once the fault is lifted.
    Blackhole,
    /// Every open connection is closed with a TCP reset (`SO_LINGER` 0) on
    /// both sides, and every new one is reset right after `accept` while
    /// the fault lasts.
    Reset,
}

impl NetFault {
    /// Checks the fault's parameters.
    ///
    /// # Errors
    ///
    /// [`TestbedError::InvalidNetFault`] naming the fault if `probability`
    /// is not within `0.0..=1.0`, `jitter` exceeds `latency`, or a delay or
    /// stall is longer than an hour.
    pub fn validate(&self) -> Result<(), TestbedError> {
        let invalid = |reason: String| TestbedError::InvalidNetFault {
            fault: *self,
            reason,
        };
        match *self {
            Self::None | Self::Blackhole | Self::Reset => Ok(()),
            Self::Delay { latency, jitter } => {
                let longest = latency.saturating_add(jitter);
                if jitter > latency {
                    Err(invalid(format!(
                        "jitter {jitter:?} exceeds latency {latency:?}, which would make delays negative"
                    )))
                } else if longest > MAX_FAULT_DURATION {
                    Err(invalid(format!(
                        "latency + jitter {longest:?} exceeds the limit of {MAX_FAULT_DURATION:?}"
                    )))
                } else {
                    Ok(())
                }
            }
            Self::Loss { probability, stall } => {
                if !(0.0..=1.0).contains(&probability) {
                    Err(invalid(format!(
                        "probability {probability} is not within 0.0..=1.0"
                    )))
                } else if stall > MAX_FAULT_DURATION {
                    Err(invalid(format!(
                        "stall {stall:?} exceeds the limit of {MAX_FAULT_DURATION:?}"
                    )))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// How long a chunk read now waits before it is written, counted from
    /// the read. [`Blackhole`](Self::Blackhole) and [`Reset`](Self::Reset)
    /// give `ZERO`: the chunk is held anyway until the fault is lifted, and
    /// is then due at once.
    fn chunk_delay(&self, rng: &mut impl rand::Rng) -> Duration {
        match *self {
            Self::None | Self::Blackhole | Self::Reset => Duration::ZERO,
            Self::Delay { latency, jitter } => {
                if jitter.is_zero() {
                    latency
                } else {
                    let low = latency - jitter;
                    rng.random_range(low..=latency + jitter)
                }
            }
            Self::Loss { probability, stall } => {
                if rng.random_bool(probability) {
                    stall
                } else {
                    Duration::ZERO
                }
            }
        }
    }
}

/// What every task of one proxy watches.
#[derive(Clone, Copy, Debug)]
struct Control {
    fault: NetFault,
    upstream: SocketAddr,
    /// Bumped by every [`Proxy::set_upstream`]; connections of an older
    /// generation close.
    generation: u64,
    /// Set when the proxy is dropped.
    shutdown: bool,
}

/// State shared by a proxy handle and its tasks.
#[derive(Debug, Default)]
struct Shared {
    /// Open client connections.
    open: AtomicUsize,
    /// Client connections accepted since the start.
    accepted: AtomicUsize,
    /// Running tasks (the accept loop and one per connection).
    tasks: Mutex<usize>,
    tasks_done: Condvar,
}

impl Shared {
    fn task_started(self: &Arc<Self>) -> TaskGuard {
        *self.tasks.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        TaskGuard {
            shared: Arc::clone(self),
        }
    }

    /// Waits (bounded) until every task has ended.
    fn wait_for_tasks(&self, timeout: Duration) {
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        // A timeout leaves tasks behind; nothing better to do in `drop`.
        let _ = self
            .tasks_done
            .wait_timeout_while(tasks, timeout, |tasks| *tasks > 0);
    }
}

/// Counts a task as running until dropped (also when the task is cancelled).
struct TaskGuard {
    shared: Arc<Shared>,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mut tasks = self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *tasks -= 1;
        if *tasks == 0 {
            self.shared.tasks_done.notify_all();
        }
    }
}

/// Counts a client connection as open until dropped.
struct OpenGuard(Arc<Shared>);

impl OpenGuard {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.open.fetch_add(1, Ordering::SeqCst);
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(shared))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A fault-injecting TCP proxy on `127.0.0.1:<free port>` in front of one
/// upstream server.
///
/// Dropping the proxy closes its listener and every connection (both the
/// client and the upstream side), and waits (at most 5 s) until they are
/// closed.
pub struct Proxy {
    addr: SocketAddr,
    control: watch::Sender<Control>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let control = *self.control.borrow();
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &control.upstream)
            .field("fault", &control.fault)
            .field("connections", &self.connections())
            .finish()
    }
}

impl Proxy {
    /// Starts a proxy on a free port of `127.0.0.1`, forwarding to
    /// `upstream` with [`NetFault::None`]. Works from synchronous and async
    /// code alike: the proxy runs on a runtime of its own.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if the runtime cannot be built or the listening
    /// socket cannot be bound.
    pub fn start(upstream: SocketAddr) -> Result<Self, TestbedError> {
        Self::start_on(Ipv4Addr::LOCALHOST, upstream)
    }

    /// Like [`start`](Self::start), listening on a free port of `ip` (any
    /// of 127.0.0.0/8 is loopback on Linux). A test that checks a dropped
    /// proxy's port is closed uses an address no `redis-server` of the
    /// testbed binds, so a server started meanwhile cannot take the port.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_on(ip: Ipv4Addr, upstream: SocketAddr) -> Result<Self, TestbedError> {
        let runtime = runtime()?;
        let std_listener = std::net::TcpListener::bind((ip, 0))
            .map_err(TestbedError::io("binding the proxy's listening socket"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(TestbedError::io("making the proxy's socket non-blocking"))?;
        let addr = std_listener
            .local_addr()
            .map_err(TestbedError::io("reading the proxy's address"))?;
        let listener = {
            let _runtime = runtime.enter();
            TcpListener::from_std(std_listener)
                .map_err(TestbedError::io("registering the proxy's socket"))?
        };
        let (control, receiver) = watch::channel(Control {
            fault: NetFault::None,
            upstream,
            generation: 0,
            shutdown: false,
        });
        let shared = Arc::new(Shared::default());
        let task = shared.task_started();
        runtime.spawn(accept_loop(listener, Arc::clone(&shared), receiver, task));
        Ok(Self {
            addr,
            control,
            shared,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients connect to, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The server new connections are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.control.borrow().upstream
    }

    /// Forwards new connections to `upstream` and closes every connection
    /// that goes to the previous one (both sides, with a normal close), as
    /// the switch of address in a failover. The closing happens on the
    /// proxy's threads right after this returns; poll
    /// [`connections`](Self::connections) to wait for it.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        self.control.send_modify(|control| {
            control.upstream = upstream;
            control.generation += 1;
        });
    }

    /// Sets what the network does, for open and new connections at once.
    ///
    /// Chunks already held back when the fault changes keep their order:
    /// with [`NetFault::None`] they are delivered right away, under
    /// [`NetFault::Blackhole`] they stay held, under a delay or loss they
    /// keep the time they were due at.
    ///
    /// # Errors
    ///
    /// [`TestbedError::InvalidNetFault`] (see [`NetFault::validate`]); the
    /// fault in force is then unchanged.
    pub fn set_fault(&self, fault: NetFault) -> Result<(), TestbedError> {
        fault.validate()?;
        self.control.send_modify(|control| control.fault = fault);
        Ok(())
    }

    /// The fault in force.
    pub fn fault(&self) -> NetFault {
        self.control.borrow().fault
    }

    /// The number of open client connections (accepted and not yet closed,
    /// including those waiting out a [`NetFault::Blackhole`]).
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// The number of client connections accepted since the proxy started
    /// (open or closed): a client that reconnects in a loop shows here.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.control.send_modify(|control| control.shutdown = true);
        // Waiting on a runtime thread would block one of the threads the
        // tasks need to finish.
        let on_runtime = std::thread::current().name() == Some(RUNTIME_THREAD_NAME);
        if !on_runtime {
            self.shared.wait_for_tasks(DROP_WAIT);
        }
    }
}

/// The runtime shared by all proxies of the process, built on first use.
fn runtime() -> Result<&'static Runtime, TestbedError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name(RUNTIME_THREAD_NAME)
            .enable_io()
            .enable_time()
            .build()
            .map_err(|err| err.to_string())
    });
    runtime.as_ref().map_err(|err| TestbedError::Io {
        context: "building the proxies' tokio runtime".to_owned(),
        source: io::Error::other(err.clone()),
    })
}

/// Accepts clients until the proxy is dropped, one task per connection.
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut control: watch::Receiver<Control>,
    accepting: TaskGuard,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            changed = control.changed() => {
                if changed.is_err() || control.borrow_and_update().shutdown {
                    break;
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(_) => {
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        // Round trips of small commands: never wait for Nagle.
        let _ = client.set_nodelay(true);
        let open = OpenGuard::new(&shared);
        let task = shared.task_started();
        tokio::spawn(connection(client, control.clone(), open, task));
    }
    // Close the port before the proxy's drop may return, which waits for
    // this task's guard: left to the end of the function, the guard went
    // first and the port stayed open a moment after the drop (seen as a
    // flaky "connection after drop" in the proxy tests).
    drop(listener);
    drop(accepting);
}

/// Closes a socket with RST instead of FIN once it is dropped.
fn reset(stream: &TcpStream) {
    // If this fails the peer sees a normal close, still a closed connection.
    let _ = stream.set_zero_linger();
}

/// Why a connection is being closed from the proxy's side.
enum Close {
    /// The proxy was dropped or moved to another upstream: a normal close.
    Normal,
    /// [`NetFault::Reset`]: close both sides with RST.
    Reset,
}

/// Resolves when the connection must be closed by the proxy.
async fn closing(mut control: watch::Receiver<Control>, generation: u64) -> Close {
    loop {
        {
            let now = control.borrow_and_update();
            if now.shutdown || now.generation != generation {
                return Close::Normal;
            }
            if now.fault == NetFault::Reset {
                return Close::Reset;
            }
        }
        if control.changed().await.is_err() {
            return Close::Normal;
        }
    }
}

/// Runs one client connection: waits out a partition, connects upstream,
/// then pumps both directions until one side closes or the proxy closes it.
async fn connection(
    mut client: TcpStream,
    mut control: watch::Receiver<Control>,
    _open: OpenGuard,
    _task: TaskGuard,
) {
    // A connection accepted under a reset is reset here, at once. One
    // accepted during a partition reaches the upstream only once it is
    // lifted, like a SYN that is retransmitted (or is reset if the
    // partition turns into a reset).
    let target = loop {
        let now = *control.borrow_and_update();
        if now.shutdown {
            return;
        }
        match now.fault {
            NetFault::Reset => {
                reset(&client);
                return;
            }
            NetFault::Blackhole => {
                if control.changed().await.is_err() {
                    return;
                }
            }
            _ => break now,
        }
    };
    let connected = tokio::select! {
        biased;
        close = closing(control.clone(), target.generation) => {
            if let Close::Reset = close {
                reset(&client);
            }
            return;
        }
        connected = TcpStream::connect(target.upstream) => connected,
    };
    let Ok(mut upstream) = connected else {
        // What the client would see connecting to a dead server directly.
        reset(&client);
        return;
    };
    let _ = upstream.set_nodelay(true);
    let close = {
        let (mut client_read, mut client_write) = client.split();
        let (mut upstream_read, mut upstream_write) = upstream.split();
        let requests = pump(&mut client_read, &mut upstream_write, control.clone());
        let replies = pump(&mut upstream_read, &mut client_write, control.clone());
        tokio::select! {
            biased;
            close = closing(control, target.generation) => close,
            // An error on one side (e.g. a reset) resets the other one too.
            pumped = async { tokio::try_join!(requests, replies) } => match pumped {
                Ok(_) => Close::Normal,
                Err(_) => Close::Reset,
            },
        }
    };
    if let Close::Reset = close {
        reset(&client);
        reset(&upstream);
    }
}

/// A chunk held back by a fault.
struct Held {
    due: Instant,
    bytes: Box<[u8]>,
}

/// Copies one direction until `src` ends (then shuts `dst` down for
/// writing), applying the fault in force to every chunk.
///
/// Without a fault and with nothing held back this is a plain read/write
/// loop that also wakes up when the fault changes.
async fn pump<R, W>(
    src: &mut R,
    dst: &mut W,
    mut control: watch::Receiver<Control>,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0_u8; BUFFER_SIZE].into_boxed_slice();
    let mut held: VecDeque<Held> = VecDeque::new();
    let mut eof = false;
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    loop {
        if eof && held.is_empty() {
            return dst.shutdown().await;
        }
        let fault = control.borrow_and_update().fault;
        if fault == NetFault::None && held.is_empty() {
            tokio::select! {
                biased;
                changed = control.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                read = src.read(&mut buf) => match read? {
                    0 => eof = true,
                    n => dst.write_all(&buf[..n]).await?,
                },
            }
            continue;
        }
        // When the front chunk may go out: lifted faults release at once,
        // a partition releases nothing.
        let release = match fault {
            NetFault::None => held.front().map(|_| Instant::now()),
            NetFault::Blackhole | NetFault::Reset => None,
            NetFault::Delay { .. } | NetFault::Loss { .. } => held.front().map(|chunk| chunk.due),
        };
        let can_read = !eof && held.len() < MAX_HELD_CHUNKS;
        tokio::select! {
            biased;
            changed = control.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            () = sleep_until(release), if release.is_some() => {
                if let Some(chunk) = held.pop_front() {
                    dst.write_all(&chunk.bytes).await?;
                }
            }
            read = src.read(&mut buf), if can_read => match read? {
                0 => eof = true,
                n => {
                    let due = Instant::now() + fault.chunk_delay(&mut rng);
                    held.push_back(Held { due, bytes: buf[..n].into() });
                }
            },
        }
    }
}

/// Sleeps until `deadline`; only polled when there is one.
async fn sleep_until(deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline).await;
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpStream};
    use std::thread;

    use super::*;

    /// An upstream that echoes every connection back, on its own threads.
    fn echo_server() -> io::Result<SocketAddr> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                thread::spawn(move || {
                    let Ok(mut reader) = stream.try_clone() else {
                        return;
                    };
                    let _ = io::copy(&mut reader, &mut stream);
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
        Ok(addr)
    }

    fn connect(proxy: &Proxy) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(proxy.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Writes `data` in many small pieces while the faults change, and
    /// checks that exactly the same bytes come back in order.
    #[test]
    fn faults_never_drop_or_reorder_bytes() -> Result<(), Box<dyn std::error::Error>> {
        let proxy = Proxy::start(echo_server()?)?;
        let mut stream = connect(&proxy)?;
        let data: Vec<u8> = (0..200_000_u32).map(|i| (i % 251) as u8).collect();
        let faults = [
            NetFault::Delay {
                latency: Duration::from_millis(2),
                jitter: Duration::from_millis(2),
            },
            NetFault::Loss {
                probability: 0.3,
                stall: Duration::from_millis(3),
            },
            NetFault::Blackhole,
            NetFault::None,
        ];
        let mut writer = stream.try_clone()?;
        let sent = data.clone();
        let sending = thread::spawn(move || -> io::Result<()> {
            // Spread the writes over the fault changes below.
            for (i, piece) in sent.chunks(997).enumerate() {
                writer.write_all(piece)?;
                if i % 4 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            writer.shutdown(Shutdown::Write)
        });
        let changing = thread::scope(|scope| {
            let changer = scope.spawn(|| -> Result<(), TestbedError> {
                for fault in faults.iter().cycle().take(40) {
                    proxy.set_fault(*fault)?;
                    thread::sleep(Duration::from_millis(3));
                }
                proxy.set_fault(NetFault::None)
            });
            let mut echoed = Vec::new();
            let read = stream.read_to_end(&mut echoed);
            (changer.join(), read, echoed)
        });
        let (changer, read, echoed) = changing;
        changer.map_err(|_| "fault changer panicked")??;
        read?;
        sending.join().map_err(|_| "sender panicked")??;
        assert_eq!(echoed.len(), data.len());
        assert!(echoed == data, "bytes were reordered or corrupted");
        Ok(())
    }

    #[test]
    fn an_overflowing_delay_is_rejected_not_a_panic() {
        let fault = NetFault::Delay {
            latency: Duration::MAX,
            jitter: Duration::MAX,
        };
        match fault.validate() {
            Err(TestbedError::InvalidNetFault { fault: bad, reason }) => {
                assert_eq!(bad, fault);
                assert!(
                    reason.contains(&format!("latency + jitter {:?}", Duration::MAX)),
                    "{reason}"
                );
            }
            other => panic!("{fault:?} accepted: {other:?}"),
        }
    }

    #[test]
    fn invalid_faults_are_rejected_by_name() -> Result<(), Box<dyn std::error::Error>> {
        let proxy = Proxy::start(echo_server()?)?;
        for probability in [-0.1, 1.5, f64::NAN] {
            let fault = NetFault::Loss {
                probability,
                stall: Duration::from_millis(1),
            };
            match proxy.set_fault(fault) {
                Err(TestbedError::InvalidNetFault { fault: bad, reason }) => {
                    assert_eq!(format!("{bad:?}"), format!("{fault:?}"));
                    assert!(reason.contains("probability"), "{reason}");
                }
                other => panic!("{fault:?} accepted: {other:?}"),
            }
        }
        let fault = NetFault::Delay {
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(2),
        };
        let err = proxy
            .set_fault(fault)
            .err()
            .ok_or("jitter > latency accepted")?;
        assert!(err.to_string().contains("jitter"), "{err}");
        let fault = NetFault::Loss {
            probability: 0.5,
            stall: Duration::from_secs(7200),
        };
        assert!(proxy.set_fault(fault).is_err());
        assert_eq!(proxy.fault(), NetFault::None);
        Ok(())
    }

    #[test]
    fn reset_refuses_new_connections_until_lifted() -> Result<(), Box<dyn std::error::Error>> {
        let proxy = Proxy::start(echo_server()?)?;
        proxy.set_fault(NetFault::Reset)?;
        let mut stream = connect(&proxy)?;
        let mut buf = [0_u8; 1];
        let read = stream.write_all(b"x").and_then(|()| stream.read(&mut buf));
        match read {
            Err(err) => assert!(
                matches!(
                    err.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                ),
                "{err}"
            ),
            Ok(n) => panic!("read {n} bytes through a reset proxy"),
        }
        proxy.set_fault(NetFault::None)?;
        let mut stream = connect(&proxy)?;
        stream.write_all(b"y")?;
        stream.read_exact(&mut buf)?;
        assert_eq!(&buf, b"y");
        Ok(())
    }

    #[test]
    fn a_dead_upstream_resets_the_client() -> Result<(), Box<dyn std::error::Error>> {
        let dead = {
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            listener.local_addr()?
        };
        let proxy = Proxy::start(dead)?;
        let mut stream = connect(&proxy)?;
        let mut buf = [0_u8; 1];
        let read = stream.read(&mut buf);
        assert!(
            matches!(&read, Err(err) if err.kind() == io::ErrorKind::ConnectionReset),
            "{read:?}"
        );
        Ok(())
    }
}
