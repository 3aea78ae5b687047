//! Commands on their way to a node, and what their replies say about the
//! node's connection.
//!
//! A node is judged by what its connection receives: any reply, awaited or
//! not, shows it alive. A fan-out that decides at the quorum stops waiting
//! for the slower nodes and drops their calls, but the commands were sent
//! and their replies still come; if nobody saw them, a node that answered
//! every call would look silent once the connect timeout passed, and the
//! release that follows would skip it (DESIGN rule 12). So a call's future
//! does not own its reply: an [`InFlight`] dropped before its reply hands
//! what is left of it to the node's [`Drain`], a task that awaits it and
//! records the reply.
//!
//! The drain keeps a command alive, too: redis-rs drops a queued command
//! whose caller stopped waiting before it is written, and a kept one is
//! written in its turn. Nothing else changes order: the command keeps its
//! place in the connection's queue.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use redis::{RedisError, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Whether the current connection answers at all: since when requests
/// have gone out with no reply of any kind in between (see the module
/// docs: every reply counts, awaited or not). A quiet spell only stops new
/// calls; a `PING` probe then tells a live server from a silent one.
///
/// It also remembers whether a call on the connection went unanswered for
/// the node timeout with no reply in time since: such a node is *suspect*,
/// and a release does not wait for it (see `Node::readiness`). A reply
/// that took longer than the node timeout shows the connection alive but
/// does not end the suspicion: waiting for a node that answers that late
/// cannot pay.
#[derive(Default)]
pub(super) struct Liveness {
    pub(super) generation: u64,
    unanswered_since: Option<Instant>,
    pub(super) timed_out: bool,
    /// Requests sent since the last reply.
    pub(super) unanswered: u32,
    pub(super) probing: bool,
}

impl Liveness {
    /// Starts over for a new connection.
    pub(super) fn on(&mut self, generation: u64) {
        if self.generation != generation {
            *self = Liveness {
                generation,
                ..Liveness::default()
            };
        }
    }

    pub(super) fn sent(&mut self, generation: u64) {
        self.on(generation);
        self.unanswered_since.get_or_insert_with(Instant::now);
        self.unanswered = self.unanswered.saturating_add(1);
    }

    /// A reply on connection `generation`; `in_time`: within the node
    /// timeout of its request.
    pub(super) fn answered(&mut self, generation: u64, in_time: bool) {
        if self.generation == generation {
            self.unanswered_since = None;
            self.unanswered = 0;
            if in_time {
                self.timed_out = false;
            }
        }
    }

    pub(super) fn silent_for(&mut self, generation: u64) -> Option<Duration> {
        self.on(generation);
        self.unanswered_since.map(|since| since.elapsed())
    }
}

/// A node's [`Liveness`] and what judges a reply in time.
pub(super) struct Watch {
    liveness: Mutex<Liveness>,
    node_timeout: Duration,
}

impl Watch {
    pub(super) fn new(node_timeout: Duration) -> Watch {
        Watch {
            liveness: Mutex::default(),
            node_timeout,
        }
    }

    pub(super) fn liveness(&self) -> MutexGuard<'_, Liveness> {
        self.liveness.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a call's result: a reply (a value or a server's error, not
    /// a broken connection) shows connection `generation` alive.
    pub(super) fn record(
        &self,
        generation: u64,
        sent: Instant,
        result: &Result<Value, RedisError>,
    ) {
        if is_reply(result) {
            let in_time = sent.elapsed() <= self.node_timeout;
            self.liveness().answered(generation, in_time);
        }
    }
}

/// Whether a call's result came from the server.
pub(super) fn is_reply(result: &Result<Value, RedisError>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => e.code().is_some(),
    }
}

/// One command sent on connection `generation` at `sent`: its reply is
/// recorded in the node's [`Watch`] whether its caller awaits it or not.
pub(super) struct InFlight {
    call: Option<BoxFuture<'static, Result<Value, RedisError>>>,
    drain: Arc<Drain>,
    generation: u64,
    sent: Instant,
    /// Polled at least once: the command is in the connection's queue (or
    /// waiting for room in it, in its turn).
    started: bool,
}

impl InFlight {
    pub(super) fn new(
        drain: &Arc<Drain>,
        generation: u64,
        call: BoxFuture<'static, Result<Value, RedisError>>,
    ) -> InFlight {
        InFlight {
            call: Some(call),
            drain: Arc::clone(drain),
            generation,
            sent: Instant::now(),
            started: false,
        }
    }
}

impl Future for InFlight {
    type Output = Result<Value, RedisError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(call) = this.call.as_mut() else {
            return Poll::Pending;
        };
        this.started = true;
        let result = std::task::ready!(call.as_mut().poll(cx));
        this.call = None;
        this.drain.watch.record(this.generation, this.sent, &result);
        Poll::Ready(result)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(call) = self.call.take()
            && self.started
        {
            self.drain.adopt(Orphan {
                call,
                generation: self.generation,
                sent: self.sent,
            });
        }
    }
}

/// A command whose caller stopped waiting before its reply.
struct Orphan {
    call: BoxFuture<'static, Result<Value, RedisError>>,
    generation: u64,
    sent: Instant,
}

/// The task that awaits a node's orphaned commands and records their
/// replies. Started with the first orphan; it ends, dropping what it still
/// awaits, once the node and every call in flight to it are gone (nobody
/// is left to judge the connection by them).
pub(super) struct Drain {
    watch: Arc<Watch>,
    orphans: Mutex<Option<mpsc::UnboundedSender<Orphan>>>,
}

impl Drain {
    pub(super) fn new(watch: Arc<Watch>) -> Drain {
        Drain {
            watch,
            orphans: Mutex::new(None),
        }
    }

    pub(super) fn watch(&self) -> &Watch {
        &self.watch
    }

    fn adopt(&self, orphan: Orphan) {
        let mut orphans = self.orphans.lock().unwrap_or_else(PoisonError::into_inner);
        let orphan = match orphans.as_ref() {
            Some(tx) => match tx.send(orphan) {
                Ok(()) => return,
                // The task ended (its runtime shut down): start another.
                Err(mpsc::error::SendError(orphan)) => orphan,
            },
            None => orphan,
        };
        // Without a runtime (dropped as it shuts down) nothing can await
        // it: the command runs or not as redis-rs decides, unrecorded.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(orphan);
        runtime.spawn(drain(rx, Arc::clone(&self.watch)));
        *orphans = Some(tx);
    }
}

async fn drain(mut orphans: mpsc::UnboundedReceiver<Orphan>, watch: Arc<Watch>) {
    let mut calls = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            Some(()) = calls.next(), if !calls.is_empty() => {}
            orphan = orphans.recv() => match orphan {
                Some(Orphan { call, generation, sent }) => {
                    let watch = Arc::clone(&watch);
                    calls.push(async move {
                        let result = call.await;
                        watch.record(generation, sent, &result);
                    });
                }
                None => return,
            },
        }
    }
}
