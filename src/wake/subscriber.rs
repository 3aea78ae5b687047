//! One subscriber connection per node: the channels it listens on, and
//! the notices it delivers to the waiters.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Granted, LINGER, Waiters};
use crate::keys::RESERVED_PREFIX;
use crate::scripts::reply::{Reading, counter};
use crate::stats::Counters;

/// One node's subscriber connection, run by a task started on first use.
pub(super) struct Subscriber {
    /// The node's index, its slot in the notice counts.
    pub(super) index: usize,
    /// `None` for a Sentinel node: its waiters poll (see GUIDE.md).
    pub(super) client: Option<Client>,
    pub(super) name: Arc<str>,
    pub(super) changes: Mutex<Option<mpsc::UnboundedSender<Change>>>,
}

pub(super) enum Change {
    Subscribe(String),
    Unsubscribe(String),
}

impl Subscriber {
    /// Sends a change to the node's subscriber task, starting it first if
    /// it is not running.
    pub(super) fn change(
        &self,
        change: Change,
        names: &Arc<Mutex<HashMap<Arc<str>, Waiters>>>,
        connect_timeout: Duration,
        counters: &Counters,
    ) {
        let Some(client) = &self.client else {
            return;
        };
        let mut changes = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
        if changes.as_ref().is_none_or(|tx| tx.is_closed()) {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let (tx, rx) = mpsc::unbounded_channel();
            runtime.spawn(subscribe_loop(
                self.index,
                client.clone(),
                Arc::clone(&self.name),
                connect_timeout,
                rx,
                Arc::downgrade(names),
                counters.notices_handle(),
            ));
            *changes = Some(tx);
        }
        if let Some(tx) = changes.as_ref() {
            let _ = tx.send(change);
        }
    }

    pub(super) fn send(&self, change: Change) {
        let changes = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = changes.as_ref() {
            let _ = tx.send(change);
        }
    }
}

/// Counts a notice from node `index` for the name a release channel
/// belongs to, unless it names the first waiter of the name's queue and
/// that is not a waiter of this lock service (`message`: empty when the
/// node knows no first waiter). On this lock service's turn channel the
/// message is "<queue id> <name>".
pub(super) fn deliver(
    names: &Weak<Mutex<HashMap<Arc<str>, Waiters>>>,
    index: usize,
    channel: &str,
    message: &[u8],
) {
    let Some(released) = channel
        .strip_prefix(RESERVED_PREFIX)
        .and_then(|c| c.strip_prefix("released:"))
    else {
        return;
    };
    let turn = released
        .strip_prefix(RESERVED_PREFIX)
        .is_some_and(|c| c.starts_with("turn:"));
    let (name, next) = if turn {
        let Some(space) = message.iter().position(|b| *b == b' ') else {
            return;
        };
        let Ok(name) = std::str::from_utf8(&message[space + 1..]) else {
            return;
        };
        (name, &message[..space])
    } else {
        (released, message)
    };
    // A grant: "<queue id>|<attempt>|<counter>|<current>" (release.lua).
    let mut parts = next.split(|b| *b == b'|');
    let next = parts.next().unwrap_or_default();
    let grant = turn.then(|| granted(parts)).flatten();
    let Some(names) = names.upgrade() else {
        return;
    };
    let mut names = names.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(waiters) = names.get_mut(name) {
        let ours = if next.is_empty() {
            None
        } else {
            let id = waiters.queue_ids.iter().find(|id| id.as_bytes() == next);
            let Some(id) = id else { return };
            Some(Arc::clone(id))
        };
        if let (Some(queue_id), Some((attempt, fence))) = (ours, grant) {
            waiters.grants.push(Granted {
                queue_id,
                node: index,
                attempt,
                fence,
            });
        }
        waiters.notices.send_modify(|n| n[index] += 1);
    }
}

/// A grant notice's attempt and fencing counter reading; `None` when it is
/// no grant, or not one this client could have asked for (a server's
/// garbage): then it only counts as a notice, and the waiter's own attempt
/// reads, and reports, what the node holds.
fn granted<'a>(mut parts: impl Iterator<Item = &'a [u8]>) -> Option<(u32, Reading)> {
    let attempt = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let value = match parts.next()? {
        b"-" => redis::Value::Nil,
        digits => redis::Value::BulkString(digits.to_vec()),
    };
    let current = match parts.next()? {
        b"0" => false,
        b"1" => true,
        _ => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    let value = counter(&value).ok()?;
    Some((attempt, Reading { value, current }))
}

/// Counts a notice from node `index` for every subscribed name: after a
/// reconnect, a release there may have been missed while it was down.
pub(super) fn deliver_all(names: &Weak<Mutex<HashMap<Arc<str>, Waiters>>>, index: usize) {
    if let Some(names) = names.upgrade() {
        let names = names.lock().unwrap_or_else(PoisonError::into_inner);
        for waiters in names.values() {
            waiters.notices.send_modify(|n| n[index] += 1);
        }
    }
}

/// One node's subscriber: keeps one pub/sub connection subscribed to the
/// channels waiters need, re-made with backoff after a failure. Ends when
/// the lock service is gone.
pub(super) async fn subscribe_loop(
    index: usize,
    client: Client,
    node: Arc<str>,
    connect_timeout: Duration,
    mut changes: mpsc::UnboundedReceiver<Change>,
    names: Weak<Mutex<HashMap<Arc<str>, Waiters>>>,
    notices: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut wanted = Wanted::default();
    let mut backoff = Backoff::default();
    let mut reconnecting = false;
    loop {
        // A new connection subscribes to what waiters wait for now.
        wanted.end_lingering();
        while wanted.channels.is_empty() {
            match changes.recv().await {
                Some(change) => wanted.apply(change),
                None => return,
            }
        }
        let connected = tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await;
        let subscribed = match connected {
            Ok(Ok(pubsub)) => {
                let (mut sink, stream) = pubsub.split();
                let all: Vec<&String> = wanted.channels.iter().collect();
                match tokio::time::timeout(connect_timeout, sink.subscribe(all)).await {
                    Ok(Ok(())) => Some((sink, stream)),
                    _ => None,
                }
            }
            _ => None,
        };
        // Every way this connection can fail (refused, closed, an error
        // reply to SUBSCRIBE such as NOAUTH, a stream that ends) waits out
        // the backoff before the next try, reading the changes meanwhile:
        // a lock service that is gone ends the loop at once.
        if let Some((sink, stream)) = subscribed {
            if reconnecting {
                deliver_all(&names, index);
            }
            reconnecting = true;
            let up = tokio::time::Instant::now();
            let listen = Listen {
                index,
                connect_timeout,
                names: &names,
                notices: &notices,
            };
            if !listen.run(sink, stream, &mut wanted, &mut changes).await {
                return;
            }
            backoff.after_connection(up.elapsed());
        }
        tracing::debug!(%node, "wake-up subscriber lost or cannot make its connection; retrying after a backoff");
        if !backoff.wait(&mut wanted, &mut changes).await {
            return;
        }
    }
}

/// The wait between two connections of a subscriber: from 50 ms, doubling
/// up to 1 s; it starts over only after a connection that stayed up, so a
/// server that accepts and then drops every connection is not hammered.
pub(super) struct Backoff {
    pub(super) pause: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            pause: Backoff::FIRST,
        }
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);

    pub(super) fn after_connection(&mut self, lasted: Duration) {
        if lasted >= Backoff::MAX {
            self.pause = Backoff::FIRST;
        }
    }

    /// Sleeps the pause (then doubles it), applying changes meanwhile.
    /// `false` when the lock service is gone.
    pub(super) async fn wait(
        &mut self,
        wanted: &mut Wanted,
        changes: &mut mpsc::UnboundedReceiver<Change>,
    ) -> bool {
        let wait = tokio::time::sleep(self.pause);
        tokio::pin!(wait);
        self.pause = (self.pause * 2).min(Backoff::MAX);
        loop {
            tokio::select! {
                () = &mut wait => return true,
                change = changes.recv() => match change {
                    Some(change) => wanted.apply(change),
                    None => return false,
                },
            }
        }
    }
}

/// A subscriber's connection while it is up.
pub(super) struct Listen<'a> {
    pub(super) index: usize,
    pub(super) connect_timeout: Duration,
    pub(super) names: &'a Weak<Mutex<HashMap<Arc<str>, Waiters>>>,
    pub(super) notices: &'a std::sync::atomic::AtomicU64,
}

impl Listen<'_> {
    /// Delivers notices and applies changes until the connection fails
    /// (`true`: make another) or the lock service is gone (`false`).
    pub(super) async fn run(
        &self,
        mut sink: redis::aio::PubSubSink,
        mut stream: redis::aio::PubSubStream,
        wanted: &mut Wanted,
        changes: &mut mpsc::UnboundedReceiver<Change>,
    ) -> bool {
        loop {
            let lingering_ends = wanted.lingering.values().min().copied();
            let linger = tokio::time::sleep_until(lingering_ends.unwrap_or_else(Instant::now));
            let sent = tokio::select! {
                message = stream.next() => match message {
                    Some(message) => {
                        self.notices.fetch_add(1, Ordering::Relaxed);
                        deliver(
                            self.names,
                            self.index,
                            message.get_channel_name(),
                            message.get_payload_bytes(),
                        );
                        continue;
                    }
                    None => return true,
                },
                change = changes.recv() => {
                    let Some(change) = change else { return false };
                    match &change {
                        Change::Subscribe(c) if !wanted.channels.contains(c) => {
                            tokio::time::timeout(self.connect_timeout, sink.subscribe(c)).await
                        }
                        // Kept for LINGER (see `Wanted::linger`).
                        Change::Unsubscribe(c) if wanted.channels.contains(c) => {
                            wanted.linger(c.clone(), Instant::now() + LINGER);
                            continue;
                        }
                        _ => Ok(Ok(())),
                    }
                    .map(|sent| sent.map(|()| wanted.apply(change)))
                }
                () = linger, if lingering_ends.is_some() => {
                    let over = wanted.lingered(Instant::now());
                    // Never an empty UNSUBSCRIBE: that drops every channel.
                    if over.is_empty() {
                        continue;
                    }
                    tokio::time::timeout(self.connect_timeout, sink.unsubscribe(&over)).await
                }
            };
            if !matches!(sent, Ok(Ok(()))) {
                return true;
            }
        }
    }
}

/// The channels a subscriber is subscribed to (or will be, once
/// connected), and those of them kept only because their last waiter left
/// less than [`LINGER`] ago.
#[derive(Default)]
pub(super) struct Wanted {
    pub(super) channels: HashSet<String>,
    /// Channel -> when it is unsubscribed.
    pub(super) lingering: HashMap<String, Instant>,
}

impl Wanted {
    /// Applies a change as it is (no linger): on a connection being made,
    /// or once its command was sent.
    pub(super) fn apply(&mut self, change: Change) {
        match change {
            Change::Subscribe(c) => {
                self.lingering.remove(&c);
                self.channels.insert(c);
            }
            Change::Unsubscribe(c) => {
                self.lingering.remove(&c);
                self.channels.remove(&c);
            }
        }
    }

    /// Keeps `channel`, whose last waiter left, subscribed `until` then:
    /// a waiter that comes back by then finds it subscribed.
    pub(super) fn linger(&mut self, channel: String, until: Instant) {
        self.lingering.insert(channel, until);
    }

    /// Drops the channels whose linger is over by `now`, returning them
    /// (to unsubscribe).
    pub(super) fn lingered(&mut self, now: Instant) -> Vec<String> {
        let over: Vec<String> = self
            .lingering
            .iter()
            .filter(|(_, ends)| **ends <= now)
            .map(|(c, _)| c.clone())
            .collect();
        for c in &over {
            self.lingering.remove(c);
            self.channels.remove(c);
        }
        over
    }

    /// Drops every lingering channel at once (a new connection subscribes
    /// only to what waiters wait for).
    pub(super) fn end_lingering(&mut self) {
        for (c, _) in self.lingering.drain() {
            self.channels.remove(&c);
        }
    }
}
