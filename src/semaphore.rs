//! [`MultiSemaphore`]: at most K holders of a name at once, over N
//! independent Redis masters, with the mutex's guarantees.
//!
//! The type's documentation says how it works and why it is safe.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::any_of::{self, AnyOf, Sweepers};
use crate::config::{GuardOptions, LockConfig};
use crate::error::Error;
use crate::guard::{HeldLock, LockGuard};
use crate::keys::{PERMIT_PREFIX, check_primitive_name, slot_name};
use crate::lock::{MultiLock, run_holding};
use crate::wait::Wait;

/// A counting semaphore over N independent Redis masters: at most K
/// holders of a name at once.
///
/// Built over a [`MultiLock`] (its own, or one it shares connections,
/// watchdog and counters with).
///
/// # How
///
/// A semaphore named `name` with K permits is K **slots**, each an
/// ordinary lock name (`quorumlock:permit:<name>:<i>`, i < K). A permit is
/// one slot's lock, won on a quorum like any [`MultiLock`] lock: the same
/// fan-out, rollback, node epochs and quarantine, watchdog, loss notice and
/// fencing tokens (per slot). An acquire tries the slots one at a time,
/// starting at a random one, and between sweeps waits for a release of any
/// of them (`any_of`).
///
/// # Why it is safe
///
/// Each slot has at most one holder within its validity: that is the
/// mutex's guarantee, under every fault the mutex survives (a node that
/// lost its data casts no vote for the quarantine, so it cannot vote a
/// slot to a second holder). A permit is a slot, so at most K permits
/// overlap. A crashed holder's permit expires with its keys' TTL.
///
/// The obvious design, a set of holders on each node that admits a
/// newcomer while it has fewer than K and a permit won on a majority of
/// nodes, is **not** safe: with 3 nodes and K = 2, A may win {n1, n2}, B
/// {n2, n3} and C {n1, n3}, every node holding only two. What a quorum of
/// permit sets guarantees is a count, not K: H holders each recorded on q
/// of N nodes, at most K per node, give H·q ≤ N·K, so H ≤ ⌊N·K / q⌋ (3
/// with 3 nodes, a majority and K = 2). Only q > N·K / (K + 1) bounds it
/// by K, which for K ≥ 2 needs nearly every node, and every node to
/// answer. The model in `tests/model_slots.rs` finds that schedule, and
/// checks the slots.
///
/// # Changing K
///
/// K is the caller's: each acquire passes it, and takes only slots below
/// it. Raising K takes effect at once. Lowering it from K to K' stops new
/// permits on slots K' and above at once; permits already held there are
/// not revoked, and run until released or expired (a watched one until its
/// holder releases it). So while they last, up to the old K hold; once
/// they have ended, at most K'. Every caller of one name should pass the
/// same K, except during such a change.
///
/// # Fairness
///
/// Waiters of one lock service take turns; across processes a released
/// permit goes to whoever's attempt reaches the nodes first, except that
/// the releasing lock service leaves a slot it just released to another
/// process's waiter for a moment ([`crate::wake`], stepping aside).
/// Permits are never queued across processes
/// ([`fair`](crate::LockConfigBuilder::fair) is a mutex setting).
///
/// # Example
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// use quorumlock::{Error, LockConfig, MultiSemaphore};
///
/// let exports = MultiSemaphore::new(LockConfig::builder().nodes(nodes).build()?);
/// let a = exports.try_acquire("nightly-export", 2).await?;
/// let b = exports.try_acquire("nightly-export", 2).await?;
/// assert_ne!(a.slot(), b.slot());
/// // Both permits are out: a third is refused.
/// assert!(matches!(exports.try_acquire("nightly-export", 2).await, Err(Error::Contended { .. })));
/// a.release().await;
/// let c = exports.try_acquire("nightly-export", 2).await?;
/// # b.release().await;
/// # c.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MultiSemaphore {
    lock: MultiLock,
    /// How many of this service's calls wait for one name's slots at once.
    sweepers: Arc<Sweepers>,
}

impl fmt::Debug for MultiSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiSemaphore")
            .field("lock", &self.lock)
            .finish()
    }
}

impl MultiSemaphore {
    /// The most permits a name may have: each is a slot that a waiting
    /// acquire may try in turn.
    pub const MAX_PERMITS: u32 = 1024;

    /// A semaphore service over the configured nodes, with a lock service
    /// of its own.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiSemaphore};
    ///
    /// let permits = MultiSemaphore::new(LockConfig::builder().node("redis://127.0.0.1:6379").build()?);
    /// # let _ = permits;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(config: LockConfig) -> MultiSemaphore {
        MultiSemaphore {
            lock: MultiLock::new(config),
            sweepers: Arc::default(),
        }
    }

    /// A semaphore service sharing `lock`'s connections, watchdog and
    /// counters.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiLock, MultiSemaphore};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:6379").build()?);
    /// let permits = MultiSemaphore::over(&lock);
    /// assert_eq!(permits.lock().config().ttl(), lock.config().ttl());
    /// # Ok(())
    /// # }
    /// ```
    pub fn over(lock: &MultiLock) -> MultiSemaphore {
        MultiSemaphore {
            lock: lock.clone(),
            sweepers: Arc::default(),
        }
    }

    /// The lock name of slot `slot` of semaphore `name`:
    /// `quorumlock:permit:<name>:<slot>`, for an operator's
    /// [`force_release`](MultiLock::force_release) of a stuck permit and for
    /// tools that read the nodes.
    ///
    /// ```
    /// use quorumlock::MultiSemaphore;
    /// assert_eq!(MultiSemaphore::slot_name("exports", 2), "quorumlock:permit:exports:2");
    /// ```
    pub fn slot_name(name: &str, slot: u32) -> String {
        slot_name(PERMIT_PREFIX, name, slot)
    }

    /// The lock service underneath: its settings, [`stats`](MultiLock::stats)
    /// (permits count as acquisitions), [`warm_up`](MultiLock::warm_up) and
    /// [`settle`](MultiLock::settle).
    pub fn lock(&self) -> &MultiLock {
        &self.lock
    }

    /// One sweep over the slots of `name`, for one of its `permits`
    /// permits: a permit if one is free, [`Error::Contended`] (with the
    /// soonest any permit frees) if every slot is held.
    ///
    /// `permits` must be 1 to [`MAX_PERMITS`](Self::MAX_PERMITS)
    /// ([`Error::InvalidPermits`] otherwise); `name` follows the rules of
    /// lock names ([`Error::InvalidKey`]).
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::try_acquire`]: a dropped call leaves no permit,
    /// and what its try wrote is rolled back in the background.
    pub async fn try_acquire(&self, name: &str, permits: u32) -> Result<Permit, Error> {
        let how = (self.lock.config().watchdog(), self.lock.config().ttl());
        self.take(name, permits, None, how).await
    }

    /// One of the `permits` permits of `name`, waiting up to `wait` for one
    /// to free up: for a release of any of them, the soonest holder's TTL,
    /// or the retry policy's backoff.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiSemaphore, Wait};
    ///
    /// let api = MultiSemaphore::new(LockConfig::builder().nodes(nodes).build()?);
    /// let held = api.acquire("rate-limited-api", 1, Wait::NONE).await?;
    /// let waiting = api.clone();
    /// let next = tokio::spawn(async move {
    ///     waiting.acquire("rate-limited-api", 1, Wait::up_to(Duration::from_secs(5))).await
    /// });
    /// held.release().await;
    /// next.await??.release().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::acquire`].
    pub async fn acquire(&self, name: &str, permits: u32, wait: Wait) -> Result<Permit, Error> {
        let how = (self.lock.config().watchdog(), self.lock.config().ttl());
        self.take(name, permits, Some(wait), how).await
    }

    /// [`acquire`](Self::acquire) with this permit's own TTL or watchdog
    /// setting.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::acquire`].
    pub async fn acquire_with(
        &self,
        name: &str,
        permits: u32,
        wait: Wait,
        options: &GuardOptions,
    ) -> Result<Permit, Error> {
        let how = options.resolve(self.lock.config())?;
        self.take(name, permits, Some(wait), how).await
    }

    /// Takes a permit of `name` (waiting up to `wait`), runs `work` while
    /// the watchdog keeps it, and releases it: as
    /// [`MultiLock::run_exclusive`], with at most `permits` such works at
    /// once.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiSemaphore, Wait};
    ///
    /// let exports = MultiSemaphore::new(LockConfig::builder().nodes(nodes).build()?);
    /// let rows = exports
    ///     .run_with_permit("export", 4, Wait::up_to(Duration::from_secs(1)), |held| async move {
    ///         assert!(held.is_held() && held.is_watched());
    ///         1_000
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 1_000);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::run_exclusive`].
    pub async fn run_with_permit<F, Fut, T>(
        &self,
        name: &str,
        permits: u32,
        wait: Wait,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let how = (true, self.lock.config().ttl());
        let permit = self.take(name, permits, Some(wait), how).await?;
        run_holding(permit.guard, name, work).await
    }

    async fn take(
        &self,
        name: &str,
        permits: u32,
        wait: Option<Wait>,
        (watched, ttl): (bool, std::time::Duration),
    ) -> Result<Permit, Error> {
        check_permits(name, permits)?;
        let any = AnyOf {
            label: name,
            prefix: PERMIT_PREFIX,
            count: permits,
            how: (watched, ttl),
            wait: wait.map(Wait::budget),
            active: self.sweepers.for_slots(name, permits),
        };
        let (guard, slot) = any_of::acquire(self.lock.services(), any).await?;
        Ok(Permit {
            guard,
            name: name.into(),
            slot,
        })
    }
}

/// Checks a semaphore's name and number of permits.
fn check_permits(name: &str, permits: u32) -> Result<(), Error> {
    check_primitive_name(name, "a semaphore needs a name")?;
    let reason = match permits {
        0 => "a semaphore needs at least one permit",
        p if p > MultiSemaphore::MAX_PERMITS => {
            "at most 1,024 permits per name: a waiting acquire may try each in turn"
        }
        _ => return Ok(()),
    };
    Err(Error::InvalidPermits {
        name: name.to_owned(),
        permits,
        reason,
    })
}

/// One permit of a [`MultiSemaphore`]: the lock of one of its slots.
///
/// Everything a [`LockGuard`] does, a permit does (it derefs to one):
/// [`validity`](HeldLock::validity), [`lost`](HeldLock::lost),
/// [`fencing_token`](HeldLock::fencing_token) (rising across the holders
/// of this slot), [`extend`](LockGuard::extend), and release on drop.
/// Its [`key`](HeldLock::key) is the slot's lock name,
/// `quorumlock:permit:<name>:<slot>`.
#[must_use = "a permit dropped at once is released at once; bind it for as long as the work runs"]
pub struct Permit {
    guard: LockGuard,
    name: Box<str>,
    slot: u32,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("name", &self.name)
            .field("slot", &self.slot)
            .field("guard", &self.guard)
            .finish()
    }
}

crate::guard::slot_guard!(Permit, gives_back: "the permit", hands_over: "the slot");

impl Permit {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which of the name's slots this permit holds (below the K it was
    /// taken with).
    pub fn slot(&self) -> u32 {
        self.slot
    }
}
