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
//! after the release) never stalls a waiter past its backoff, and a notice
//! never grants anything: the waiter still has to win the quorum.
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
//! With waiters in other processes, a node's notice wakes each process's
//! first waiter, which retries once enough of the nodes it found held have
//! announced a release to make a quorum possible (one, after a refusal at
//! the gate node; at once if the wait was a release of its own
//! `MultiLock`).
//!
//! **Fair lock services** (`fair(true)`) queue their waiters across
//! processes (`scripts/queue.lua`): when a name's queue has a first waiter,
//! the release announces its turn to that waiter's lock service alone, on
//! the service's turn channel (`quorumlock:released:quorumlock:turn:<service>`,
//! subscribed from the service's first queued waiter on), and the
//! subscriber counts it for that waiter; the waiters of other lock services
//! could not take the name and hear nothing. A release whose queue is empty
//! announces on the name's channel, to every waiter.
//!
//! Turn wake-ups off with
//! [`LockConfigBuilder::wake_ups(false)`](crate::LockConfigBuilder::wake_ups)
//! for plain jittered polling (no subscriber connections).
//!
//! This module holds only documentation; its types are crate-internal.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::future::select_all;
use redis::Client;
use tokio::sync::{OwnedMutexGuard, mpsc, watch};
use tokio::time::Instant;

use crate::clock::{Stamp, instant_in};
use crate::error::{Error, NodeError, NodeOutcome, NodeReports};
use crate::fanout::End;
use crate::keys::{Entry, KeySet, RESERVED_PREFIX, Ticket, release_channel, turn_channel};
use crate::node::AcquireReply;
use crate::node::Node;
use crate::stats::{Counters, bump};

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

/// One node's subscriber connection, run by a task started on first use.
struct Subscriber {
    /// The node's index, its slot in the notice counts.
    index: usize,
    /// `None` for a Sentinel node: its waiters poll (see GUIDE.md).
    client: Option<Client>,
    name: Arc<str>,
    changes: Mutex<Option<mpsc::UnboundedSender<Change>>>,
}

enum Change {
    Subscribe(String),
    Unsubscribe(String),
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
        }
    }

    /// A ticket for an acquire call of this lock service beginning now.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket::now(&self.service)
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

    /// Whether waiters of this lock service wait for one of `keys`: a new
    /// acquire then joins the queue instead of barging in.
    pub(crate) fn has_waiters(&self, keys: &KeySet) -> bool {
        if !self.enabled {
            return false;
        }
        let names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        !names.is_empty() && keys.names().iter().any(|n| names.contains_key(n))
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

/// One acquire call's waiting between attempts.
pub(crate) struct Waiter<'a> {
    wake: &'a Wake,
    counters: &'a Counters,
    keys: Arc<KeySet>,
    /// Its place in the names' waiter queues, if it has one.
    queue_id: Option<Arc<str>>,
    registration: Option<Registration<'a>>,
    /// The notice counts of each name as of the last attempt.
    seen: Vec<Box<[u64]>>,
    turn: Option<OwnedMutexGuard<()>>,
    /// Whether the last sleep ended on release notices (not on its timer
    /// or a handoff) that the gate's own was among, or on a release by
    /// this lock service: a gated attempt refused after such a wake lost a
    /// race to other waiters, not to a release still on its way.
    woke_on_gate_notice: bool,
    /// Whether the last sleep ended on release notices (its own, for a
    /// waiter that queues: see `deliver`).
    woke_on_notice: bool,
}

struct Registration<'a> {
    wake: &'a Wake,
    keys: Arc<KeySet>,
    queue_id: Option<Arc<str>>,
    notices: Vec<watch::Receiver<Box<[u64]>>>,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.wake
            .unregister(self.keys.names(), self.queue_id.as_ref());
    }
}

impl Waiter<'_> {
    /// Marks every notice so far as seen: call before each attempt, so a
    /// release announced while the attempt runs wakes the wait after it.
    pub(crate) fn mark(&mut self) {
        if let Some(registration) = &mut self.registration {
            self.seen.clear();
            for notices in &mut registration.notices {
                self.seen.push(notices.borrow_and_update().clone());
            }
        }
    }

    /// Sleeps after a failed attempt until a release notice, the holder's
    /// remaining TTL or `backoff`, whichever comes first, and never past
    /// `budget_end`. Without wake-ups: `backoff` only.
    ///
    /// `next` is the entry the waiter would take next (one name only): while
    /// it sleeps with its turn, a release by this lock service may take the
    /// name for it, and the wait ends with [`Woken::HandedOver`].
    ///
    /// `listen`: whether the next release notice ends the sleep. A waiter
    /// that woke on a notice and lost the race for the name to contenders
    /// of other processes sits one release out: it wakes on the second
    /// release its nodes announce (or its timer): every waiter hears a
    /// notice at the same moment, and a herd that races on each one spends
    /// its CPU on rounds that nobody but one wins. Only one: a waiter deaf
    /// for its whole backoff left the name to the process that released it
    /// and took it straight back (one worker of eight got 80 times the
    /// acquisitions of another). A handoff by this lock service still ends
    /// the sleep.
    ///
    /// `gate`: the node the next attempt asks first. If the last attempt
    /// found the name held there and the notices that end the wait do not
    /// include the gate's, [`woke_on_gate_notice`](Self::woke_on_gate_notice) stays
    /// false: the nodes' notices come in any order, and an attempt that
    /// reaches the gate before its release is refused there without having
    /// lost a race, so it must not sit the next notice out.
    pub(crate) async fn wait(
        &mut self,
        error: Option<&Error>,
        backoff: Duration,
        budget_end: Instant,
        next: Option<Entry>,
        listen: bool,
        gate: Option<usize>,
    ) -> Woken {
        let wake = self.wake;
        self.woke_on_gate_notice = false;
        self.woke_on_notice = false;
        if !wake.enabled {
            tokio::time::sleep_until(instant_in(backoff).min(budget_end)).await;
            return Woken::Retry;
        }
        if self.registration.is_none() {
            self.registration =
                Some(wake.register(&self.keys, self.counters, self.queue_id.clone()));
        }
        if self.turn.is_none() && !self.take_turn(budget_end).await {
            return Woken::Retry;
        }
        let free_in = match error {
            Some(Error::Contended {
                free_in: Some(free_in),
                ..
            }) => *free_in,
            _ => backoff,
        };
        let until = instant_in(backoff.min(free_in)).min(budget_end);
        // Nodes the last attempt won were rolled back: free. A quorum needs
        // this many more to announce a release. Only the nodes it found held
        // announce (the attempt marked the name there, see
        // `scripts/acquire.lua`): one, if it was refused at the gate.
        let (mut won, mut held, mut gate_held) = (0, 0, false);
        let reports = error.and_then(Error::node_reports);
        for (i, report) in reports.into_iter().flat_map(NodeReports::iter).enumerate() {
            match report.outcome {
                NodeOutcome::Won => won += 1,
                // A node where others wait ahead announces its next
                // release too (it has a queue).
                NodeOutcome::HeldByOther { .. } | NodeOutcome::WaitersAhead => {
                    held += 1;
                    gate_held |= gate == Some(i);
                }
                _ => {}
            }
        }
        let needed = wake.required.saturating_sub(won);
        let needed = if held > 0 { needed.min(held) } else { needed }.max(1);
        let gate = gate.filter(|_| gate_held);
        let skip = u64::from(!listen);
        self.sleep_until_notice(until, Awaited { needed, skip, gate }, next)
            .await
    }

    /// Whether the last [`wait`](Self::wait) ended on release notices, the
    /// gate's among them when the gate was found held (see `gate` there).
    pub(crate) fn woke_on_gate_notice(&self) -> bool {
        self.woke_on_gate_notice
    }

    /// Whether the last [`wait`](Self::wait) ended on release notices.
    pub(crate) fn woke_on_notice(&self) -> bool {
        self.woke_on_notice
    }

    /// Takes this waiter's turn among the waiters of this lock service,
    /// queuing behind the one whose turn it is. `false`: attempt now
    /// without sleeping (the budget ran out while queued, or a release came
    /// while queued).
    async fn take_turn(&mut self, budget_end: Instant) -> bool {
        let Some(registration) = self.registration.as_mut() else {
            return false;
        };
        let turn = Arc::clone(&registration.turn);
        if let Ok(guard) = turn.try_lock_owned() {
            self.turn = Some(guard);
            return true;
        }
        if self.seen.len() != registration.notices.len() {
            // Registered after the attempt: count from now.
            self.seen = snapshot(&mut registration.notices);
        }
        // Another waiter of this lock service attempts for the name: queue
        // behind it, sending nothing meanwhile.
        let Ok(guard) =
            tokio::time::timeout_at(budget_end, Arc::clone(&registration.turn).lock_owned()).await
        else {
            return false;
        };
        self.turn = Some(guard);
        // The waiter before us may have won and released already, before we
        // could offer a handoff: its release is among the notices since we
        // queued. Any notice at all: attempt now rather than sleep through
        // it. (A fresh count here once lost that release, and the waiter
        // slept its whole backoff.)
        !notices_since(&registration.notices, &self.seen)
    }

    /// Sleeps with the turn until `until`, until releases announced by
    /// `awaited.needed` nodes (or one by this lock service), or until a
    /// release hands `next` over.
    async fn sleep_until_notice(
        &mut self,
        until: Instant,
        awaited: Awaited,
        next: Option<Entry>,
    ) -> Woken {
        let wake = self.wake;
        let Some(registration) = self.registration.as_mut() else {
            return Woken::Retry;
        };
        if self.seen.len() != registration.notices.len() {
            // Registered after the attempt: count from now.
            self.seen = snapshot(&mut registration.notices);
        }
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        // Offer the turn to a release of this lock service.
        let mut offered = next.map(|entry| Offer::make(wake, entry));
        let woken = loop {
            let step = {
                let notices = registration
                    .notices
                    .iter_mut()
                    .map(|n| Box::pin(n.changed()));
                let handed = async {
                    match offered.as_mut() {
                        Some(offer) => offer.answers.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    first = handed => Step::Handed(first),
                    _ = select_all(notices) => Step::Notice,
                    () = &mut sleep => Step::Timer,
                }
            };
            match step {
                Step::Handed(Some(first)) => {
                    if let Some(offer) = offered.take() {
                        return offer.handed_over(Some(first));
                    }
                }
                // The releaser dropped the offer unused: wait on.
                Step::Handed(None) => offered = None,
                Step::Notice => {
                    let heard = Heard::since(&registration.notices, &self.seen);
                    if heard.quorum_may_be_free(awaited.needed, awaited.skip) {
                        bump(&self.counters.woken);
                        self.woke_on_notice = true;
                        self.woke_on_gate_notice =
                            heard.local || awaited.gate.is_none_or(|g| heard.node(g));
                        break Woken::Retry;
                    }
                }
                Step::Timer => break Woken::Retry,
            }
        };
        match offered {
            // A release took the offer just now: its answers are coming.
            Some(offer) if !wake.withdraw(&offer.name, &offer.entry) => offer.handed_over(None),
            _ => woken,
        }
    }
}

/// A sleeping waiter's standing offer of a handoff, and where its answers
/// arrive.
struct Offer {
    name: Arc<str>,
    entry: Entry,
    answers: mpsc::UnboundedReceiver<HandoffEvent>,
}

impl Offer {
    /// Offers the name of `entry` to a release by this lock service.
    fn make(wake: &Wake, entry: Entry) -> Offer {
        let (events, answers) = mpsc::unbounded_channel();
        let name = Arc::clone(entry.keys.first());
        wake.offer(
            &name,
            Handoff {
                entry: entry.clone(),
                events,
            },
        );
        Offer {
            name,
            entry,
            answers,
        }
    }

    /// The wait's end once a release took the offer.
    fn handed_over(self, first: Option<HandoffEvent>) -> Woken {
        Woken::HandedOver {
            entry: self.entry,
            first,
            rest: self.answers,
        }
    }
}

/// The notice counts of every name now, marked as seen.
fn snapshot(notices: &mut [watch::Receiver<Box<[u64]>>]) -> Vec<Box<[u64]>> {
    notices
        .iter_mut()
        .map(|n| n.borrow_and_update().clone())
        .collect()
}

/// Whether any release was announced (by a node or locally) since `seen`.
fn notices_since(notices: &[watch::Receiver<Box<[u64]>>], seen: &[Box<[u64]>]) -> bool {
    notices
        .iter()
        .zip(seen)
        .any(|(now, seen)| now.borrow().iter().zip(seen.iter()).any(|(n, s)| n > s))
}

/// What ended one pass of a wait.
enum Step {
    Handed(Option<HandoffEvent>),
    Notice,
    Timer,
}

/// What a wait listens for.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    /// How many distinct nodes' release notices end it.
    needed: usize,
    /// How many releases per node it sits out (see `listen` in
    /// [`Waiter::wait`]).
    skip: u64,
    /// The node the next attempt asks first, if the last attempt found the
    /// name held there.
    gate: Option<usize>,
}

/// The releases announced since a waiter's last snapshot.
struct Heard {
    /// By this lock service (queued on every node).
    local: bool,
    /// Per node (any number of them): how many it announced.
    nodes: Vec<u64>,
}

impl Heard {
    fn since(notices: &[watch::Receiver<Box<[u64]>>], seen: &[Box<[u64]>]) -> Heard {
        let mut heard = Heard {
            local: false,
            nodes: Vec::new(),
        };
        for (now, seen) in notices.iter().zip(seen) {
            let now = now.borrow();
            let Some((last, nodes)) = now.split_last() else {
                continue;
            };
            heard.local |= seen.last().is_some_and(|s| last > s);
            if heard.nodes.len() < nodes.len() {
                heard.nodes.resize(nodes.len(), 0);
            }
            for (i, (n, s)) in nodes.iter().zip(seen.iter()).enumerate() {
                heard.nodes[i] += n.saturating_sub(*s);
            }
        }
        heard
    }

    /// Whether node `i` announced a release.
    fn node(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|n| *n > 0)
    }

    /// Whether a quorum may be free: a release by this lock service, or
    /// releases announced by at least `needed` distinct nodes, each more
    /// than `skip` times. Waiting for enough nodes rather than the first
    /// avoids an attempt that reaches the other nodes before their release
    /// does and fails.
    fn quorum_may_be_free(&self, needed: usize, skip: u64) -> bool {
        self.local || self.nodes.iter().filter(|n| **n > skip).count() >= needed
    }
}

impl Subscriber {
    /// Sends a change to the node's subscriber task, starting it first if
    /// it is not running.
    fn change(
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

    fn send(&self, change: Change) {
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
fn deliver(
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
    let Some(names) = names.upgrade() else {
        return;
    };
    let names = names.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(waiters) = names.get(name) {
        let ours = next.is_empty() || waiters.queue_ids.iter().any(|id| id.as_bytes() == next);
        if ours {
            waiters.notices.send_modify(|n| n[index] += 1);
        }
    }
}

/// Counts a notice from node `index` for every subscribed name: after a
/// reconnect, a release there may have been missed while it was down.
fn deliver_all(names: &Weak<Mutex<HashMap<Arc<str>, Waiters>>>, index: usize) {
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
async fn subscribe_loop(
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
struct Backoff {
    pause: Duration,
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

    fn after_connection(&mut self, lasted: Duration) {
        if lasted >= Backoff::MAX {
            self.pause = Backoff::FIRST;
        }
    }

    /// Sleeps the pause (then doubles it), applying changes meanwhile.
    /// `false` when the lock service is gone.
    async fn wait(
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
struct Listen<'a> {
    index: usize,
    connect_timeout: Duration,
    names: &'a Weak<Mutex<HashMap<Arc<str>, Waiters>>>,
    notices: &'a std::sync::atomic::AtomicU64,
}

impl Listen<'_> {
    /// Delivers notices and applies changes until the connection fails
    /// (`true`: make another) or the lock service is gone (`false`).
    async fn run(
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
struct Wanted {
    channels: HashSet<String>,
    /// Channel -> when it is unsubscribed.
    lingering: HashMap<String, Instant>,
}

impl Wanted {
    /// Applies a change as it is (no linger): on a connection being made,
    /// or once its command was sent.
    fn apply(&mut self, change: Change) {
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
    fn linger(&mut self, channel: String, until: Instant) {
        self.lingering.insert(channel, until);
    }

    /// Drops the channels whose linger is over by `now`, returning them
    /// (to unsubscribe).
    fn lingered(&mut self, now: Instant) -> Vec<String> {
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
    fn end_lingering(&mut self) {
        for (c, _) in self.lingering.drain() {
            self.channels.remove(&c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_count_from_every_node_however_many() {
        // 200 nodes, then the local counter; the last 150 nodes announced.
        let seen: Box<[u64]> = vec![0; 201].into();
        let mut now = vec![0u64; 201];
        for n in &mut now[50..200] {
            *n = 1;
        }
        let (_tx, rx) = watch::channel(Box::<[u64]>::from(now));
        let heard = Heard::since(&[rx], &[seen]);
        assert!(heard.quorum_may_be_free(150, 0));
        assert!(!heard.quorum_may_be_free(151, 0));
        // Sitting one release out, one each is not enough.
        assert!(!heard.quorum_may_be_free(1, 1));
        assert!(!heard.node(0) && heard.node(50) && !heard.node(200));
    }

    #[test]
    fn a_channel_lingers_until_its_time_unless_a_waiter_comes_back() {
        let mut wanted = Wanted::default();
        let now = Instant::now();
        for c in ["a", "b", "c"] {
            wanted.apply(Change::Subscribe(c.into()));
        }
        wanted.linger("a".into(), now);
        wanted.linger("b".into(), now + LINGER);
        wanted.linger("c".into(), now);
        // A waiter of `c` came back: it stays, no longer lingering.
        wanted.apply(Change::Subscribe("c".into()));
        assert_eq!(wanted.lingered(now), vec!["a".to_string()]);
        assert!(wanted.channels.contains("b") && wanted.channels.contains("c"));
        assert!(!wanted.channels.contains("a"));
        assert_eq!(wanted.lingered(now + LINGER), vec!["b".to_string()]);
        assert!(wanted.lingering.is_empty());
    }

    #[test]
    fn a_new_connection_subscribes_to_no_lingering_channel() {
        let mut wanted = Wanted::default();
        wanted.apply(Change::Subscribe("kept".into()));
        wanted.apply(Change::Subscribe("left".into()));
        wanted.linger("left".into(), Instant::now() + LINGER);
        wanted.end_lingering();
        assert_eq!(wanted.channels, HashSet::from(["kept".to_string()]));
        // While disconnected, a change applies as it is.
        wanted.apply(Change::Unsubscribe("kept".into()));
        assert!(wanted.channels.is_empty());
    }

    #[test]
    fn a_release_by_this_lock_service_needs_no_node() {
        // 3 nodes, then the local counter.
        let (_tx, rx) = watch::channel(Box::<[u64]>::from(vec![0, 0, 0, 1]));
        let heard = Heard::since(&[rx], &[vec![0; 4].into()]);
        assert!(heard.quorum_may_be_free(3, 1));
        assert!(!heard.node(0));
    }
}
