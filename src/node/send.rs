//! How one command goes out on a node's connection: not at all to a
//! connection that answers nothing (unless it undoes a write), not after
//! its round's cutoff, `EVALSHA` with an `EVAL` fallback, once more on a
//! new connection when the old one was found dead; and how a failure is
//! counted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::{Cmd, RedisError, Value};

use super::Node;
use super::connection::Slot;
use super::in_flight::{InFlight, Liveness};
use crate::error::{NodeError, NodeErrorKind};
use crate::health::NodeState;
use crate::scripts::{self, Call};
use crate::stats::bump;
use crate::telemetry;

/// How many requests a suspect connection (a call timed out, nothing
/// answered since) is sent before it counts as stalled without waiting out
/// the connect timeout: releases do not wait for a suspect node, so calls
/// to it come fast, and each would sit in its queue until it answers.
pub(super) const MAX_UNANSWERED_WHEN_SUSPECT: u32 = 64;

/// The moment a fan-out decided, for calls it lets finish in the
/// background: a call not sent by then is never sent (nor sent again on a
/// new connection, nor followed by an `EVAL` fallback). A command already
/// queued on the connection runs, in order, before anything queued after
/// the decision, such as the release of what it takes.
#[derive(Debug, Default)]
pub(crate) struct Cutoff(AtomicBool);

impl Cutoff {
    /// Sequentially consistent with [`Reached`](crate::keys::Reached)'s marks: see there.
    pub(crate) fn pass(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub(super) fn passed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Node {
    /// The error of a call not sent because the node's connection has
    /// answered nothing for too long (see [`stalled`](Self::stalled)), if
    /// it has, counting the calls queued for the node's turn. Checked only
    /// while the turn is taken, before a call queues behind the call that
    /// holds it; a call that takes the turn meets the same check in
    /// [`send`](Self::send).
    pub(super) fn silent(self: &Arc<Self>) -> Option<NodeError> {
        let queued = self.batcher.waiting()?;
        let (conn, generation) = match &*self.slot.lock().unwrap_or_else(PoisonError::into_inner) {
            Slot::Ready { conn, generation } => (conn.clone(), *generation),
            _ => return None,
        };
        let queued = u32::try_from(queued).unwrap_or(u32::MAX);
        self.stalled(&conn, generation, queued)
            .map(|silent_for| self.error(&silent_error(silent_for)))
    }

    /// Runs `call` on the node as `how` says, and returns its reply (a
    /// failure is not counted: see
    /// [`count_failure`](Self::count_failure)). A vote carries the node's
    /// settled marker and quarantine last.
    ///
    /// `EVALSHA`, then `EVAL` (which also caches the script) if the server
    /// lost its script cache (restart, `SCRIPT FLUSH`); the fallback is
    /// sent only while this future is alive, so a fan-out that has already
    /// decided and dropped it never sends a late second command. A
    /// connection found dead (e.g. the server restarted since it was made)
    /// is replaced and the call sent once more if `how` allows: that cannot
    /// reorder anything, since a closed socket runs no further commands on
    /// the server and each script is idempotent for one entry (entry id).
    pub(super) async fn script(
        self: &Arc<Self>,
        call: &(impl Call + ?Sized),
        how: How<'_>,
    ) -> Result<Value, NodeError> {
        let script = call.script();
        let command = |verb: &str, script_ref: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(script_ref);
            scripts::write(call, &mut cmd);
            if call.votes() {
                self.voter_args(&mut cmd);
            }
            cmd
        };
        let mut reconnected = false;
        loop {
            let (conn, generation) = self.connection().await?;
            let sent = command("EVALSHA", script.sha(self.flagged));
            let result = match self.send(&conn, generation, sent, how).await {
                Err(e) if e.code() == Some("NOSCRIPT") => {
                    let sent = command("EVAL", script.body(self.flagged));
                    self.send(&conn, generation, sent, how).await
                }
                result => result,
            };
            match result {
                Err(e)
                    if e.is_connection_dropped()
                        && !reconnected
                        && how.resend == Resend::AfterReconnect =>
                {
                    reconnected = true
                }
                result => return result.map_err(|e| self.error(&e)),
            }
        }
    }

    /// Counts a failed call in the node's errors, unless it ended after its
    /// round's `cutoff`.
    pub(super) fn count_failure<T>(&self, result: &Result<T, NodeError>, cutoff: Option<&Cutoff>) {
        if let Err(e) = result
            && !cutoff.is_some_and(Cutoff::passed)
        {
            bump(&self.counters.errors);
            telemetry::node_error(self.name());
            // A server that refuses our scripts casts no vote; other
            // failures are judged where they are learned (the connect, the
            // connection's silence), or concern one key only.
            if matches!(
                e.kind(),
                NodeErrorKind::Auth
                    | NodeErrorKind::ReadOnly
                    | NodeErrorKind::Busy
                    | NodeErrorKind::Other
            ) {
                self.health.set(NodeState::Refused {
                    detail: e.to_string(),
                });
            }
        }
    }

    /// Sends `cmd` on connection `generation` as `how` says, and awaits its
    /// reply (which is recorded also if this future is dropped first, see
    /// [`super::in_flight`]).
    pub(super) async fn send(
        self: &Arc<Self>,
        conn: &MultiplexedConnection,
        generation: u64,
        cmd: Cmd,
        how: How<'_>,
    ) -> Result<Value, RedisError> {
        // A connection that answers nothing gets nothing more (see
        // `Liveness`): its queue would only grow. Not replaced either: a
        // server that is only slow or paused would run the old queue when it
        // wakes, and a release sent on a new connection could run before the
        // acquire it undoes, still queued on the old one. An undo goes out
        // all the same: it waits there, behind what it undoes.
        if !how.undo
            && let Some(silent_for) = self.stalled(conn, generation, 0)
        {
            return Err(silent_error(silent_for));
        }
        // Marked before the cutoff is read: a call that goes out is always
        // marked when its rollback looks (see `Reached`).
        (how.reached)();
        if how.cutoff.is_some_and(Cutoff::passed) {
            return Err(not_sent_error());
        }
        self.liveness().sent(generation);
        let mut conn = conn.clone();
        let call = async move { conn.send_packed_command(&cmd).await }.boxed();
        let result = InFlight::new(&self.drain, generation, call).await;
        match result {
            Ok(Value::ServerError(e)) => {
                // A demoted master (a failover), or one that lost its
                // replicas: it refuses every script of ours before running
                // it (all are write scripts), so nothing queued behind
                // this reply can write either, and a new connection (which
                // for a Sentinel node asks the sentinels again) cannot be
                // overtaken.
                if matches!(e.code(), "READONLY" | "NOREPLICAS") {
                    self.forget(generation);
                }
                Err(e.into())
            }
            Ok(v) => Ok(v),
            Err(e) => {
                if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
                    self.forget(generation);
                }
                Err(e)
            }
        }
    }

    pub(super) fn liveness(&self) -> std::sync::MutexGuard<'_, Liveness> {
        self.drain.watch().liveness()
    }

    /// How long connection `generation` has gone without any reply, if
    /// longer than the connect timeout (or, for a suspect node, once
    /// [`MAX_UNANSWERED_WHEN_SUSPECT`] requests went unanswered, counting
    /// the `queued` ones waiting for the node's turn); starts a probe
    /// (`PING`) then, at most one at a time, whose answer lets calls
    /// through again.
    pub(super) fn stalled(
        self: &Arc<Self>,
        conn: &MultiplexedConnection,
        generation: u64,
        queued: u32,
    ) -> Option<Duration> {
        let silent_for = {
            let mut liveness = self.liveness();
            let silent_for = liveness.silent_for(generation)?;
            let flooded = liveness.timed_out
                && liveness.unanswered.saturating_add(queued) >= MAX_UNANSWERED_WHEN_SUSPECT;
            if silent_for < self.connect_timeout && !flooded {
                return None;
            }
            if !std::mem::replace(&mut liveness.probing, true) {
                self.probe(conn.clone(), generation);
            }
            silent_for
        };
        self.health.set(NodeState::Silent { silent_for });
        Some(silent_for)
    }

    pub(super) fn probe(self: &Arc<Self>, mut conn: MultiplexedConnection, generation: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let node = Arc::clone(self);
        runtime.spawn(async move {
            let ping = redis::cmd("PING");
            let sent = tokio::time::Instant::now();
            let reply =
                tokio::time::timeout(node.connect_timeout, ping.query_async::<Value>(&mut conn))
                    .await;
            node.liveness().probing = false;
            if let Ok(reply) = reply {
                node.drain.watch().record(generation, sent, &reply);
            }
        });
    }
}

/// The error of a call not sent because its round was decided before.
pub(super) fn not_sent_error() -> RedisError {
    RedisError::from(std::io::Error::other(
        "not sent: its round was decided before",
    ))
}

/// The error of a call not sent to a connection silent for `silent_for`.
pub(super) fn silent_error(silent_for: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no reply to anything for {} ms: nothing more is sent until it answers",
            silent_for.as_millis()
        ),
    ))
}

/// Whether a call that met a dead connection is sent again on a new one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    AfterReconnect,
    Never,
}

/// A `reached` that marks nothing: the call writes no entry.
pub(super) const NOTHING: &(dyn Fn() + Sync) = &|| {};

/// How a command goes out ([`Node::send`]).
#[derive(Clone, Copy)]
pub(super) struct How<'a> {
    pub(super) resend: Resend,
    /// Not sent once its round's cutoff has passed.
    pub(super) cutoff: Option<&'a Cutoff>,
    /// An undo (a release, a rollback): sent however long the connection
    /// has been silent, behind what it undoes ([`super::undo`]).
    pub(super) undo: bool,
    /// Marks the entries whose write the command carries, right before it
    /// goes out ([`Reached`](crate::keys::Reached)).
    pub(super) reached: &'a (dyn Fn() + Sync),
}

impl How<'static> {
    /// Resent after a reconnect, no cutoff, not an undo, no entry written.
    pub(super) fn plain() -> How<'static> {
        How {
            resend: Resend::AfterReconnect,
            cutoff: None,
            undo: false,
            reached: NOTHING,
        }
    }
}
