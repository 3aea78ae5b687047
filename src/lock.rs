//! [`MultiLock`]: one lock service over N independent Redis masters.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::acquire::Request;
use crate::clock::instant_in;
use crate::config::LockConfig;
use crate::core::Core;
use crate::error::{Error, NodeError};
use crate::guard::{LockGuard, Services};
use crate::keys::{KeySet, Ticket};
use crate::node::Node;
use crate::owner::Owner;
use crate::release;
use crate::stats::LockStats;
use crate::telemetry::{self, Outcome};
use crate::wait::Wait;
use crate::wake::Woken;

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
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// use std::time::Duration;
/// use quorumlock::{LockConfig, MultiLock, Wait};
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).ttl(Duration::from_secs(10)).build()?);
/// let guard = lock.acquire("nightly-report", Wait::up_to(Duration::from_secs(2))).await?;
/// assert!(guard.is_held());
/// // ... work that must not run twice at once, within guard.validity() ...
/// let report = guard.release().await;
/// assert!(report.was_held);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    services: Arc<Services>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = &self.services.core;
        let nodes: Vec<&str> = core.nodes.iter().map(|n| &**n.name()).collect();
        f.debug_struct("MultiLock")
            .field("nodes", &nodes)
            .field("quorum", &core.config.quorum)
            .field("ttl", &core.config.ttl)
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
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// // Clones share the connections, the watchdog and the counters.
    /// let shared = lock.clone();
    /// shared.try_acquire("job").await?.release().await;
    /// assert_eq!(lock.stats().acquired, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(config: LockConfig) -> MultiLock {
        let lock = MultiLock {
            services: Arc::new(Services::new(Core::new(config))),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            lock.services
                .core
                .nodes
                .iter()
                .for_each(Node::start_connecting);
        }
        lock
    }

    /// The settings this lock runs with.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:6379").ttl(Duration::from_secs(5)).build()?);
    /// assert_eq!(lock.config().ttl(), Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn config(&self) -> &LockConfig {
        &self.services.core.config
    }

    /// The counters since this lock was created: attempts and their
    /// outcomes, extends, losses, releases, and each node's errors and
    /// timeouts. See [`LockStats`].
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let guard = lock.try_acquire("job").await?;
    /// assert!(lock.try_acquire("job").await.is_err());
    /// guard.release().await;
    /// let stats = lock.stats();
    /// assert_eq!((stats.attempts, stats.acquired, stats.contended), (2, 1, 1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> LockStats {
        self.services.core.stats()
    }

    /// Waits until the work this lock service goes on with in the
    /// background has ended, or `within` has passed; returns how many
    /// pieces were still running then (0: all done).
    ///
    /// A release, rollback or guard drop never makes its caller wait for a
    /// slow node beyond the node timeout: what is not answered by then
    /// goes on in a task of its own until the node answers (or, for a node
    /// that cannot be reached, until the key's TTL). A Tokio runtime that
    /// shuts down cancels those tasks, and their keys then stay until
    /// their TTL. **Call this before a program's runtime ends** (before
    /// `main` returns, say): on a busy machine a node that is perfectly
    /// fine can answer after the node timeout.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// lock.try_acquire("nightly").await?.release().await;
    /// // The last thing before main returns.
    /// let unfinished = lock.settle(Duration::from_secs(2)).await;
    /// assert_eq!(unfinished, 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits. The background work goes on whether
    /// this future is dropped or not.
    pub async fn settle(&self, within: Duration) -> usize {
        self.services.core.background.settle(within).await
    }

    /// Connects to every node now, concurrently, and reports each node's
    /// result (in configuration order). Optional: acquires connect on demand.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// // At start-up: fail fast if a node is unreachable or misconfigured.
    /// for (url, connected) in lock.config().node_urls().zip(lock.warm_up().await) {
    ///     connected.map_err(|e| format!("{url}: {e}"))?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops waiting; connects already started finish
    /// in the background and are kept for the next operation.
    pub async fn warm_up(&self) -> Vec<Result<(), NodeError>> {
        join_all(
            self.services
                .core
                .nodes
                .iter()
                .map(|n| n.ensure_connected()),
        )
        .await
    }

    /// Adopts brand-new, empty nodes at once: an operator's word that each
    /// node is new (or part of a new deployment) and holds nothing, so it
    /// votes without waiting out the
    /// [quarantine](crate::LockConfigBuilder::quarantine). Reports each
    /// node's result in configuration order: a node that holds any key is
    /// refused with [`NodeErrorKind::NotEmpty`](crate::NodeErrorKind::NotEmpty)
    /// (it may hold locks or fencing counters of an earlier life) and
    /// keeps its quarantine.
    ///
    /// Not needed for servers that have been running for longer than the
    /// quarantine and were never promoted: they are dated from their start.
    ///
    /// **Only for a server that has never held this deployment's locks.**
    /// A node that restarted empty, or a fresh server replacing a failed
    /// one, is empty too, and adopting it breaks mutual exclusion (a lock
    /// it lost is still held on the other nodes) and fencing (its lost
    /// counters would count as never written): let the quarantine run out
    /// instead. The node cannot tell the two apart; this is the operator's
    /// word. (The exhaustive model in the crate's tests finds both
    /// breaks.)
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start_unadopted(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// // Three servers just started for a new deployment.
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// assert!(lock.adopt_empty_nodes().await.iter().all(Result::is_ok));
    /// lock.try_acquire("first-job").await?.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave some nodes adopted and others not;
    /// calling it again is harmless for the adopted ones (still empty).
    pub async fn adopt_empty_nodes(&self) -> Vec<Result<(), NodeError>> {
        let core = &self.services.core;
        // Bounded like every call: a paused node must not hang start-up.
        let bound = core.background_bound();
        join_all(core.nodes.iter().map(|n| async move {
            tokio::time::timeout(bound, n.adopt())
                .await
                .unwrap_or_else(|_| Err(core.timeout_error(n)))
        }))
        .await
    }

    /// An operator's release of `name`, whatever its owner (Redisson's
    /// `forceUnlock`): deletes the lock key on every node, announces the
    /// release to waiters, and ends at once the guards of this lock service
    /// that hold it ([`LostReason::ForceReleased`](crate::LostReason::ForceReleased)).
    /// Logged at warn level. Returns, per node, whether a key was there.
    ///
    /// A name in the reserved `quorumlock:` namespace is refused with
    /// [`Error::InvalidKey`] naming it, and nothing is sent: such a name is
    /// never a lock, and deleting the key it names would do harm
    /// (`quorumlock:epoch` is each node's epoch marker: without it every
    /// node refuses to vote for the quarantine, which takes every lock of
    /// the deployment down).
    ///
    /// Every node also keeps a marker, `quorumlock:forced:<name>`, for the
    /// longer of the TTL and the quarantine (the longest TTL any client
    /// uses), so that no renewal re-takes the key: a holder in another
    /// process with the watchdog learns it at its next renewal, and is
    /// declared lost before its deadline. A holder without the watchdog
    /// cannot be told; it believes it holds until its validity ends, which
    /// is what fencing tokens are for. Anyone may take the name at once.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{Error, LockConfig, LostReason, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?);
    /// let stuck = lock.try_acquire("nightly").await?;
    /// let found = lock.force_release("nightly").await?;
    /// assert!(found.iter().filter(|r| matches!(r, Ok(true))).count() >= 2);
    /// assert_eq!(stuck.lost().await.reason, LostReason::ForceReleased);
    /// lock.try_acquire("nightly").await?.release().await;
    ///
    /// // A typo that names the epoch marker is refused, naming the name.
    /// match lock.force_release("quorumlock:epoch").await {
    ///     Err(Error::InvalidKey { key, .. }) => assert_eq!(key, "quorumlock:epoch"),
    ///     other => panic!("expected a refusal, got {other:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the name released on some nodes and
    /// not others; calling it again finishes the job. A node that does not
    /// answer within the node timeout is reported as failed
    /// ([`NodeErrorKind::Timeout`](crate::NodeErrorKind::Timeout)); its call
    /// goes on in the background for a while.
    pub async fn force_release(&self, name: &str) -> Result<Vec<Result<bool, NodeError>>, Error> {
        crate::keys::check_name(name)?;
        let core = &self.services.core;
        let marker = core.config.ttl.max(core.config.quarantine);
        let marker_ms = crate::core::ttl_millis(marker).max(1);
        let local = self
            .services
            .watchdog
            .end_holders_of(name, &crate::LostReason::ForceReleased);
        let results = crate::release::force_release(core, name, marker_ms).await;
        let found = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let failed = results.iter().filter(|r| r.is_err()).count();
        tracing::warn!(
            key = name,
            found,
            failed,
            local,
            "force-released by an operator"
        );
        Ok(results)
    }

    /// [`try_acquire`](Self::try_acquire) with this guard's own TTL or
    /// watchdog setting ([`GuardOptions`](crate::GuardOptions)).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{GuardOptions, LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let brief = GuardOptions::default().ttl(Duration::from_secs(3));
    /// let guard = lock.try_acquire_with("report", &brief).await?;
    /// assert!(guard.validity() <= Duration::from_secs(3));
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_with(
        &self,
        key: &str,
        options: &crate::GuardOptions,
    ) -> Result<LockGuard, Error> {
        self.acquire_request(self.request_with(&[key], options)?, None)
            .await
    }

    /// [`acquire`](Self::acquire) with this guard's own TTL or watchdog
    /// setting ([`GuardOptions`](crate::GuardOptions)). A waiter with its
    /// own TTL is never handed the name by a release of this lock service
    /// (that hands over with the lock's TTL); it takes its turn by an
    /// attempt on the release notice.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{GuardOptions, LockConfig, MultiLock, Wait};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// // The lock's guards have no watchdog; this one is renewed while it works.
    /// let watched = GuardOptions::default().watchdog(true);
    /// let guard = lock.acquire_with("migration", Wait::up_to(Duration::from_secs(1)), &watched).await?;
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_with(
        &self,
        key: &str,
        wait: Wait,
        options: &crate::GuardOptions,
    ) -> Result<LockGuard, Error> {
        self.acquire_request(self.request_with(&[key], options)?, Some(wait.budget()))
            .await
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
    /// The first acquire of a new `MultiLock` (of any form) first waits
    /// until every node's first connect has ended, made or failed, each
    /// within the [connect timeout](crate::LockConfigBuilder::connect_timeout):
    /// a connect loads the scripts and dates the node's epoch, which a busy
    /// machine may not fit in one node timeout. Call
    /// [`warm_up`](Self::warm_up) at start-up to pay it there.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{Error, LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let guard = lock.try_acquire("stock:42").await?;
    /// // Held: a second attempt, from any owner, is refused at once.
    /// assert!(matches!(lock.try_acquire("stock:42").await, Err(Error::Contended { .. })));
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves no guard, and what
    /// the attempt wrote is rolled back in a task of its own, like any
    /// rollback (it waits for a paused node, and is sent again to a node
    /// that was down, until the key's TTL). Without a Tokio runtime left to
    /// run it, the keys expire by their TTL.
    pub async fn try_acquire(&self, key: &str) -> Result<LockGuard, Error> {
        self.acquire_request(self.request(&[key], None)?, None)
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
    /// shorter. See [`crate::wake`]. In a
    /// [fair](crate::LockConfigBuilder::fair) lock service it also queues
    /// for the name across processes and gets it in turn.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{Error, LockConfig, MultiLock, Wait};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let first = lock.acquire("nightly", Wait::up_to(Duration::from_secs(1))).await?;
    /// // The name is taken: this waits up to 100 ms, then gives up.
    /// match lock.acquire("nightly", Wait::up_to(Duration::from_millis(100))).await {
    ///     Err(Error::WaitBudgetExhausted { attempts, .. }) => assert!(attempts >= 1),
    ///     other => panic!("expected to give up, got {other:?}"),
    /// }
    /// first.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`try_acquire`](Self::try_acquire). A wait dropped while it
    /// queues or sleeps leaves the queue and withdraws its handoff offer; a
    /// handoff already under way for it is rolled back by the releaser. A
    /// fair waiter's places in the nodes' waiter queues are given up by a
    /// background task (or lapse, without a runtime).
    pub async fn acquire(&self, key: &str, wait: Wait) -> Result<LockGuard, Error> {
        self.acquire_request(self.request(&[key], None)?, Some(wait.budget()))
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
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{Error, LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
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
    /// # Cancel safety
    ///
    /// As for [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_all<S: AsRef<str>>(&self, keys: &[S]) -> Result<LockGuard, Error> {
        self.acquire_request(self.request(keys, None)?, None).await
    }

    /// [`try_acquire_all`](Self::try_acquire_all), retrying as
    /// [`acquire`](Self::acquire) does until the wait budget is spent.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock, Wait};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let both = lock
    ///     .acquire_all(&["warehouse:a", "warehouse:b"], Wait::up_to(Duration::from_secs(1)))
    ///     .await?;
    /// assert_eq!(both.keys().count(), 2);
    /// both.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_all<S: AsRef<str>>(
        &self,
        keys: &[S],
        wait: Wait,
    ) -> Result<LockGuard, Error> {
        self.acquire_request(self.request(keys, None)?, Some(wait.budget()))
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
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock, Owner, Wait};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let owner = Owner::new();
    /// let outer = lock.acquire_as(&owner, "ledger", Wait::up_to(Duration::from_secs(1))).await?;
    /// // Elsewhere (another task, or a process given `owner.token()`):
    /// let same = Owner::from_token(owner.token())?;
    /// let inner = lock.acquire_as(&same, "ledger", Wait::NONE).await?;
    /// assert!(inner.release().await.kept > 0, "the outer hold keeps the key");
    /// assert!(outer.is_held());
    /// outer.release().await;
    /// # Ok(())
    /// # }
    /// ```
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_as(
        &self,
        owner: &Owner,
        key: &str,
        wait: Wait,
    ) -> Result<LockGuard, Error> {
        self.acquire_request(
            self.request(&[key], Some(Arc::clone(owner.shared_token())))?,
            Some(wait.budget()),
        )
        .await
    }

    /// [`acquire_all`](Self::acquire_all) as `owner`: re-enters the names
    /// `owner` holds, takes the others.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock, Owner, Wait};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let owner = Owner::new();
    /// let one = lock.acquire_as(&owner, "account:3", Wait::up_to(Duration::from_secs(1))).await?;
    /// // Re-enters account:3 (the same owner), takes account:7.
    /// let both = lock
    ///     .acquire_all_as(&owner, &["account:3", "account:7"], Wait::up_to(Duration::from_secs(1)))
    ///     .await?;
    /// both.release().await;
    /// assert!(one.is_held(), "the first hold keeps account:3");
    /// one.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_all_as<S: AsRef<str>>(
        &self,
        owner: &Owner,
        keys: &[S],
        wait: Wait,
    ) -> Result<LockGuard, Error> {
        self.acquire_request(
            self.request(keys, Some(Arc::clone(owner.shared_token())))?,
            Some(wait.budget()),
        )
        .await
    }

    /// A request for `keys` as `owner` (`None`: a fresh owner per
    /// attempt), renewed by the watchdog if the settings say so.
    fn request<S: AsRef<str>>(
        &self,
        keys: &[S],
        owner: Option<Arc<str>>,
    ) -> Result<Request, Error> {
        let config = &self.services.core.config;
        Request::new(keys, owner, (config.watchdog, config.ttl))
    }

    fn request_with(&self, keys: &[&str], options: &crate::GuardOptions) -> Result<Request, Error> {
        let how = options.resolve(&self.services.core.config)?;
        Request::new(keys, None, how)
    }

    /// Runs a request: one attempt (`wait: None`), or attempts until won or
    /// the budget is spent, waiting between attempts for a release notice,
    /// a handoff, the holder's remaining TTL or the backoff.
    pub(crate) async fn acquire_request(
        &self,
        mut request: Request,
        wait: Option<Duration>,
    ) -> Result<LockGuard, Error> {
        let config = &self.services.core.config;
        request.waits = wait.is_some() && config.wake_ups;
        // A waiter of a fair lock service also queues for the name: a free
        // name goes to the longest waiting call first.
        request.ticket = (request.waits && config.fair).then(|| self.services.wake.ticket());
        let span = tracing::debug_span!(
            "acquire",
            key = %request.keys,
            wait_ms = wait.map(|w| w.as_millis() as u64),
            attempts = Empty,
            elapsed_us = Empty,
            waited_us = Empty,
        );
        let began = Instant::now();
        let mut waited = Duration::ZERO;
        self.services.core.first_connects().await;
        let outcome = self
            .attempts(&request, wait, &mut waited)
            .instrument(span.clone())
            .await;
        let took = began.elapsed();
        span.record("elapsed_us", took.as_micros() as u64);
        span.record("waited_us", waited.as_micros() as u64);
        telemetry::acquire(Outcome::of(&outcome), took, waited);
        outcome
    }

    /// The attempts of one acquire call, adding the time spent waiting
    /// between them to `waited`.
    async fn attempts(
        &self,
        request: &Request,
        wait: Option<Duration>,
        waited: &mut Duration,
    ) -> Result<LockGuard, Error> {
        let services = &self.services;
        let Some(wait) = wait else {
            tracing::Span::current().record("attempts", 1);
            return services.attempt(request).await;
        };
        // Every attempt may take a place in the names' waiter queues: given
        // up when this call ends without the lock, or is dropped.
        let mut place = QueuePlace {
            services,
            keys: &request.keys,
            ticket: request.ticket.as_ref(),
        };
        let outcome = self.attempts_until(request, instant_in(wait), waited).await;
        match &outcome {
            // The guard's release gives up what is left of its places.
            Ok(_) => place.ticket = None,
            Err(_) => place.leave().await,
        }
        outcome
    }

    /// Attempts until one wins, one fails for good, or the budget ending
    /// at `budget_end` (or the attempt limit) is spent.
    async fn attempts_until(
        &self,
        request: &Request,
        budget_end: Instant,
        waited: &mut Duration,
    ) -> Result<LockGuard, Error> {
        let services = &self.services;
        let began = Instant::now();
        let retry = &services.core.config.retry;
        let queue_id = request.ticket.as_ref().map(|t| Arc::clone(&t.id));
        let mut waiting = services
            .wake
            .waiter(&request.keys, &services.core.counters, queue_id);
        let mut attempts = 0u32;
        let queued = request.ticket.is_some();
        // One name: a release by this lock service may take it for us.
        // A release hands the name over with the lock's TTL: an acquire
        // with a TTL of its own takes its turn by an attempt instead.
        let handoff = request.keys.len() == 1 && request.ttl == services.core.config.ttl;
        let next = || handoff.then(|| request.entry(services.core.nodes.len()));
        // Others of this lock service wait for it already: queue behind
        // them (first come, first served) rather than barge in with an
        // attempt that would find the name taken or handed over.
        let mut woken = Woken::Retry;
        if services.wake.has_waiters(&request.keys) {
            let backoff = retry.delay(1, rand::random::<f64>());
            let wait = waiting.wait(None, backoff, budget_end, next(), true, None);
            woken = timed(waited, wait).await;
        }
        // Lost to contention last time: the next attempt goes through the
        // gate, so that waiters woken together do not split the nodes.
        let mut contended = false;
        loop {
            attempts += 1;
            // Marked before the attempt: a release announced while it runs
            // still wakes the wait after it.
            waiting.mark();
            // A queued waiter woken by its own notice is first in line: no
            // herd to turn away at a gate.
            let gated = contended && !(queued && waiting.woke_on_notice());
            let outcome = match woken {
                Woken::HandedOver { entry, first, rest } => {
                    services.handed_over(request, entry, first, rest).await
                }
                Woken::Retry if gated => services.attempt_gated(request).await,
                Woken::Retry => services.attempt(request).await,
            };
            tracing::Span::current().record("attempts", attempts);
            let error = match outcome {
                Err(e) if e.is_retryable() => e,
                done => return done,
            };
            contended = matches!(error, Error::Contended { .. });
            let now = Instant::now();
            let out_of_attempts = retry.max_attempts().is_some_and(|max| attempts >= max);
            if out_of_attempts || now >= budget_end {
                return Err(Error::WaitBudgetExhausted {
                    key: request.keys.to_string(),
                    attempts,
                    waited: now - began,
                    last: Box::new(error),
                });
            }
            let backoff = retry.delay(attempts, rand::random::<f64>());
            // Lost a race that a release notice started: sit one release
            // notice out (see `Waiter::wait`). Not a queued waiter: the next
            // notice that names it is its turn.
            let listen = queued || !(contended && waiting.woke_on_gate_notice());
            // The next attempt asks the gate first. Refused there after a
            // wake on other nodes' notices, it met a release on its way to
            // the gate, not a lost race: it keeps listening.
            let gate = if contended { services.gate() } else { None };
            let wait = waiting.wait(Some(&error), backoff, budget_end, next(), listen, gate);
            woken = timed(waited, wait).await;
        }
    }
}

/// Runs `wait`, adding the time it took to `waited`.
async fn timed<T>(waited: &mut Duration, wait: impl std::future::Future<Output = T>) -> T {
    let pause = Instant::now();
    let out = wait.await;
    *waited += pause.elapsed();
    out
}

/// A waiting acquire call's places in the waiter queues of its names,
/// given up when the call ends without the lock: at once when it returns
/// an error, in the background when its future is dropped.
struct QueuePlace<'a> {
    services: &'a Arc<Services>,
    keys: &'a Arc<KeySet>,
    /// `None` once given up (or handed to a guard).
    ticket: Option<&'a Ticket>,
}

impl QueuePlace<'_> {
    /// Gives the places up on every node that answers in time.
    async fn leave(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            release::leave_queues(&self.services.core, self.keys, ticket).await;
        }
    }
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            release::leave_queues_in_background(&self.services.core, self.keys, ticket);
        }
    }
}
