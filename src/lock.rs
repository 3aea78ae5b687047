//! [`MultiLock`]: one lock service over N independent Redis masters.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;

use crate::acquire::Request;
use crate::call;
use crate::config::{GuardOptions, LockConfig};
use crate::core::Core;
use crate::error::{Error, LostReason, NodeError};
use crate::guard::{HeldLock, LockGuard};
use crate::node::Node;
use crate::owner::Owner;
use crate::services::Services;
use crate::stats::LockStats;
use crate::wait::Wait;

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
    /// use quorumlock::{LockConfig, MultiLock, Wait};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let wait = Wait::up_to(Duration::from_secs(2));
    /// lock.acquire("nightly", wait).await?.release().await;
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
    /// that hold it ([`LostReason::ForceReleased`](LostReason::ForceReleased)).
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
            .end_holders_of(name, &LostReason::ForceReleased);
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
    /// watchdog setting ([`GuardOptions`](GuardOptions)).
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
        options: &GuardOptions,
    ) -> Result<LockGuard, Error> {
        call::acquire(&self.services, self.request_with(&[key], options)?, None).await
    }

    /// [`acquire`](Self::acquire) with this guard's own TTL or watchdog
    /// setting ([`GuardOptions`](GuardOptions)). A waiter with its
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
        options: &GuardOptions,
    ) -> Result<LockGuard, Error> {
        call::acquire(
            &self.services,
            self.request_with(&[key], options)?,
            Some(wait.budget()),
        )
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
        call::acquire(&self.services, self.request(&[key], None)?, None).await
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
    /// shorter. It takes a place in the name's waiter queues, so that a
    /// release wakes the longest waiting call alone. See [`crate::wake`].
    /// In a [fair](crate::LockConfigBuilder::fair) lock service its place
    /// also refuses the name to the waiters behind it: it gets the name in
    /// turn.
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
    /// handoff already under way for it is rolled back by the releaser. Its
    /// places in the nodes' waiter queues are given up by a background task
    /// (or lapse, without a runtime).
    pub async fn acquire(&self, key: &str, wait: Wait) -> Result<LockGuard, Error> {
        call::acquire(
            &self.services,
            self.request(&[key], None)?,
            Some(wait.budget()),
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
        call::acquire(&self.services, self.request(keys, None)?, None).await
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
        call::acquire(
            &self.services,
            self.request(keys, None)?,
            Some(wait.budget()),
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
        call::acquire(
            &self.services,
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
        call::acquire(
            &self.services,
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

    fn request_with(&self, keys: &[&str], options: &GuardOptions) -> Result<Request, Error> {
        let how = options.resolve(&self.services.core.config)?;
        Request::new(keys, None, how)
    }

    /// Takes the lock named `key` (waiting up to `wait`, as
    /// [`acquire`](Self::acquire)), runs `work` while the
    /// [watchdog](crate::watchdog) keeps the lock alive, and releases it.
    ///
    /// * The work gets a [`HeldLock`] to check [`is_held`](HeldLock::is_held)
    ///   or hand the [cancellation token](HeldLock::cancellation_token) on.
    /// * If the lock is lost while the work runs, the work's future is
    ///   dropped at once (it is cancelled at its current `.await`) and the
    ///   call returns [`Error::Lost`]. If the work and the loss are ready at
    ///   the same moment, the loss wins: a result is only returned when the
    ///   lock was held until the work finished.
    /// * The lock is released in every case: the work returned, the lock
    ///   was lost, or the work panicked (the panic is then resumed after the
    ///   release). If this future itself is dropped, the guard's drop
    ///   releases in the background.
    /// * [`LockConfigBuilder::max_hold`](crate::LockConfigBuilder::max_hold)
    ///   bounds how long the watchdog renews: work that runs longer is
    ///   cancelled with [`LostReason::MaxHoldReached`](LostReason::MaxHoldReached).
    ///
    /// A work that returns a `Result` gives `Result<Result<T, E>, Error>`:
    /// the outer error is the lock's, the inner one the work's.
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
    /// let total = lock
    ///     .run_exclusive("nightly-job", Wait::up_to(Duration::from_secs(1)), |held| async move {
    ///         assert!(held.is_held() && held.is_watched());
    ///         // ... the work that must never run twice at once ...
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// // Released afterwards: the next caller gets it at once.
    /// lock.try_acquire("nightly-job").await?.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work (at its current `.await`) and
    /// the guard, whose drop releases the lock in the background; while
    /// the acquire is still waiting, as for
    /// [`acquire`](Self::acquire).
    pub async fn run_exclusive<F, Fut, T>(&self, key: &str, wait: Wait, work: F) -> Result<T, Error>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let request = Request::new(&[key], None, (true, self.config().ttl()))?;
        let guard = call::acquire(&self.services, request, Some(wait.budget())).await?;
        run_holding(guard, key, work).await
    }

    /// The lock service's shared parts, for the primitives built on it
    /// (semaphores, read-write locks).
    pub(crate) fn services(&self) -> &Arc<Services> {
        &self.services
    }
}

/// Runs `work` while `guard` is held (watched), cancels it at a loss, and
/// releases: the body of [`MultiLock::run_exclusive`] and its
/// semaphore and read-write namesakes. `key`: the name errors give.
pub(crate) async fn run_holding<F, Fut, T>(guard: LockGuard, key: &str, work: F) -> Result<T, Error>
where
    F: FnOnce(HeldLock) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = guard.lost();
    let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| work(guard.handle()))) {
        Ok(work) => {
            let work = AssertUnwindSafe(work).catch_unwind();
            tokio::select! {
                biased;
                notice = lost => Err(notice),
                done = work => Ok(done),
            }
        }
        Err(panic) => Ok(Err(panic)),
    };
    // The work's future is gone by now (finished or dropped): release.
    let report = guard.release().await;
    tracing::debug!(
        key,
        released = report.released,
        was_held = report.was_held,
        "run_exclusive done"
    );
    match outcome {
        Err(notice) => Err(Error::Lost {
            key: key.to_string(),
            reason: notice.reason,
        }),
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Ok(Ok(value)) => Ok(value),
    }
}
