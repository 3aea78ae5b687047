//! The handles to a held lock: [`LockGuard`] (extend, release) and the
//! read-only [`HeldLock`] view it hands to the work it protects.
//!
//! A handle carries the lease (the held lock's state) and the lock
//! service's [`Services`]: the core, the watchdog and the wake-ups. Nothing
//! below this layer refers back to a handle or to the service, so the only
//! references that keep a lock service's connections open are its
//! [`MultiLock`](crate::MultiLock) clones and its live handles.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::acquire::{self, Request};
use crate::clock::Stamp;
use crate::config;
use crate::core::ttl_millis;
use crate::error::{Error, LostReason};
use crate::fanout::quorum_round;
use crate::fence;
use crate::lease::{Flight, Hold, Lease, LossNotice, Recorded, Renewal, Win};
use crate::owner::Owner;
use crate::release::{self, ReleaseReport};
use crate::scripts::extend::Extend;
use crate::services::Services;
use crate::stats::bump;
use crate::telemetry;
use crate::watchdog::Watchdog;

/// A read-only, cloneable view of a held lock: hand it to the work the lock
/// protects so it can check [`is_held`](Self::is_held), stop on
/// [`lost`](Self::lost), or pass the [cancellation
/// token](Self::cancellation_token) further down. It cannot release the
/// lock; the [`LockGuard`] (or
/// [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive)) does.
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
/// let guard = lock.try_acquire("invoice:7").await?;
/// let held = guard.handle();
/// let worker = tokio::spawn(async move {
///     // ... work, checking held.is_held() before each irreversible step ...
///     held.is_held()
/// });
/// assert!(worker.await?);
/// guard.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct HeldLock {
    pub(crate) lease: Arc<Lease>,
    pub(crate) services: Arc<Services>,
}

impl fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLock")
            .field("keys", &self.lease.entry.keys)
            .field("is_held", &self.is_held())
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl HeldLock {
    /// The lock name; for a lock on several names, the first of them in
    /// sorted order (see [`keys`](Self::keys)).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let guard = lock.try_acquire_all(&["b", "a"]).await?;
    /// assert_eq!(guard.key(), "a", "the first in sorted order");
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        self.lease.entry.keys.first()
    }

    /// Every lock name this hold covers, sorted (one for a plain lock).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let guard = lock.try_acquire_all(&["b", "a"]).await?;
    /// assert_eq!(guard.keys().collect::<Vec<_>>(), ["a", "b"]);
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.lease.entry.keys.names().iter().map(|n| &**n)
    }

    /// This holder's owner token (32 hex digits: a UUID v4, 122 random
    /// bits), stored under the key on every node it holds. Holds of one
    /// [`owner`](Self::owner) share it.
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
    /// assert_eq!(guard.token(), guard.owner().token());
    /// assert_eq!(guard.token().len(), 32);
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn token(&self) -> &str {
        &self.lease.entry.token
    }

    /// Who holds this lock: pass it to code (or, as its token, to another
    /// process) that should re-enter the lock as the same holder with
    /// [`MultiLock::acquire_as`](crate::MultiLock::acquire_as).
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
    /// // The owner re-enters from anywhere it is passed to.
    /// let again = lock.acquire_as(&guard.owner(), "job", quorumlock::Wait::NONE).await?;
    /// again.release().await;
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        Owner::from_shared(Arc::clone(&self.lease.entry.token))
    }

    /// Whether the lock is still provably ours: it was not found lost or
    /// released and the validity deadline has not passed. Derived from the
    /// same deadline as [`validity`](Self::validity) and
    /// [`lost`](Self::lost), so they never disagree.
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
    /// assert!(guard.is_held());
    /// let held = guard.handle();
    /// guard.release().await;
    /// assert!(!held.is_held());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Time left until the validity deadline (zero once it has passed).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let config = LockConfig::builder().nodes(nodes).ttl(Duration::from_secs(10)).build()?;
    /// let lock = MultiLock::new(config);
    /// let guard = lock.try_acquire("job").await?;
    /// // TTL minus the acquire's time minus the drift allowance.
    /// assert!(guard.validity() > Duration::from_secs(9) && guard.validity() < Duration::from_secs(10));
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn validity(&self) -> Duration {
        self.lease.deadline().remaining()
    }

    /// The validity deadline on the deadline clock.
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
    /// assert_eq!(guard.deadline().remaining().as_secs(), guard.validity().as_secs());
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn deadline(&self) -> Stamp {
        self.lease.deadline()
    }

    /// Whether the watchdog renews this lock (see [`crate::watchdog`]).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?);
    /// let guard = lock.try_acquire("job").await?;
    /// assert!(guard.is_watched());
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_watched(&self) -> bool {
        self.lease.watched
    }

    /// Each node's URL with whether the lock holds it now, in configuration
    /// order, as of the last acquire, extend or renewal.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// use quorumlock::Hold;
    /// let guard = lock.try_acquire("job").await?;
    /// for (node, hold) in guard.nodes() {
    ///     println!("{node}: {hold:?}");
    /// }
    /// assert!(guard.nodes().filter(|(_, h)| *h == Hold::Held).count() >= 2);
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (&str, Hold)> {
        self.services
            .core
            .nodes
            .iter()
            .zip(self.lease.holds())
            .map(|(n, h)| (&**n.name(), h))
    }

    /// The nodes that confirmed our token.
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
    /// assert!(guard.held_nodes().count() >= 2, "at least the quorum");
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn held_nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes()
            .filter(|(_, h)| *h == Hold::Held)
            .map(|(n, _)| n)
    }

    /// The last successful watchdog renewal, if any.
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
    /// assert!(guard.last_renewal().is_none(), "no renewal yet");
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn last_renewal(&self) -> Option<Renewal> {
        self.lease.last_renewal()
    }

    /// Resolves when the lock can no longer be proven held, or is released.
    ///
    /// With the watchdog, that is when renewals could not reach the quorum
    /// before the deadline minus the loss margin, when other owners hold
    /// too many nodes, or when the maximum hold time ran out; without it,
    /// at the deadline minus the loss margin unless
    /// [`LockGuard::extend`] moved it. Either way the notice comes before
    /// the validity deadline, never after, and [`is_held`](Self::is_held)
    /// is false from then on.
    ///
    /// # Cancel safety
    ///
    /// The future only observes; drop it at any time. It does not borrow
    /// the lock, so it can be selected against the work.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, LostReason, MultiLock};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?);
    /// let guard = lock.try_acquire("job").await?;
    /// let lost = guard.lost();
    /// lock.force_release("job").await?;
    /// assert_eq!(lost.await.reason, LostReason::ForceReleased);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LossNotice> + Send + 'static {
        self.lease.lost()
    }

    /// A token that is cancelled when the lock is lost or released: hand it
    /// to work that should stop then (e.g. `token.run_until_cancelled(work)`).
    ///
    /// With the watchdog, the watchdog cancels it. Without, the first call
    /// starts a small task that watches the deadline (needs a Tokio
    /// runtime; outside one, only [`lost`](Self::lost) and
    /// [`LockGuard::extend`] notice the loss).
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
    /// let token = guard.cancellation_token();
    /// let work = tokio::spawn(async move {
    ///     tokio::select! {
    ///         () = token.cancelled() => "stopped: the lock is gone",
    ///         () = std::future::ready(()) => "done",
    ///     }
    /// });
    /// assert_eq!(work.await?, "done");
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.lease.cancellation_token()
    }

    /// Takes this lock again as the same holder (re-entry), for nested code
    /// that needs the lock its caller already holds. One attempt: the owner
    /// holds the lock, so only node failures can refuse it.
    ///
    /// The new guard is a hold of its own: it has its own validity and its
    /// own release, and the key stays on the nodes until every hold of the
    /// owner is released (or expires). Releasing the inner guard never ends
    /// the outer hold; another owner still cannot release either. The
    /// watchdog setting and the [fencing token](Self::fencing_token) carry
    /// over from this hold.
    ///
    /// Fails with [`Error::Lost`] when this hold is no longer held: a lost
    /// lock is not re-entered (a plain acquire would be a new holder).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{HeldLock, LockConfig, MultiLock};
    ///
    /// async fn post_entry(held: &HeldLock) -> Result<(), quorumlock::Error> {
    ///     // Nested code that needs the ledger lock takes it again.
    ///     let inner = held.reenter().await?;
    ///     // ... write under the lock ...
    ///     inner.release().await;
    ///     Ok(())
    /// }
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let outer = lock.try_acquire("ledger").await?;
    /// post_entry(&outer).await?;
    /// assert!(outer.is_held(), "the inner release left the outer hold");
    /// assert!(outer.release().await.kept == 0, "the last hold deletes the key");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::try_acquire`](crate::MultiLock::try_acquire):
    /// dropping the future gives back what it wrote, in a task of its own
    /// (the outer hold keeps the key meanwhile anyway).
    pub async fn reenter(&self) -> Result<LockGuard, Error> {
        let lease = &self.lease;
        lease.ensure_held()?;
        let request = Request {
            keys: Arc::clone(&lease.entry.keys),
            owner: Some(Arc::clone(&lease.entry.token)),
            fence: Some(Arc::clone(&lease.fence)),
            watched: lease.watched,
            ttl: self.services.core.config.ttl,
            waits: false,
            ticket: None,
            attempt: 0,
        };
        let lease = acquire::attempt(&self.services, &request, None).await?;
        Ok(LockGuard::new(lease, Arc::clone(&self.services)))
    }

    /// This holder's fencing token: larger than the token of every earlier
    /// holder of the lock's name(s), under the conditions set out in
    /// [`crate::fence`]. Give it to the protected resource with every
    /// write, e.g. [`FencedResource`](crate::fenced::FencedResource).
    ///
    /// The first call costs one round trip to the nodes (two for a name's
    /// very first token, and for the first token of a lock service: until
    /// a holder asks for one, its acquires skip reading the counters, see
    /// [`prefetch_fencing`](crate::LockConfigBuilder::prefetch_fencing));
    /// later calls, and holds re-entered through this one, return the same
    /// token. For a lock on several names, the token is
    /// larger than every earlier token of each of its names.
    ///
    /// The first call fails with [`Error::Lost`] when the lock is no longer
    /// held, and with [`Error::FencingUnavailable`] when too few nodes
    /// confirmed in time (the lock may still be held; calling again
    /// retries). Once established, the token is returned even after the
    /// lock is lost: it names this holder, it does not say the lock is
    /// still held (that is what the resource's check is for).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the token unset; counters may have been
    /// raised, which only makes later tokens larger.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let guard = lock.try_acquire("batch").await?;
    /// let token = guard.fencing_token().await?;
    /// assert_eq!(guard.fencing_token().await?, token, "one holder, one token");
    /// guard.release().await;
    /// let next = lock.try_acquire("batch").await?;
    /// assert!(next.fencing_token().await? > token);
    /// # next.release().await;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "fencing", skip_all, fields(key = %self.lease.name, nodes = self.services.core.nodes.len()))]
    pub async fn fencing_token(&self) -> Result<u64, Error> {
        let lease = &self.lease;
        lease
            .fence
            .get_or_try_init(|| fence::establish(lease))
            .await
            .copied()
    }
}

/// A held lock. Obtained from [`MultiLock::try_acquire`](crate::MultiLock::try_acquire)
/// or [`MultiLock::acquire`](crate::MultiLock::acquire).
///
/// The holder may assume exclusivity only while [`is_held`](HeldLock::is_held)
/// is true, i.e. before the validity deadline (`start + ttl − drift`, on
/// `CLOCK_BOOTTIME`). Without the watchdog nothing refreshes that deadline
/// behind your back; call [`extend`](Self::extend) to push it out. With the
/// watchdog ([`LockConfigBuilder::watchdog`](crate::LockConfigBuilder::watchdog)
/// or [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive)) it is
/// renewed in the background, and [`lost`](HeldLock::lost) /
/// [`cancellation_token`](HeldLock::cancellation_token) tell you when it can no
/// longer be proven held.
///
/// Dropping a guard without [`release`](Self::release) spawns a best-effort
/// release on the current Tokio runtime. Outside a runtime (or while one
/// shuts down) nothing is sent and the keys expire by their TTL: safe, but
/// the lock stays taken until then.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// use std::time::Duration;
/// use quorumlock::{LockConfig, MultiLock};
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).ttl(Duration::from_secs(2)).build()?);
/// let mut guard = lock.try_acquire("stock:sku-42").await?;
/// // A majority of the 3 nodes confirmed; the third may still be answering.
/// assert!(guard.held_nodes().count() >= 2);
/// let validity = guard.extend(Duration::from_secs(5)).await?;
/// assert!(validity > Duration::from_secs(4));
/// let report = guard.release().await;
/// assert!(report.was_held && report.released + report.failed.len() >= 2);
/// # Ok(())
/// # }
/// ```
#[must_use = "a guard dropped at once releases the lock at once; bind it for as long as the work runs"]
pub struct LockGuard {
    held: HeldLock,
    released: bool,
}

/// Everything a [`HeldLock`] tells (key, token, `is_held`, validity,
/// deadline, nodes, `lost()`, the cancellation token, the last renewal) the
/// guard tells too: it is the held lock plus the right to extend and
/// release it.
impl Deref for LockGuard {
    type Target = HeldLock;

    fn deref(&self) -> &HeldLock {
        &self.held
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lease = &self.held.lease;
        f.debug_struct("LockGuard")
            .field("keys", &lease.entry.keys)
            .field("validity", &self.validity())
            .field("watched", &lease.watched)
            .field("holds", &lease.holds())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// Wraps a lease just won; a watched one is handed to the watchdog.
    pub(crate) fn new(lease: Lease, services: Arc<Services>) -> Self {
        let lease = Arc::new(lease);
        if lease.watched {
            services.watchdog.watch(&lease);
        }
        LockGuard {
            held: HeldLock { lease, services },
            released: false,
        }
    }

    /// A cloneable read-only view of this lock for the work it protects.
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
    /// let held = guard.handle();
    /// tokio::spawn(async move { assert!(held.is_held()) }).await?;
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn handle(&self) -> HeldLock {
        self.held.clone()
    }

    /// Sets the keys' TTL to `ttl` on every node that still carries our
    /// token, and returns the new validity.
    ///
    /// Needs the quorum again. The new deadline is computed from this call's
    /// own start time (`start + ttl − drift`). On failure the old deadline is
    /// kept, or shortened if the new TTL is shorter (some nodes may have
    /// taken it). When too few nodes still carry our token for any quorum,
    /// the guard is lost at once ([`Error::Lost`]).
    ///
    /// A guard past its loss time (the deadline minus the loss margin)
    /// cannot be extended, even if its keys still exist: it has been, or
    /// is about to be, reported lost, and someone else may hold the lock
    /// after the deadline. An extend that completes after that time is
    /// reported as lost too, so a guard never turns from not held back to
    /// held.
    ///
    /// With the watchdog on, an extend waits for a renewal in flight, and
    /// later renewals use the new TTL (the interval and margin scale with it).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).ttl(Duration::from_secs(2)).build()?);
    /// let mut guard = lock.try_acquire("export").await?;
    /// // The export takes longer than planned: ask for 30 s from now.
    /// let validity = guard.extend(Duration::from_secs(30)).await?;
    /// assert!(validity > Duration::from_secs(29));
    /// guard.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the guard as it was, except that nodes
    /// may have taken the new TTL; the deadline is not moved.
    #[tracing::instrument(level = "debug", name = "extend", skip_all, fields(key = %self.held.lease.name, ttl_ms = ttl.as_millis() as u64))]
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let lease = Arc::clone(&self.held.lease);
        let core = Arc::clone(&lease.core);
        config::check_ttl(ttl, &core.config)?;
        let flight = Flight::new();
        if !lease.claim(&flight).await {
            return Err(lease.ended_error());
        }
        // Gives the slot back however this future ends.
        let _slot = Unclaim {
            lease: &lease,
            flight: &flight,
            watchdog: &self.held.services.watchdog,
        };
        lease.ensure_held()?;
        let ttl_ms = ttl_millis(ttl);
        let mut quorum = quorum_round(
            core.nodes.len(),
            core.required(),
            core.config.node_timeout,
            |i| {
                core.nodes[i].extend(Extend {
                    entry: lease.entry.clone(),
                    ttl_ms,
                })
            },
            |reply| reply.vote(),
        )
        .await;
        let config = &core.config;
        let (validity, _) = quorum.validity(ttl, config.drift_factor);
        let tally = quorum.tally;
        tracing::debug!(key = %lease.name, won = tally.won(), elapsed = ?quorum.elapsed, ?validity, "extend");

        if quorum.won_with(ttl, config.drift_factor, config.min_validity) {
            let win = Win {
                start: quorum.start,
                ttl,
                holds: Hold::from_votes(&quorum.votes),
                renewal: None,
            };
            match lease.record_win(win) {
                Recorded::Moved => {
                    bump(&core.counters.extended);
                    telemetry::extend(true);
                    return Ok(self.validity());
                }
                Recorded::Ended => return Err(lease.ended_error()),
                Recorded::TooLate => {}
            }
        }
        bump(&core.counters.extend_failed);
        telemetry::extend(false);
        let nodes = core.reports(&mut quorum.replies, quorum.end);
        let keys_gone = tally.contention_rules_out_quorum().then(|| nodes.clone());
        let gone = keys_gone.is_some();
        if !lease.record_miss(quorum.start, ttl, None, keys_gone) || gone {
            return Err(lease.ended_error());
        }
        if tally.decision() == crate::quorum::Decision::Won {
            let key = lease.name.to_string();
            return Err(quorum.validity_used_up(key, validity, config.min_validity));
        }
        Err(quorum.quorum_not_reached(lease.name.to_string(), nodes))
    }

    /// Stops the watchdog, deletes our key on every node (owner-checked: a
    /// key that carries another owner's token is never touched) and reports
    /// what happened. Waits for each node up to the node timeout; a node
    /// that answers later is in [`ReleaseReport::failed`], and its release
    /// goes on in the background until it answers. A program that ends
    /// its runtime right after a release calls
    /// [`MultiLock::settle`](crate::MultiLock::settle) first.
    ///
    /// A renewal still in flight is let finish first (at most one node
    /// timeout), so the release is queued behind it on every node and a
    /// released lock is never re-created by a late renewal.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let guard = lock.try_acquire("nightly").await?;
    /// let report = guard.release().await;
    /// assert!(report.was_held);
    /// // The nodes that took the lock (at least the 2 of the quorum), less
    /// // any that answers after the node timeout (in `report.failed`).
    /// assert!(report.released + report.failed.len() >= 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// A started release always completes. Dropping the future at any
    /// point releases in the background, as dropping the guard does: the
    /// calls the dropped future had written run on their nodes, and the
    /// release is sent again to every node (an owner-checked delete, so a
    /// second one changes nothing where the first arrived). Only the report
    /// is lost.
    #[tracing::instrument(level = "debug", name = "release", skip_all, fields(key = %self.held.lease.name, nodes = self.held.services.core.nodes.len()))]
    pub async fn release(mut self) -> ReleaseReport {
        self.released = true;
        let mut unfinished = FinishOnDrop(Some(self.held.clone()));
        let HeldLock { lease, services } = self.held.clone();
        let was_held = lease.begin_release().await;
        let ttl = lease.key_ttl();
        let mut report = release::release(&services.core, &services.wake, &lease.entry, ttl).await;
        unfinished.0 = None;
        report.was_held = was_held;
        tracing::debug!(key = %lease.name, released = report.released, failed = report.failed.len(), was_held, "released");
        report
    }
}

/// Gives a lease's in-flight slot back when dropped, and hands a watched
/// lease back to the watchdog (whose renewal skipped it meanwhile).
struct Unclaim<'a> {
    lease: &'a Arc<Lease>,
    flight: &'a Flight,
    watchdog: &'a Watchdog,
}

impl Drop for Unclaim<'_> {
    fn drop(&mut self) {
        self.flight.done.cancel();
        self.lease.unclaim(self.flight);
        if self.lease.watched {
            self.watchdog.watch(self.lease);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if !release_in_background(self.held.clone(), "released on drop") {
            // Stop the watchdog at least; the keys expire by their TTL.
            self.held.lease.end(LostReason::Released);
            tracing::debug!(key = %self.held.lease.name, "guard dropped outside a Tokio runtime; keys expire by their TTL");
        }
    }
}

/// Finishes a release whose future was dropped before its end.
struct FinishOnDrop(Option<HeldLock>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        let Some(held) = self.0.take() else {
            return;
        };
        // Dropped as its runtime shuts down: the keys expire by their TTL.
        if !release_in_background(held.clone(), "release finished in the background") {
            held.lease.end(LostReason::Released);
        }
    }
}

/// Ends the lease and releases on every node in a task of its own.
/// Counted in the lock service's background work
/// ([`MultiLock::settle`](crate::MultiLock::settle)). `false`: there is no
/// runtime to run it on, and nothing was started.
fn release_in_background(held: HeldLock, what: &'static str) -> bool {
    let HeldLock { lease, services } = held;
    let background = Arc::clone(&services.core.background);
    background.spawn(async move {
        lease.begin_release().await;
        let ttl = lease.key_ttl();
        let report = release::release(&services.core, &services.wake, &lease.entry, ttl).await;
        tracing::debug!(key = %lease.name, released = report.released, "{what}");
    })
}

/// What every guard of a primitive built on slots (a semaphore's
/// [`Permit`](crate::Permit), a read-write lock's
/// [`ReadGuard`](crate::ReadGuard) and [`WriteGuard`](crate::WriteGuard))
/// shares: it derefs to the [`LockGuard`] of its slots (a field `guard`),
/// gives them back, or hands that guard over. `$what`: what it gives back;
/// `$held`: whose lock guard it hands over.
macro_rules! slot_guard {
    ($guard:ident, gives_back: $what:literal, hands_over: $held:literal) => {
        impl std::ops::Deref for $guard {
            type Target = $crate::guard::LockGuard;

            fn deref(&self) -> &$crate::guard::LockGuard {
                &self.guard
            }
        }

        impl std::ops::DerefMut for $guard {
            fn deref_mut(&mut self) -> &mut $crate::guard::LockGuard {
                &mut self.guard
            }
        }

        impl $guard {
            #[doc = concat!("Gives ", $what, " back, as [`LockGuard::release`](crate::LockGuard::release).")]
            ///
            /// # Cancel safety
            ///
            /// As for [`LockGuard::release`](crate::LockGuard::release): a
            /// started release always completes.
            pub async fn release(self) -> $crate::release::ReleaseReport {
                self.guard.release().await
            }

            #[doc = concat!("The lock guard of ", $held, " itself.")]
            pub fn into_guard(self) -> $crate::guard::LockGuard {
                self.guard
            }
        }
    };
}
pub(crate) use slot_guard;
