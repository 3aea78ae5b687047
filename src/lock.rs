//! [`MultiLock`]: one lock service over N independent Redis masters.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::clock::Stamp;
use crate::config::LockConfig;
use crate::error::{Error, NodeError, NodeErrorKind, NodeOutcome, NodeReport, NodeReports};
use crate::fanout::QuorumRound;
use crate::fanout::{End, fan_out, fan_out_announcing, quorum_round};
use crate::guard::{LockGuard, ReleaseReport, holds};
use crate::keys::{HoldId, KeySet};
use crate::lease::Lease;
use crate::node::{AcquireReply, Node, ReleaseReply};
use crate::owner::Owner;
use crate::quorum::{self, Decision, Vote};
use crate::stats::{Counters, LockStats, bump};
use crate::wake::{Handoff, HandoffEvent, Wake, Woken};
use crate::watchdog::Watchdog;
use tokio::sync::mpsc;

/// A distributed lock service over N independent Redis masters ("nodes").
///
/// An acquire sends the acquire script to every node at once, each request
/// bounded by the node timeout, and decides as soon as the quorum is reached
/// or can no longer be reached: a paused or dead node never delays it. A win
/// leaves the holder a *validity* of `ttl − elapsed − drift`; a loss rolls
/// back every node the attempt may have written to.
///
/// `MultiLock` is cheap to clone (one `Arc`): clones share the node
/// connections. Connections are made lazily on first use and re-made after a
/// failure, so a lock can be built while some nodes are down. It needs a
/// Tokio runtime with the time driver enabled.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let urls = testbed.urls();
/// use std::time::Duration;
/// use quorumlock::{LockConfig, MultiLock};
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(urls).ttl(Duration::from_secs(10)).build()?);
/// let guard = lock.acquire("nightly-report", Duration::from_secs(2)).await?;
/// assert!(guard.is_held());
/// // ... work that must not run twice at once, within guard.validity() ...
/// let report = guard.release().await;
/// assert!(report.was_held);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    shared: Arc<LockShared>,
}

/// What a lock and its guards share.
pub(crate) struct LockShared {
    pub(crate) config: LockConfig,
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) counters: Counters,
    pub(crate) watchdog: Watchdog,
    pub(crate) wake: Wake,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<&str> = self.shared.nodes.iter().map(|n| &**n.name()).collect();
        f.debug_struct("MultiLock")
            .field("nodes", &nodes)
            .field("quorum", &self.shared.config.quorum)
            .field("ttl", &self.shared.config.ttl)
            .finish_non_exhaustive()
    }
}

impl MultiLock {
    /// A lock over the configured nodes. Inside a Tokio runtime it starts
    /// connecting to every node in the background at once; otherwise the
    /// first operation connects. Await [`warm_up`](Self::warm_up) to know
    /// the connections are made.
    ///
    /// Until a node's connection is up, an acquire that reaches its quorum
    /// without that node does not send to it at all (a request that has not
    /// left cannot be ordered before its release); the guard then reports
    /// the node as [`Hold::Unknown`](crate::Hold::Unknown).
    pub fn new(config: LockConfig) -> MultiLock {
        let nodes: Vec<Arc<Node>> = config
            .nodes
            .iter()
            .map(|n| Arc::new(Node::new(n.client.clone(), config.connect_timeout)))
            .collect();
        let wake = Wake::new(
            config.wake_ups,
            config.required_nodes(),
            &nodes,
            config.connect_timeout,
        );
        let lock = MultiLock {
            shared: Arc::new(LockShared {
                config,
                nodes,
                counters: Counters::default(),
                watchdog: Watchdog::default(),
                wake,
            }),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            lock.shared.nodes.iter().for_each(Node::start_connecting);
        }
        lock
    }

    /// The lock service a guard belongs to.
    pub(crate) fn from_shared(shared: Arc<LockShared>) -> MultiLock {
        MultiLock { shared }
    }

    /// What the lock's guards share (for unit tests of the layers below).
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Arc<LockShared> {
        &self.shared
    }

    /// The settings this lock runs with.
    pub fn config(&self) -> &LockConfig {
        &self.shared.config
    }

    /// The counters since this lock was created: attempts and their
    /// outcomes, extends, losses, releases, and each node's errors and
    /// timeouts. See [`LockStats`].
    pub fn stats(&self) -> LockStats {
        let nodes = self
            .shared
            .nodes
            .iter()
            .map(|n| n.counters.snapshot(n.name()))
            .collect();
        self.shared.counters.snapshot(nodes)
    }

    /// Connects to every node now, concurrently, and reports each node's
    /// result (in configuration order). Optional: acquires connect on demand.
    pub async fn warm_up(&self) -> Vec<Result<(), NodeError>> {
        join_all(self.shared.nodes.iter().map(|n| n.ensure_connected())).await
    }

    /// One attempt to take the lock named `key`.
    ///
    /// Returns the guard when the quorum was won with more than the minimum
    /// validity left, [`Error::Contended`] when other owners hold enough
    /// nodes, [`Error::QuorumNotReached`] when too few nodes answered "won",
    /// or [`Error::ValidityUsedUp`] when the win came too late. On every
    /// failure the attempt is rolled back: the release script goes to every
    /// node the attempt may have written to, queued behind the attempt's own
    /// request on that node's connection.
    ///
    /// Cancel safety: dropping the future before it completes leaks at most
    /// keys that expire by their TTL; no guard believes it holds them.
    pub async fn try_acquire(&self, key: &str) -> Result<LockGuard, Error> {
        self.acquire_request(
            Request::new(&[key], None)?,
            None,
            self.shared.config.watchdog,
        )
        .await
    }

    /// Takes the lock named `key`, retrying until it is won, the wait budget
    /// is spent, or the attempt limit is reached. The last attempt starts
    /// before the budget runs out, so the call can overrun it by at most one
    /// attempt (about one node timeout). Errors other than contention or a
    /// missed quorum are returned at once.
    ///
    /// Between attempts it waits for the holder's release: with
    /// [wake-ups](crate::LockConfigBuilder::wake_ups) on (the default) a
    /// release on any node wakes it at once; otherwise, or if the notice
    /// is lost, it sleeps for the holder's remaining TTL or the jittered
    /// backoff of the [`RetryPolicy`](crate::RetryPolicy), whichever is
    /// shorter. See [`crate::wake`].
    ///
    /// Cancel safety: as for [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self, key: &str, wait: Duration) -> Result<LockGuard, Error> {
        self.acquire_request(
            Request::new(&[key], None)?,
            Some(wait),
            self.shared.config.watchdog,
        )
        .await
    }

    /// One attempt to take several locks at once, all or nothing: one guard
    /// for all of them, with one validity, one watchdog and one release.
    ///
    /// Each node gets every name in one script call, in sorted order
    /// (duplicates are dropped), and takes all of them or none: a name held
    /// by another owner fails the whole attempt on that node, and the
    /// attempt is rolled back on every node like any failed acquire. So two
    /// clients locking overlapping sets never deadlock and never leave a
    /// partial hold behind.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// use quorumlock::{Error, LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).build()?);
    /// let transfer = lock.try_acquire_all(&["account:7", "account:3"]).await?;
    /// assert_eq!(transfer.keys().collect::<Vec<_>>(), ["account:3", "account:7"]);
    /// // One of the names is taken, so the whole set is refused.
    /// assert!(matches!(lock.try_acquire_all(&["account:3", "account:9"]).await, Err(Error::Contended { .. })));
    /// // ... and nothing of that attempt stays behind:
    /// lock.try_acquire("account:9").await?.release().await;
    /// transfer.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_all<S: AsRef<str>>(&self, keys: &[S]) -> Result<LockGuard, Error> {
        self.acquire_request(Request::new(keys, None)?, None, self.shared.config.watchdog)
            .await
    }

    /// [`try_acquire_all`](Self::try_acquire_all), retrying as
    /// [`acquire`](Self::acquire) does until the wait budget is spent.
    pub async fn acquire_all<S: AsRef<str>>(
        &self,
        keys: &[S],
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        self.acquire_request(
            Request::new(keys, None)?,
            Some(wait),
            self.shared.config.watchdog,
        )
        .await
    }

    /// Takes the lock named `key` as `owner` (waiting as
    /// [`acquire`](Self::acquire)). If `owner` holds it already, this is a
    /// re-entry: it succeeds while the other holds last, adds one hold to
    /// the count on the nodes, and the key stays until every hold is
    /// released. Otherwise it is a plain acquire under that owner's token.
    ///
    /// Use it where the holder's identity has to travel: to another process
    /// as [`Owner::token`], or into code that gets an [`Owner`] rather than
    /// the hold. Within one task tree, [`HeldLock::reenter`](crate::HeldLock::reenter) is simpler.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock, Owner};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).build()?);
    /// let owner = Owner::new();
    /// let outer = lock.acquire_as(&owner, "ledger", Duration::from_secs(1)).await?;
    /// // Elsewhere (another task, or a process given `owner.token()`):
    /// let same = Owner::from_token(owner.token())?;
    /// let inner = lock.acquire_as(&same, "ledger", Duration::ZERO).await?;
    /// assert!(inner.release().await.kept > 0, "the outer hold keeps the key");
    /// assert!(outer.is_held());
    /// outer.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_as(
        &self,
        owner: &Owner,
        key: &str,
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        let request = Request::new(&[key], Some(Arc::clone(owner.shared_token())))?;
        self.acquire_request(request, Some(wait), self.shared.config.watchdog)
            .await
    }

    /// [`acquire_all`](Self::acquire_all) as `owner`: re-enters the names
    /// `owner` holds, takes the others.
    pub async fn acquire_all_as<S: AsRef<str>>(
        &self,
        owner: &Owner,
        keys: &[S],
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        let request = Request::new(keys, Some(Arc::clone(owner.shared_token())))?;
        self.acquire_request(request, Some(wait), self.shared.config.watchdog)
            .await
    }

    /// Runs a request: one attempt (`wait: None`), or attempts until won or
    /// the budget is spent.
    pub(crate) async fn acquire_request(
        &self,
        request: Request,
        wait: Option<Duration>,
        watched: bool,
    ) -> Result<LockGuard, Error> {
        let Some(wait) = wait else {
            return self.attempt(&request, watched).await;
        };
        let began = Instant::now();
        let budget_end = began + wait;
        let retry = &self.shared.config.retry;
        let mut waiting = self
            .shared
            .wake
            .waiter(&request.keys, &self.shared.counters);
        let mut attempts = 0u32;
        let mut handed = None;
        // One name: a release by this lock service may take it for us.
        let next = || (request.keys.len() == 1).then(|| request.hold());
        if self.shared.wake.has_waiters(&request.keys) {
            // Others of this lock service wait for it already: queue behind
            // them (first come, first served) rather than barge in with an
            // attempt that would find the name taken or handed over.
            let backoff = retry.delay(1, rand::random::<f64>());
            if let Woken::HandedOver { hold, first, rest } =
                waiting.wait(None, backoff, budget_end, next()).await
            {
                handed = Some((hold, first, rest));
            }
        }
        loop {
            attempts += 1;
            // Marked before the attempt: a release announced while it runs
            // still wakes the wait after it.
            waiting.mark();
            let outcome = match handed.take() {
                Some((hold, first, rest)) => {
                    self.shared
                        .handed_over(&request, hold, first, rest, watched)
                        .await
                }
                None => self.attempt(&request, watched).await,
            };
            let error = match outcome {
                Ok(guard) => return Ok(guard),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let now = Instant::now();
            let out_of_attempts = retry.get_max_attempts().is_some_and(|max| attempts >= max);
            if out_of_attempts || now >= budget_end {
                return Err(Error::WaitBudgetExhausted {
                    key: request.keys.to_string(),
                    attempts,
                    waited: now - began,
                    last: Box::new(error),
                });
            }
            let backoff = retry.delay(attempts, rand::random::<f64>());
            match waiting
                .wait(Some(&error), backoff, budget_end, next())
                .await
            {
                Woken::Retry => {}
                Woken::HandedOver { hold, first, rest } => handed = Some((hold, first, rest)),
            }
        }
    }

    async fn attempt(&self, request: &Request, watched: bool) -> Result<LockGuard, Error> {
        let span = tracing::debug_span!(
            "acquire",
            key = %request.keys,
            nodes = self.shared.nodes.len(),
            won = Empty,
            elapsed_us = Empty,
            validity_ms = Empty,
        );
        self.shared.attempt(request, watched).instrument(span).await
    }
}

/// What to acquire: the names, and as whom.
pub(crate) struct Request {
    pub(crate) keys: Arc<KeySet>,
    /// The owner token; `None`: a fresh owner for every attempt.
    pub(crate) owner: Option<Arc<str>>,
    /// The fencing token cell to share (a re-entry through a hold).
    pub(crate) fence: Option<Arc<OnceCell<u64>>>,
}

impl Request {
    pub(crate) fn new<S: AsRef<str>>(
        keys: &[S],
        owner: Option<Arc<str>>,
    ) -> Result<Request, Error> {
        Ok(Request {
            keys: KeySet::new(keys)?,
            owner,
            fence: None,
        })
    }

    /// The hold one attempt tries to take: the owner's token (a fresh one
    /// for an anonymous request) and a fresh entry id, so that a late
    /// rollback of one attempt can never remove another attempt's hold.
    pub(crate) fn hold(&self) -> HoldId {
        let token = match &self.owner {
            Some(token) => Arc::clone(token),
            None => Arc::clone(Owner::new().shared_token()),
        };
        HoldId::new(Arc::clone(&self.keys), token)
    }
}

impl LockShared {
    /// One acquire attempt, following DESIGN.md "The acquire path".
    async fn attempt(
        self: &Arc<Self>,
        request: &Request,
        watched: bool,
    ) -> Result<LockGuard, Error> {
        let config = &self.config;
        let hold = request.hold();
        let ttl_ms = ttl_millis(config.ttl);
        bump(&self.counters.attempts);
        let mut round = quorum_round(
            self.nodes.len(),
            config.required_nodes(),
            config.node_timeout,
            |i| self.nodes[i].acquire(hold.clone(), ttl_ms),
            acquire_vote,
        )
        .await;
        self.conclude(request, hold, &mut round, watched, false)
            .await
    }

    /// The waiter's side of a handoff: tallies the answers a releasing
    /// guard forwards (its round started at the `Started` stamp, taken
    /// before the first request left) and concludes like an attempt.
    async fn handed_over(
        self: &Arc<Self>,
        request: &Request,
        hold: HoldId,
        first: Option<HandoffEvent>,
        mut rest: mpsc::UnboundedReceiver<HandoffEvent>,
        watched: bool,
    ) -> Result<LockGuard, Error> {
        let config = &self.config;
        let n = self.nodes.len();
        bump(&self.counters.attempts);
        // The releaser ends its round within the node timeout and says so;
        // the bound only guards against a stalled runtime.
        let give_up = Instant::now() + config.node_timeout * 2 + config.connect_timeout;
        let mut next = first;
        let mut receive = async || match next.take() {
            Some(event) => Some(event),
            None => tokio::time::timeout_at(give_up, rest.recv())
                .await
                .ok()
                .flatten(),
        };
        // The releaser sends its start stamp before anything else.
        let Some(HandoffEvent::Started(start)) = receive().await else {
            // Cannot happen; without a start no validity can be computed:
            // give back whatever may have been taken, never guess.
            let mut nothing: Vec<Option<Result<AcquireReply, NodeError>>> =
                (0..n).map(|_| None).collect();
            self.rollback(&hold, &nothing, true).await;
            return Err(Error::QuorumNotReached {
                key: hold.keys.to_string(),
                required: config.required_nodes(),
                won: 0,
                nodes: self.reports(&mut nothing, End::DeadlinePassed),
            });
        };
        let mut round = QuorumRound::new(n, config.required_nodes(), start);
        let end = loop {
            match receive().await {
                Some(HandoffEvent::Reply(i, reply)) => {
                    if round.record(i, reply, acquire_vote) {
                        break End::Decided;
                    }
                }
                Some(HandoffEvent::Ended(end)) => break end,
                Some(HandoffEvent::Started(_)) => {}
                None => break End::DeadlinePassed,
            }
        };
        round.finish(end);
        // Keep listening, so that the releaser never mistakes a decided
        // waiter for one that went away (and rolls its hold back).
        tokio::spawn(async move { while rest.recv().await.is_some() {} });
        bump(&self.counters.handed_over);
        self.conclude(request, hold, &mut round, watched, true)
            .await
    }

    /// Turns a decided acquire round into a guard, or rolls it back and
    /// says why not. `handoff`: the round came from a release's handoff;
    /// the name may be free after a rollback, so the rollback announces it.
    async fn conclude(
        self: &Arc<Self>,
        request: &Request,
        hold: HoldId,
        round: &mut QuorumRound<AcquireReply>,
        watched: bool,
        handoff: bool,
    ) -> Result<LockGuard, Error> {
        let config = &self.config;
        let key = &hold.keys;
        let (validity, deadline) = round.validity(config.ttl, config.drift_factor);
        let tally = round.tally;

        let span = tracing::Span::current();
        span.record("won", tally.won());
        span.record("elapsed_us", round.elapsed.as_micros() as u64);
        span.record("validity_ms", validity.as_millis() as u64);

        if round.won_with(config.ttl, config.drift_factor, config.min_validity) {
            tracing::debug!(won = tally.won(), ?validity, "acquired");
            bump(&self.counters.acquired);
            let fence_reads = round
                .replies
                .iter_mut()
                .map(|reply| match reply.take() {
                    Some(Ok(AcquireReply::Won { fences })) => Some(fences),
                    _ => None,
                })
                .collect();
            let fence = request.fence.clone().unwrap_or_default();
            return Ok(LockGuard::new(Lease::new(
                Arc::clone(self),
                hold,
                round.start,
                deadline,
                holds(&round.votes),
                watched,
                fence,
                fence_reads,
            )));
        }

        // Lost (or won too late): undo whatever the attempt may have written.
        self.rollback(&hold, &round.replies, handoff).await;

        if tally.decision() == Decision::Won {
            bump(&self.counters.validity_used_up);
            return Err(Error::ValidityUsedUp {
                key: key.to_string(),
                elapsed: round.elapsed,
                validity,
                min_validity: config.min_validity,
            });
        }
        let nodes = self.reports(&mut round.replies, round.end);
        if tally.lost_to_contention() {
            let mut pttls: Vec<Option<Duration>> = nodes
                .0
                .iter()
                .filter_map(|r| match r.outcome {
                    NodeOutcome::HeldByOther { pttl } => Some(pttl),
                    _ => None,
                })
                .collect();
            let live = self.nodes.len() - tally.failed();
            let free_in = quorum::free_in(live, tally.required(), &mut pttls);
            tracing::debug!(contended = tally.contended(), ?free_in, "contended");
            bump(&self.counters.contended);
            Err(Error::Contended {
                key: key.to_string(),
                free_in,
                nodes,
            })
        } else {
            tracing::debug!(
                won = tally.won(),
                required = tally.required(),
                "quorum not reached"
            );
            bump(&self.counters.quorum_not_reached);
            Err(Error::QuorumNotReached {
                key: key.to_string(),
                required: tally.required(),
                won: tally.won(),
                nodes,
            })
        }
    }

    /// Releases a failed attempt's token on every node it may have written
    /// to: all but those that answered "held by another" (the script writes
    /// nothing then). Nodes that answered are responsive: wait for their
    /// release (one round trip) so the next attempt finds them clean. Nodes
    /// that did not answer may still run our acquire later; their release is
    /// queued behind it and a background task sees it through.
    async fn rollback(
        &self,
        hold: &HoldId,
        replies: &[Option<Result<AcquireReply, NodeError>>],
        announce: bool,
    ) {
        // (node, whether it answered the acquire) for every node that may
        // hold our key: all but those that answered "held by another".
        let targets: Vec<(usize, bool)> = replies
            .iter()
            .enumerate()
            .filter(|(_, r)| !matches!(r, Some(Ok(AcquireReply::Held { .. }))))
            .map(|(i, r)| (i, r.is_some()))
            .collect();
        let mut awaited = targets.iter().filter(|(_, answered)| *answered).count();
        let deadline = if awaited == 0 {
            Instant::now()
        } else {
            Instant::now() + self.config.node_timeout
        };
        let (_, unfinished) = fan_out(
            targets.len(),
            deadline,
            |j| self.nodes[targets[j].0].release(hold.clone(), announce),
            |j, reply| {
                if let Err(error) = reply {
                    tracing::debug!(%error, "rollback failed on a node; its key expires by its TTL");
                }
                if targets[j].1 {
                    awaited -= 1;
                }
                awaited == 0
            },
        )
        .await;
        unfinished.finish_in_background(self.background_bound(), "rollback");
    }

    /// How long a release or rollback may go on in the background: long
    /// enough for a reconnect and one call.
    fn background_bound(&self) -> Duration {
        self.config.connect_timeout + self.config.node_timeout
    }

    /// Sends the release script to every node and waits for each answer up
    /// to the node timeout.
    pub(crate) async fn release_everywhere(&self, hold: &HoldId) -> ReleaseReport {
        // Only over connections that are up: a handoff call still waiting
        // for its connection could be sent after the waiter's rollback and
        // take the name for nobody (DESIGN.md rule 5). The waiter then
        // retries on the release notice instead.
        if self.nodes.iter().all(|n| n.is_connected())
            && let Some(next) = self.wake.take_handoff(&hold.keys)
        {
            // Stamped before anything is sent: the waiter's validity counts
            // from here.
            if next
                .events
                .send(HandoffEvent::Started(Stamp::now()))
                .is_ok()
            {
                return self.release_handing_over(hold, next).await;
            }
        }
        bump(&self.counters.released);
        let mut tally = ReleaseTally::new(self.nodes.len());
        let (end, unfinished) = fan_out_announcing(
            self.nodes.len(),
            Instant::now() + self.config.node_timeout,
            |i| self.nodes[i].release(hold.clone(), true),
            // Queued on every node: a waiter of this lock service may
            // attempt now, its requests run after the release.
            || self.wake.released(&hold.keys),
            |i, reply| {
                tally.record(i, reply);
                false
            },
        )
        .await;
        // A release must reach every node, also one slower than the deadline.
        unfinished.finish_in_background(self.background_bound(), "release");
        tally.finish(self, end)
    }

    /// [`release_everywhere`](Self::release_everywhere) that takes the name
    /// for the next waiter of this lock service in the same script call on
    /// each node, and forwards that waiter's part of each answer to it.
    async fn release_handing_over(&self, hold: &HoldId, next: Handoff) -> ReleaseReport {
        bump(&self.counters.released);
        bump(&self.counters.handoffs);
        let n = self.nodes.len();
        let ttl_ms = ttl_millis(self.config.ttl);
        let mut tally = ReleaseTally::new(n);
        let mut waiter_gone = false;
        let events = &next.events;
        let (end, unfinished) = fan_out(
            n,
            Instant::now() + self.config.node_timeout,
            |i| self.nodes[i].handoff(hold.clone(), next.hold.clone(), ttl_ms),
            |i, reply| {
                let (released, acquired) = match reply {
                    Ok((released, acquired)) => (Ok(released), Ok(acquired)),
                    Err(e) => (Err(e.clone()), Err(e)),
                };
                tally.record(i, released);
                waiter_gone |= events.send(HandoffEvent::Reply(i, acquired)).is_err();
                false
            },
        )
        .await;
        unfinished.finish_in_background(self.background_bound(), "release");
        waiter_gone |= events.send(HandoffEvent::Ended(end)).is_err();
        let report = tally.finish(self, end);
        if waiter_gone {
            // The waiter stopped waiting before it could decide (its future
            // was dropped): nobody owns what was taken for it. Give it back,
            // queued behind the handoff on every node, and announce it.
            let (_, unfinished) = fan_out(
                n,
                Instant::now(),
                |i| self.nodes[i].release(next.hold.clone(), true),
                |_, _| false,
            )
            .await;
            unfinished.finish_in_background(self.background_bound(), "handoff rollback");
        }
        report
    }

    /// Per-node outcomes for an error report of an acquire or extend round,
    /// counting the nodes that timed out.
    pub(crate) fn reports<T>(
        &self,
        replies: &mut [Option<Result<T, NodeError>>],
        end: End,
    ) -> NodeReports
    where
        T: Into<NodeOutcome>,
    {
        let deadline_passed = end == End::DeadlinePassed;
        if deadline_passed {
            for (node, _) in self
                .nodes
                .iter()
                .zip(&*replies)
                .filter(|(_, r)| r.is_none())
            {
                bump(&node.counters.timeouts);
            }
        }
        let outcomes = replies
            .iter_mut()
            .map(|reply| reply.take().map(|r| r.map(Into::into)));
        self.outcome_reports(outcomes, deadline_passed)
    }

    /// Per-node outcomes from each node's reply, in node order (`None`: no
    /// reply: a timeout if the round's deadline passed, otherwise not
    /// awaited because the round was decided first). Counts nothing.
    pub(crate) fn outcome_reports(
        &self,
        replies: impl IntoIterator<Item = Option<Result<NodeOutcome, NodeError>>>,
        deadline_passed: bool,
    ) -> NodeReports {
        let reports = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeReport {
                node: node.name().to_string(),
                outcome: match reply {
                    Some(Ok(outcome)) => outcome,
                    Some(Err(e)) => NodeOutcome::Failed(e),
                    None if deadline_passed => NodeOutcome::Failed(self.timeout_detail(node)),
                    None => NodeOutcome::NoReplyBeforeDecision,
                },
            })
            .collect();
        NodeReports(reports)
    }

    /// Per-node outcomes of a round decided by votes (a renewal, a fencing
    /// raise): won, not ours, or the node's error.
    pub(crate) fn vote_reports(
        &self,
        votes: &[Option<Vote>],
        errors: &[Option<NodeError>],
        deadline_passed: bool,
    ) -> NodeReports {
        let replies = votes.iter().zip(errors).map(|(vote, error)| match vote {
            Some(Vote::Won) => Some(Ok(NodeOutcome::Won)),
            Some(Vote::Contended) => Some(Ok(NodeOutcome::NotHeld)),
            // A failed vote always comes with its node's error.
            Some(Vote::Failed) => error.clone().map(Err),
            None => None,
        });
        self.outcome_reports(replies, deadline_passed)
    }

    fn timeout_error(&self, node: &Node) -> NodeError {
        bump(&node.counters.timeouts);
        self.timeout_detail(node)
    }

    /// A timeout error for `node`, without counting it.
    fn timeout_detail(&self, node: &Node) -> NodeError {
        NodeError::new(
            node.name(),
            NodeErrorKind::Timeout,
            format!(
                "no reply within the node timeout of {:?}",
                self.config.node_timeout
            ),
        )
    }
}

impl From<AcquireReply> for NodeOutcome {
    fn from(reply: AcquireReply) -> NodeOutcome {
        match reply {
            AcquireReply::Won { .. } => NodeOutcome::Won,
            AcquireReply::Held { pttl } => NodeOutcome::HeldByOther { pttl },
        }
    }
}

/// A release round's answers, counted into its report.
struct ReleaseTally {
    report: ReleaseReport,
    answered: Vec<bool>,
}

impl ReleaseTally {
    fn new(n: usize) -> ReleaseTally {
        ReleaseTally {
            report: ReleaseReport {
                released: 0,
                kept: 0,
                not_held: 0,
                failed: Vec::new(),
                was_held: false,
            },
            answered: vec![false; n],
        }
    }

    fn record(&mut self, i: usize, reply: Result<ReleaseReply, NodeError>) {
        self.answered[i] = true;
        let report = &mut self.report;
        match reply {
            Ok(ReleaseReply::Freed) => report.released += 1,
            Ok(ReleaseReply::Kept) => {
                report.released += 1;
                report.kept += 1;
            }
            Ok(ReleaseReply::NotOurs) => report.not_held += 1,
            Err(e) => report.failed.push(e),
        }
    }

    /// The report; nodes that did not answer by the deadline count as
    /// timed out.
    fn finish(mut self, lock: &LockShared, end: End) -> ReleaseReport {
        if end == End::DeadlinePassed {
            for (node, _) in lock.nodes.iter().zip(&self.answered).filter(|(_, a)| !**a) {
                self.report.failed.push(lock.timeout_error(node));
            }
        }
        self.report
    }
}

/// How an acquire's answer counts for the quorum.
fn acquire_vote(reply: &AcquireReply) -> Vote {
    match reply {
        AcquireReply::Won { .. } => Vote::Won,
        AcquireReply::Held { .. } => Vote::Contended,
    }
}

/// The TTL in whole milliseconds for `PX`/`PEXPIRE` (validated to fit).
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}
