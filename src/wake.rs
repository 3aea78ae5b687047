//! Wake-ups: waiters retry as soon as a holder releases, instead of polling.
//!
//! The release script publishes on `quorumlock:released:<name>` on every
//! node where the name became free, if a waiter marked it there: an
//! attempt of a caller that waits for notices marks the name on each node
//! it finds it held on (field `waiters` of the lock key). A release nobody
//! waits for publishes nothing. A [`MultiLock`](crate::MultiLock) whose
//! callers wait for a name subscribes to that channel through **one**
//! subscriber connection per node, shared by every waiter of the lock
//! service (started on the first wait, re-made after a failure), and
//! unsubscribes 1 s after the last waiter of the name left, unless
//! one waits for it again by then: a busy name, waited for again and again,
//! costs no `SUBSCRIBE` and `UNSUBSCRIBE` per wait, and has no moment
//! between two waits when its release goes unheard.
//!
//! Between two attempts a waiter sleeps until the first of:
//!
//! * a release notice for one of its names from any node;
//! * a release by another guard of the same `MultiLock` (announced as soon
//!   as that release is queued on every node's connection: an attempt sent
//!   after it on the same connections runs after it on every node);
//! * the holder's remaining TTL ([`Error::Contended::free_in`](crate::Error::Contended));
//! * the jittered backoff of the [`RetryPolicy`](crate::RetryPolicy).
//!
//! Notices are only hints. A lost message (a subscriber reconnecting, a key
//! that expires instead of being released, a waiter that subscribed just
//! after the release) never stalls a waiter past its backoff, and a plain
//! notice grants nothing: the waiter still has to win the quorum (a grant,
//! below, is a vote the node cast in the release's own script call).
//!
//! Within one `MultiLock`, waiters of one name take turns: only the first
//! in line attempts and waits for notices, the others queue behind it
//! (first come, first served) without sending anything. One release then
//! starts one attempt from this process, not a herd of attempts that split
//! the nodes between them and all fail.
//!
//! **Handoff.** While the waiter whose turn it is sleeps, a release of the
//! name by the same `MultiLock` takes the lock for it in the same script
//! call on each node: the hold is given back and, where that left the name
//! free, taken under the waiter's owner token at once. The waiter's attempt
//! is then decided on those answers exactly like an acquire (quorum,
//! validity counted from a stamp taken before the release was sent,
//! rollback if it falls short), so the lock changes hands in one round trip
//! instead of a release, a notice and an acquire. A waiter dropped during a
//! handoff is rolled back by the releaser. Locks on several names are not
//! handed off; their waiters retry on notices.
//!
//! With waiters in other processes, a waiter retries once enough of the
//! nodes it found held have announced a release to make a quorum possible
//! (one, after a refusal at the gate node; at once if the wait was a
//! release of its own `MultiLock`).
//!
//! **One process told per release.** A waiter takes a place in the name's
//! waiter queue on every node that refuses it (`scripts/queue.lua`; a
//! waiter that is not fair from the attempt it makes at once after its
//! first, unless the name was known to be contended: `call::carry_ticket`), and
//! a release announces itself to the lock service of the queue's first
//! waiter alone, on that service's turn channel
//! (`quorumlock:released:quorumlock:turn:<service>`, subscribed from the
//! service's first waiter on); the subscriber counts it for that waiter.
//! A release whose queue is empty announces on the name's channel, to
//! every waiter. Announcing to every process's waiter instead woke a herd
//! on each release: in the s3sep bench (8 processes, one name) seven gate
//! attempts were refused per acquisition, and the waiters that happened to
//! be first at the gate took the name most often. The place of a waiter
//! of a lock service that is not fair refuses nobody: it only asks for the
//! notice, and queues behind every fair place. Should such a waiter's
//! process stop, the notices go to it until its place lapses (two longest
//! backoffs plus a node timeout, at least 2 s); the waiters behind it
//! retry on their backoff meanwhile, as after a lost notice.
//!
//! **Grants.** A waiter of one name whose turn it is in its lock service
//! asks, with its place, that the release which frees the name take it
//! for the call (`scripts/release.lua`): its place then
//! carries the call's grant hold (an owner token every attempt of the call
//! shares, and an entry id no attempt writes), the attempt's number, the
//! TTL and the node's epoch marker as the node voted under it then. The
//! release that frees the name on a node takes it there for the first
//! waiter, as that waiter's acquire would have, if the marker is still the
//! same (the same epoch, as settled as then: a restarted or promoted node
//! has another marker, or none, and grants nothing), and tells its lock
//! service the attempt and the name's fencing counter. A quorum of grants
//! decides the call like an attempt's round (`acquire::granted`), its
//! validity counted from the start of the attempt whose request was
//! granted (each node took the key after that request reached it): the
//! name changes hands in one release, where a notice and an acquire round
//! followed it. Fewer grants than a quorum still hold their nodes for the
//! call: its next attempt counts each as its own hold, and an attempt that
//! loses gives back the grants where it won (`release::rollback`), so
//! waiters never keep a split of the nodes between them. A call that ends
//! without winning gives its grants back with its places; a guard won by
//! an attempt gives back the call's grant hold too when released. A
//! request is granted only within half a TTL of the attempt that made it
//! (by the node's clock): a release or rollback that gives a request up is
//! sent again for a TTL, so one that could not reach its node in that time
//! leaves no request to grant. The cost: a waiter whose process stops
//! within half a TTL of its last attempt may be granted the name, which
//! then stays held for the TTL.
//!
//! **Stepping aside.** A release that a waiter of another process had
//! marked the name for is announced to it, and the release's reply says
//! so (`scripts/release.lua`). The releasing lock service then leaves the
//! name alone for a moment, two release rounds (at least 0.5 ms, at most a
//! node timeout): an acquire call of it that starts meanwhile sleeps that
//! out before its first attempt. Otherwise its attempt, sent as soon as
//! the release returns, reaches the nodes before the woken waiter's does,
//! and one process takes the name again and again while the others
//! starve. If no waiter took the name by then, the call attempts as
//! usual; if one did, it finds the name held and waits its turn.
//!
//! **Fair lock services** (`fair(true)`): their places also refuse a free
//! name to every waiter behind them (`scripts/queue.lua`), so the name
//! goes to the first in line, and a waiter is not overtaken by later ones
//! nor by the holder that just released.
//!
//! Turn wake-ups off with
//! [`LockConfigBuilder::wake_ups(false)`](crate::LockConfigBuilder::wake_ups)
//! for plain jittered polling (no subscriber connections).
//!
//! This module holds only documentation; its types are crate-internal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::clock::Stamp;
use crate::error::NodeError;
use crate::fanout::End;
use crate::keys::{Entry, KeySet, Ticket, release_channel, turn_channel};
use crate::node::Node;
use crate::scripts::acquire::AcquireReply;
use crate::scripts::reply::Reading;
use crate::stats::Counters;

mod aside;
mod handoff;
mod subscriber;
#[cfg(test)]
mod tests;
mod waiter;

use aside::Aside;
use handoff::Offer;
use subscriber::{Change, Subscriber};
use waiter::Registration;
pub(crate) use waiter::Waiter;

/// How long a subscriber stays subscribed to a name's channel after its
/// last waiter left.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// Names with waiters, and how to reach each node's subscriber.
pub(crate) struct Wake {
    enabled: bool,
    /// This lock service's part of its waiters' queue ids.
    service: Arc<str>,
    /// Nodes a quorum needs.
    required: usize,
    names: Arc<Mutex<HashMap<Arc<str>, Waiters>>>,
    subscribers: Vec<Subscriber>,
    connect_timeout: Duration,
    /// Whether the subscribers listen on this lock service's turn channel
    /// (from its first queued waiter on, for as long as they run).
    turns_heard: AtomicBool,
    /// Names this lock service released to a waiter of another process.
    aside: Aside,
}

/// The waiters of one name in this lock service.
struct Waiters {
    count: usize,
    /// The queue ids of its waiters that have one: a release notice that
    /// names another waiter of the name's queue (see
    /// `scripts/release.lua`) is not for this lock service.
    queue_ids: Vec<Arc<str>>,
    /// Notices for the name so far, per node, and (last slot) releases by
    /// this lock service.
    notices: watch::Sender<Box<[u64]>>,
    /// Whose turn it is to attempt.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// The waiter whose turn it is, while it sleeps: a release by this lock
    /// service takes the name for it in the same script call.
    next: Option<Handoff>,
    /// Grants heard for its queued waiters and not yet taken by them.
    grants: Vec<Granted>,
}

/// A node's notice that a release took a name for a waiter of this lock
/// service (`scripts/release.lua`).
#[derive(Clone, Debug)]
pub(crate) struct Granted {
    /// The waiter's queue id.
    pub(crate) queue_id: Arc<str>,
    /// The node.
    pub(crate) node: usize,
    /// The waiter's attempt whose grant request the node took it for.
    pub(crate) attempt: u32,
    /// The name's fencing counter on the node, as an acquire reads it.
    pub(crate) fence: Reading,
}

/// A sleeping waiter's offer: take the name for this entry, and tell me how
/// each node answered.
pub(crate) struct Handoff {
    pub(crate) entry: Entry,
    pub(crate) events: mpsc::UnboundedSender<HandoffEvent>,
}

/// What a releasing guard tells the waiter it hands the lock to.
pub(crate) enum HandoffEvent {
    /// The handoff round started at this stamp (the waiter's validity
    /// counts from here).
    Started(Stamp),
    /// One node's answer to the waiter's part.
    Reply(usize, Result<AcquireReply, NodeError>),
    /// The round ended (all answered, or the node timeout passed).
    Ended(End),
}

/// How a wait ended.
pub(crate) enum Woken {
    /// Try again.
    Retry,
    /// A release took the name for the waiter: its attempt's answers are
    /// `first` (if already received), then the rest on the channel.
    HandedOver {
        entry: Entry,
        first: Option<HandoffEvent>,
        rest: mpsc::UnboundedReceiver<HandoffEvent>,
    },
}

impl Wake {
    pub(crate) fn new(
        enabled: bool,
        required: usize,
        nodes: &[Arc<Node>],
        connect_timeout: Duration,
    ) -> Wake {
        Wake {
            enabled,
            required,
            service: Arc::from(format!("{:016x}", rand::random::<u64>())),
            names: Arc::default(),
            subscribers: nodes
                .iter()
                .enumerate()
                .map(|(index, n)| Subscriber {
                    index,
                    client: n.client().cloned(),
                    name: Arc::clone(n.name()),
                    changes: Mutex::new(None),
                })
                .collect(),
            connect_timeout,
            turns_heard: AtomicBool::new(false),
            aside: Aside::default(),
        }
    }

    /// A ticket for an acquire call of this lock service beginning now;
    /// `fair`: its places refuse the waiters behind it.
    pub(crate) fn ticket(&self, fair: bool) -> Ticket {
        Ticket::now(&self.service, fair)
    }

    /// A waiter for `keys`: nothing is registered until it first waits.
    /// `queue_id`: its place in the names' waiter queues, if it has one.
    pub(crate) fn waiter<'a>(
        &'a self,
        keys: &Arc<KeySet>,
        counters: &'a Counters,
        queue_id: Option<Arc<str>>,
    ) -> Waiter<'a> {
        Waiter {
            wake: self,
            counters,
            keys: Arc::clone(keys),
            queue_id,
            registration: None,
            seen: Vec::new(),
            turn: None,
            takes_turns: true,
            woke_on_gate_notice: false,
            woke_on_notice: false,
        }
    }

    /// Announces that a release of `keys` is on its way to every node
    /// (queued on each node's connection): local waiters retry now.
    pub(crate) fn released(&self, keys: &KeySet) {
        if !self.enabled {
            return;
        }
        let names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if names.is_empty() {
            return;
        }
        let local = self.subscribers.len();
        for name in keys.names() {
            if let Some(waiters) = names.get(name) {
                waiters.notices.send_modify(|n| n[local] += 1);
            }
        }
    }

    /// Leaves `keys` to the waiters of other processes for `pause`: a
    /// release of them told such a waiter (it had marked a key), and an
    /// acquire of this lock service sent right after it would reach the
    /// nodes before that waiter's, again and again. A new acquire call of
    /// `keys` sleeps through the pause first ([`Wake::stepping_aside`]).
    pub(crate) fn step_aside(&self, keys: &KeySet, pause: Duration) {
        if self.enabled {
            self.aside.step_aside(keys, pause);
        }
    }

    /// What is left of a pause of [`Wake::step_aside`] on `keys`.
    pub(crate) fn stepping_aside(&self, keys: &KeySet) -> Option<Duration> {
        self.aside.left(keys)
    }

    /// Whether waiters of this lock service wait for one of `keys`: a new
    /// acquire then joins the queue instead of barging in.
    pub(crate) fn has_waiters(&self, keys: &KeySet) -> bool {
        if !self.enabled {
            return false;
        }
        let names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        !names.is_empty() && keys.names().iter().any(|n| names.contains_key(n))
    }

    /// The grants heard for the waiter of queue id `queue_id` on `keys`
    /// (one name) since it last asked.
    pub(crate) fn take_grants(&self, keys: &KeySet, queue_id: &Arc<str>) -> Vec<Granted> {
        if !self.enabled || keys.len() != 1 {
            return Vec::new();
        }
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(waiters) = names.get_mut(keys.first()) else {
            return Vec::new();
        };
        let (ours, others) = std::mem::take(&mut waiters.grants)
            .into_iter()
            .partition(|g| Arc::ptr_eq(&g.queue_id, queue_id));
        waiters.grants = others;
        ours
    }

    /// The waiter to hand `keys` to on release, if one of this lock
    /// service sleeps on them (one name only).
    pub(crate) fn take_handoff(&self, keys: &KeySet) -> Option<Handoff> {
        if !self.enabled || keys.len() != 1 {
            return None;
        }
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        names.get_mut(keys.first())?.next.take()
    }

    /// Offers a handoff for `name`; replaces nothing (one turn at a time).
    fn offer(&self, name: &Arc<str>, handoff: Handoff) {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waiters) = names.get_mut(name) {
            waiters.next = Some(handoff);
        }
    }

    /// Takes back the offer of `entry`; `false` when a release took it.
    fn withdraw(&self, name: &Arc<str>, entry: &Entry) -> bool {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(waiters) = names.get_mut(name) else {
            return false;
        };
        match &waiters.next {
            Some(next) if Arc::ptr_eq(&next.entry.id, &entry.id) => {
                waiters.next = None;
                true
            }
            _ => false,
        }
    }

    fn register(
        &self,
        keys: &Arc<KeySet>,
        counters: &Counters,
        queue_id: Option<Arc<str>>,
    ) -> Registration<'_> {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        // A queued waiter's turn is announced on the lock service's turn
        // channel: subscribed once, kept (one channel however many names).
        if queue_id.is_some() && !self.turns_heard.swap(true, Ordering::Relaxed) {
            for subscriber in &self.subscribers {
                subscriber.change(
                    Change::Subscribe(turn_channel(&self.service)),
                    &self.names,
                    self.connect_timeout,
                    counters,
                );
            }
        }
        let mut notices = Vec::with_capacity(keys.len());
        let mut turn = None;
        for name in keys.names() {
            let waiters = names.entry(Arc::clone(name)).or_insert_with(|| Waiters {
                count: 0,
                queue_ids: Vec::new(),
                notices: watch::channel(vec![0; self.subscribers.len() + 1].into()).0,
                turn: Arc::default(),
                next: None,
                grants: Vec::new(),
            });
            waiters.count += 1;
            waiters.queue_ids.extend(queue_id.clone());
            if waiters.count == 1 {
                for subscriber in &self.subscribers {
                    subscriber.change(
                        Change::Subscribe(release_channel(name)),
                        &self.names,
                        self.connect_timeout,
                        counters,
                    );
                }
            }
            notices.push(waiters.notices.subscribe());
            turn.get_or_insert_with(|| Arc::clone(&waiters.turn));
        }
        Registration {
            wake: self,
            keys: Arc::clone(keys),
            queue_id,
            notices,
            turn: turn.unwrap_or_default(),
        }
    }

    fn unregister(&self, keys: &[Arc<str>], queue_id: Option<&Arc<str>>) {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        for name in keys {
            let Some(waiters) = names.get_mut(name) else {
                continue;
            };
            if let Some(id) = queue_id {
                waiters.queue_ids.retain(|q| !Arc::ptr_eq(q, id));
                waiters.grants.retain(|g| !Arc::ptr_eq(&g.queue_id, id));
            }
            waiters.count -= 1;
            if waiters.count == 0 {
                names.remove(name);
                for subscriber in &self.subscribers {
                    subscriber.send(Change::Unsubscribe(release_channel(name)));
                }
            }
        }
    }
}
