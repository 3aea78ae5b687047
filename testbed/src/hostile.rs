//! A fake Redis server that misbehaves on purpose: what a real
//! redis-server never does (garbage, half replies, silence after the
//! handshake, the same error to everything), to check that the library
//! answers with a typed error, in bounded time, without a storm of
//! connections or growing memory.
//!
//! It is never a stand-in for Redis behaviour: tests put it next to real
//! redis-servers, as the one node that lies or breaks. Each
//! [`HostileServer`] listens on `127.0.0.1:<free port>`, runs on a thread
//! of its own (a current-thread Tokio runtime), counts the connections it
//! accepts, and stops when dropped.
//!
//! ```
//! use quorumlock_testbed::hostile::{HostileServer, Misbehaviour};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = HostileServer::start(Misbehaviour::ErrorReply("NOAUTH Authentication required.".into()))?;
//! let client = redis::Client::open(server.url())?;
//! let mut con = client.get_connection()?;
//! let err = redis::cmd("PING").query::<String>(&mut con).unwrap_err();
//! assert_eq!(err.code(), Some("NOAUTH"));
//! assert_eq!(server.accepted(), 1);
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::TestbedError;

/// What the server does with each connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Accepts, then closes at once.
    CloseOnAccept,
    /// Accepts and reads, and never answers.
    Silent,
    /// Answers every command with this error (`-<text>\r\n`), e.g.
    /// `"NOSCRIPT No matching script."`, `"READONLY …"`, `"LOADING …"`,
    /// `"BUSY …"`, `"MOVED 3999 127.0.0.1:6381"`, `"NOAUTH …"`,
    /// `"WRONGPASS …"`, `"ERR …"`.
    ErrorReply(String),
    /// Answers every command with bytes that are not RESP.
    Garbage,
    /// Announces a 999,999,999-byte bulk string, then sends one byte every
    /// 100 ms.
    Trickle,
    /// Answers every command with an integer (`:42`): a type no script
    /// returns.
    WrongType,
    /// Answers half of a reply, then closes.
    CloseMidReply,
    /// Answers the connection's set-up like
    /// [`HandshakeThenSilent`](Self::HandshakeThenSilent), then every later
    /// command only after this delay, with an error reply (the one answer
    /// that fits every command): replies that come after the caller gave
    /// up on them.
    Late(Duration),
    /// Answers the connection's set-up like
    /// [`HandshakeThenSilent`](Self::HandshakeThenSilent), then every later
    /// command with these bytes: a well-formed reply that no real server
    /// sends to that command (a lie).
    Lie(Vec<u8>),
    /// Answers what a connection's set-up sends (`CLIENT`, `HELLO`,
    /// `SELECT`, `PING`, `SCRIPT LOAD`, `INFO`, the epoch check's `EVAL`)
    /// like a fresh master, then never answers again.
    HandshakeThenSilent,
}

/// A running fake server; stopped when dropped.
pub struct HostileServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    commands: Arc<AtomicUsize>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl HostileServer {
    /// Starts a server that answers with `misbehaviour`.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if it cannot listen or start its thread.
    pub fn start(misbehaviour: Misbehaviour) -> Result<HostileServer, TestbedError> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(TestbedError::io("binding the hostile server"))?;
        listener
            .set_nonblocking(true)
            .map_err(TestbedError::io("setting the hostile server non-blocking"))?;
        let addr = listener
            .local_addr()
            .map_err(TestbedError::io("reading the hostile server's address"))?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let commands = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = watch::channel(false);
        let counters = Counters {
            accepted: Arc::clone(&accepted),
            commands: Arc::clone(&commands),
        };
        let thread = std::thread::Builder::new()
            .name("quorumlock-hostile".into())
            .spawn(move || serve(listener, misbehaviour, counters, stopped))
            .map_err(TestbedError::io("starting the hostile server's thread"))?;
        Ok(HostileServer {
            addr,
            accepted,
            commands,
            stop,
            thread: Some(thread),
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Commands received since the start, over all connections (what a
    /// silent server lets pile up).
    pub fn commands(&self) -> usize {
        self.commands.load(Ordering::SeqCst)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the server counts.
#[derive(Clone)]
struct Counters {
    accepted: Arc<AtomicUsize>,
    commands: Arc<AtomicUsize>,
}

fn serve(
    listener: std::net::TcpListener,
    misbehaviour: Misbehaviour,
    counters: Counters,
    mut stopped: watch::Receiver<bool>,
) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async move {
        let Ok(listener) = TcpListener::from_std(listener) else {
            return;
        };
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                conn = listener.accept() => {
                    let Ok((stream, _)) = conn else { continue };
                    counters.accepted.fetch_add(1, Ordering::SeqCst);
                    let mut stop = stopped.clone();
                    let misbehaviour = misbehaviour.clone();
                    let commands = Arc::clone(&counters.commands);
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = stop.changed() => {}
                            () = connection(stream, misbehaviour, &commands) => {}
                        }
                    });
                }
            }
        }
    });
}

/// One connection, answered as `misbehaviour` says.
async fn connection(stream: TcpStream, misbehaviour: Misbehaviour, commands: &AtomicUsize) {
    if misbehaviour == Misbehaviour::CloseOnAccept {
        return;
    }
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut silent = misbehaviour == Misbehaviour::Silent;
    let mut handshake_over = false;
    while let Some(command) = read_command(&mut read).await {
        commands.fetch_add(1, Ordering::SeqCst);
        if silent {
            continue;
        }
        let reply: Vec<u8> = match &misbehaviour {
            Misbehaviour::ErrorReply(text) => format!("-{text}\r\n").into_bytes(),
            Misbehaviour::Garbage => b"\x00\xffnot resp at all\r\n".to_vec(),
            Misbehaviour::WrongType => b":42\r\n".to_vec(),
            Misbehaviour::CloseMidReply => {
                let _ = write.write_all(b"*2\r\n$5\r\nhal").await;
                return;
            }
            Misbehaviour::Trickle => {
                let _ = write.write_all(b"$999999999\r\n").await;
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if write.write_all(b"x").await.is_err() {
                        return;
                    }
                }
            }
            Misbehaviour::HandshakeThenSilent => {
                let (reply, last) = handshake_reply(&command);
                silent = last;
                reply
            }
            Misbehaviour::Lie(bytes) => {
                if handshake_over {
                    bytes.clone()
                } else {
                    let (reply, last) = handshake_reply(&command);
                    handshake_over = last;
                    reply
                }
            }
            Misbehaviour::Late(delay) => {
                if handshake_over {
                    tokio::time::sleep(*delay).await;
                    b"-ERR late reply\r\n".to_vec()
                } else {
                    let (reply, last) = handshake_reply(&command);
                    handshake_over = last;
                    reply
                }
            }
            Misbehaviour::CloseOnAccept | Misbehaviour::Silent => return,
        };
        if write.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// A fresh master's answer to a set-up command; `true` once the set-up is
/// over (the epoch check's `EVAL`, the last thing a connect sends).
fn handshake_reply(command: &[Vec<u8>]) -> (Vec<u8>, bool) {
    let verb = command
        .first()
        .map(|v| String::from_utf8_lossy(v).to_ascii_uppercase())
        .unwrap_or_default();
    match verb.as_str() {
        "PING" => (b"+PONG\r\n".to_vec(), false),
        "SCRIPT" => {
            let sha = "0".repeat(40);
            (format!("${}\r\n{sha}\r\n", sha.len()).into_bytes(), false)
        }
        "INFO" => {
            let info = "run_id:4f1e6d0c2b7a9e8f1d3c5b7a9e0f2d4c6b8a0e1f\r\nuptime_in_seconds:0\r\n\
                        role:master\r\nmaster_replid2:0000000000000000000000000000000000000000\r\n";
            (format!("${}\r\n{info}\r\n", info.len()).into_bytes(), false)
        }
        "EVAL" | "EVALSHA" => (b":1\r\n".to_vec(), true),
        "HELLO" => (b"-ERR unknown command 'HELLO'\r\n".to_vec(), false),
        _ => (b"+OK\r\n".to_vec(), false),
    }
}

/// Reads one command (an array of bulk strings); `None` at the end of the
/// stream or on anything else.
async fn read_command(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Option<Vec<Vec<u8>>> {
    let count = read_header(read, b'*').await?;
    let mut parts = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let len = read_header(read, b'$').await?;
        let mut part = vec![0; len.checked_add(2)?];
        read.read_exact(&mut part).await.ok()?;
        part.truncate(len);
        parts.push(part);
    }
    Some(parts)
}

async fn read_header(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    kind: u8,
) -> Option<usize> {
    let mut line = Vec::new();
    read.read_until(b'\n', &mut line).await.ok()?;
    let text = line.strip_prefix(&[kind])?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(text).ok()?.parse().ok()
}
