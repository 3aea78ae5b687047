//! A blocking front end for code that is not async (feature `blocking`):
//! the same locks, the watchdog included, behind plain function calls.
//!
//! Like `reqwest::blocking`, each [`MultiLock`] here owns a Tokio runtime
//! with one worker thread of its own. Every call hands its work to that
//! runtime and waits for the answer, so the watchdog keeps renewing, and
//! release notices keep waking waiters, while the calling thread does
//! something else. Clones share the runtime; it stops when the last clone
//! and the last guard are gone.
//!
//! The async API is the reference: every method here does what its async
//! namesake does, documented on [`crate::MultiLock`] and
//! [`crate::LockGuard`]. What differs:
//!
//! * A [`LockGuard`] dropped without [`release`](LockGuard::release) releases
//!   before the drop returns (a bounded wait of about one node timeout),
//!   not in the background.
//! * [`MultiLock::run_exclusive`] runs synchronous work, which cannot be
//!   cancelled at an `.await`: the work checks
//!   [`is_held`](crate::HeldLock::is_held) (or the
//!   [cancellation token](crate::HeldLock::cancellation_token)) between its
//!   steps, and a result is returned only if the lock was held until the
//!   work returned.
//! * Calling from async code works, but blocks that task's thread: use the
//!   async API there.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use quorumlock::blocking::MultiLock;
//! use quorumlock::{LockConfig, Wait};
//!
//! # let testbed = quorumlock_testbed::Testbed::start(3)?;
//! # let nodes = testbed.urls();
//! let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
//!
//! let guard = lock.acquire("report:2026-11", Wait::up_to(Duration::from_secs(1)))?;
//! assert!(guard.is_held());
//! let token = guard.fencing_token()?;
//! assert!(token > 0);
//! guard.release();
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{GuardOptions, LockConfig};
use crate::error::{Error, NodeError};
use crate::lease::LossNotice;
use crate::owner::Owner;
use crate::release::ReleaseReport;
use crate::stats::LockStats;
use crate::wait::Wait;

/// The runtime the blocking handles run their work on; shut down in the
/// background when the last handle is gone, so dropping one never blocks
/// on (or, inside another runtime, panics about) a runtime shutdown.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn start() -> std::io::Result<Runtime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("quorumlock-blocking")
            .enable_all()
            .build()?;
        Ok(Runtime(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("the runtime is taken only by drop")
            .handle()
    }

    /// Runs `work` on the runtime and waits for its output on this thread.
    fn run<F>(&self, work: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let task = self.handle().spawn(work);
        match futures::executor::block_on(task) {
            Ok(output) => output,
            Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
            // Tasks are cancelled only by a shutdown, which waits for the
            // last handle, and a handle is waiting here.
            Err(_) => unreachable!("the blocking runtime shut down under a live handle"),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The blocking [`crate::MultiLock`]: cheap to clone, the clones share
/// connections, the watchdog and the runtime thread.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::blocking::MultiLock;
/// use quorumlock::LockConfig;
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
/// let guard = lock.try_acquire("stock:42")?;
/// assert!(lock.try_acquire("stock:42").is_err(), "held");
/// guard.release();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    inner: crate::MultiLock,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::MultiLock")
            .field(&self.inner)
            .finish()
    }
}

impl MultiLock {
    /// A lock over the configured nodes, with a runtime thread of its own
    /// that starts connecting to every node at once. Fails only if the
    /// operating system refuses the thread.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:6379").build()?)?;
    /// assert_eq!(lock.config().node_urls().count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(config: LockConfig) -> std::io::Result<MultiLock> {
        let runtime = Runtime::start()?;
        // Inside the runtime, so the connections start at once.
        let inner = {
            let _inside = runtime.handle().enter();
            crate::MultiLock::new(config)
        };
        Ok(MultiLock {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// The async lock these calls run on: hand it to async code that shares
    /// the connections (it must run on a Tokio runtime of its own).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:6379").build()?)?;
    /// let shared: &quorumlock::MultiLock = lock.as_async();
    /// assert_eq!(shared.config().ttl(), lock.config().ttl());
    /// # Ok(())
    /// # }
    /// ```
    pub fn as_async(&self) -> &crate::MultiLock {
        &self.inner
    }

    /// The settings this lock runs with ([`crate::MultiLock::config`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").ttl(Duration::from_secs(5)).build()?;
    /// assert_eq!(MultiLock::new(config)?.config().ttl(), Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn config(&self) -> &LockConfig {
        self.inner.config()
    }

    /// The counters since this lock was created ([`crate::MultiLock::stats`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:6379").build()?)?;
    /// assert_eq!(lock.stats().attempts, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> LockStats {
        self.inner.stats()
    }

    /// Waits until the lock's background work has ended, or `within` has
    /// passed, and returns how many pieces were still running
    /// ([`crate::MultiLock::settle`]). The runtime thread ends with the
    /// process: call this before `main` returns.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// lock.acquire("export", Wait::up_to(Duration::from_secs(2)))?.release();
    /// assert_eq!(lock.settle(Duration::from_secs(2)), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn settle(&self, within: Duration) -> usize {
        let inner = self.inner.clone();
        self.runtime.run(async move { inner.settle(within).await })
    }

    /// Connects to every node now and reports each node's result
    /// ([`crate::MultiLock::warm_up`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// assert!(lock.warm_up().iter().all(Result::is_ok));
    /// # Ok(())
    /// # }
    /// ```
    pub fn warm_up(&self) -> Vec<Result<(), NodeError>> {
        let lock = self.inner.clone();
        self.runtime.run(async move { lock.warm_up().await })
    }

    /// One attempt ([`crate::MultiLock::try_acquire`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{Error, LockConfig};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let guard = lock.try_acquire("stock:42")?;
    /// assert!(matches!(lock.try_acquire("stock:42"), Err(Error::Contended { .. })));
    /// guard.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, name: &str) -> Result<LockGuard, Error> {
        let (lock, name) = (self.inner.clone(), name.to_owned());
        self.guard(
            self.runtime
                .run(async move { lock.try_acquire(&name).await }),
        )
    }

    /// Attempts until won or `wait` is spent ([`crate::MultiLock::acquire`]);
    /// waiting costs no CPU on this thread.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let guard = lock.acquire("nightly", Wait::up_to(Duration::from_secs(1)))?;
    /// guard.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self, name: &str, wait: Wait) -> Result<LockGuard, Error> {
        let (lock, name) = (self.inner.clone(), name.to_owned());
        self.guard(
            self.runtime
                .run(async move { lock.acquire(&name, wait).await }),
        )
    }

    /// One attempt with this guard's own TTL or watchdog setting
    /// ([`crate::MultiLock::try_acquire_with`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{GuardOptions, LockConfig};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let brief = GuardOptions::default().ttl(Duration::from_secs(3));
    /// let guard = lock.try_acquire_with("report", &brief)?;
    /// assert!(guard.validity() <= Duration::from_secs(3));
    /// guard.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_with(&self, name: &str, options: &GuardOptions) -> Result<LockGuard, Error> {
        let (lock, name, options) = (self.inner.clone(), name.to_owned(), *options);
        self.guard(
            self.runtime
                .run(async move { lock.try_acquire_with(&name, &options).await }),
        )
    }

    /// Attempts until won or `wait` is spent, with this guard's own TTL or
    /// watchdog setting ([`crate::MultiLock::acquire_with`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{GuardOptions, LockConfig, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let watched = GuardOptions::default().watchdog(true);
    /// let guard = lock.acquire_with("migration", Wait::up_to(Duration::from_secs(1)), &watched)?;
    /// assert!(guard.is_watched());
    /// guard.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_with(
        &self,
        name: &str,
        wait: Wait,
        options: &GuardOptions,
    ) -> Result<LockGuard, Error> {
        let (lock, name, options) = (self.inner.clone(), name.to_owned(), *options);
        self.guard(
            self.runtime
                .run(async move { lock.acquire_with(&name, wait, &options).await }),
        )
    }

    /// One attempt on several names, all or nothing
    /// ([`crate::MultiLock::try_acquire_all`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let both = lock.try_acquire_all(&["account:7", "account:3"])?;
    /// assert_eq!(both.keys().count(), 2);
    /// both.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_all<S: AsRef<str>>(&self, names: &[S]) -> Result<LockGuard, Error> {
        let (lock, names) = (self.inner.clone(), owned(names));
        self.guard(
            self.runtime
                .run(async move { lock.try_acquire_all(&names).await }),
        )
    }

    /// Several names at once, waiting up to `wait`
    /// ([`crate::MultiLock::acquire_all`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let both = lock.acquire_all(&["warehouse:a", "warehouse:b"], Wait::up_to(Duration::from_secs(1)))?;
    /// both.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_all<S: AsRef<str>>(&self, names: &[S], wait: Wait) -> Result<LockGuard, Error> {
        let (lock, names) = (self.inner.clone(), owned(names));
        self.guard(
            self.runtime
                .run(async move { lock.acquire_all(&names, wait).await }),
        )
    }

    /// Takes or re-enters `name` as `owner` ([`crate::MultiLock::acquire_as`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, Owner, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let owner = Owner::new();
    /// let outer = lock.acquire_as(&owner, "ledger", Wait::NONE)?;
    /// let inner = lock.acquire_as(&owner, "ledger", Wait::NONE)?; // re-entry
    /// assert!(inner.release().kept > 0, "the outer hold keeps the key");
    /// outer.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_as(&self, owner: &Owner, name: &str, wait: Wait) -> Result<LockGuard, Error> {
        let (lock, owner, name) = (self.inner.clone(), owner.clone(), name.to_owned());
        self.guard(
            self.runtime
                .run(async move { lock.acquire_as(&owner, &name, wait).await }),
        )
    }

    /// Several names as `owner` ([`crate::MultiLock::acquire_all_as`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, Owner, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let owner = Owner::new();
    /// let both = lock.acquire_all_as(&owner, &["account:3", "account:7"], Wait::NONE)?;
    /// both.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_all_as<S: AsRef<str>>(
        &self,
        owner: &Owner,
        names: &[S],
        wait: Wait,
    ) -> Result<LockGuard, Error> {
        let (lock, owner, names) = (self.inner.clone(), owner.clone(), owned(names));
        self.guard(
            self.runtime
                .run(async move { lock.acquire_all_as(&owner, &names, wait).await }),
        )
    }

    /// Deletes `name` on every node whatever its owner
    /// ([`crate::MultiLock::force_release`]). A name in the reserved
    /// `quorumlock:` namespace is refused with [`Error::InvalidKey`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?)?;
    /// let stuck = lock.try_acquire("nightly")?;
    /// let found = lock.force_release("nightly")?;
    /// assert!(found.iter().filter(|r| matches!(r, Ok(true))).count() >= 2);
    /// assert!(!stuck.is_held());
    /// # Ok(())
    /// # }
    /// ```
    pub fn force_release(&self, name: &str) -> Result<Vec<Result<bool, NodeError>>, Error> {
        let (lock, name) = (self.inner.clone(), name.to_owned());
        self.runtime
            .run(async move { lock.force_release(&name).await })
    }

    /// Takes `name` with the watchdog on, runs `work` on this thread, and
    /// releases, whatever the work did (it may panic: the lock is released
    /// and the panic resumed).
    ///
    /// Synchronous work cannot be cancelled at an `.await` as
    /// [`crate::MultiLock::run_exclusive`] cancels async work, so it should
    /// check [`is_held`](crate::HeldLock::is_held) before each step that
    /// must not run unprotected. If the lock was lost before the work
    /// returned, the work's result is dropped and the call returns
    /// [`Error::Lost`]: a result comes back only if the lock was held until
    /// the work finished.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, Wait};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let total = lock.run_exclusive("nightly-job", Wait::up_to(Duration::from_secs(1)), |held| {
    ///     assert!(held.is_held() && held.is_watched());
    ///     42
    /// })?;
    /// assert_eq!(total, 42);
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_exclusive<T>(
        &self,
        name: &str,
        wait: Wait,
        work: impl FnOnce(&HeldLock) -> T,
    ) -> Result<T, Error> {
        let guard = self.acquire_with(name, wait, &GuardOptions::default().watchdog(true))?;
        // On a panic, unwinding drops the guard, which releases.
        let value = work(&guard.held);
        let lost = guard.wait_lost(Duration::ZERO);
        guard.release();
        match lost {
            Some(notice) if notice.reason != crate::LostReason::Released => Err(Error::Lost {
                key: name.to_owned(),
                reason: notice.reason,
            }),
            _ => Ok(value),
        }
    }

    fn guard(&self, won: Result<crate::LockGuard, Error>) -> Result<LockGuard, Error> {
        let guard = won?;
        Ok(LockGuard {
            held: HeldLock {
                inner: guard.handle(),
                runtime: Arc::clone(&self.runtime),
            },
            guard: Some(guard),
        })
    }
}

fn owned<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    names.iter().map(|n| n.as_ref().to_owned()).collect()
}

/// A read-only view of a held lock for synchronous work: everything of
/// [`crate::HeldLock`] (through `Deref`), with the async calls made
/// blocking.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::blocking::MultiLock;
/// use quorumlock::LockConfig;
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
/// let guard = lock.try_acquire("invoice:7")?;
/// let held = guard.handle();
/// let worker = std::thread::spawn(move || held.is_held());
/// assert!(worker.join().unwrap());
/// guard.release();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct HeldLock {
    inner: crate::HeldLock,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Deref for HeldLock {
    type Target = crate::HeldLock;

    fn deref(&self) -> &crate::HeldLock {
        &self.inner
    }
}

impl HeldLock {
    /// A fencing token larger than every earlier holder's
    /// ([`crate::HeldLock::fencing_token`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let first = lock.try_acquire("ledger")?;
    /// let a = first.fencing_token()?;
    /// first.release();
    /// let second = lock.try_acquire("ledger")?;
    /// assert!(second.fencing_token()? > a);
    /// second.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Result<u64, Error> {
        let held = self.inner.clone();
        self.runtime.run(async move { held.fencing_token().await })
    }

    /// Takes the lock again for nested code ([`crate::HeldLock::reenter`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let outer = lock.try_acquire("ledger")?;
    /// let inner = outer.reenter()?;
    /// inner.release();
    /// assert!(outer.is_held());
    /// outer.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn reenter(&self) -> Result<LockGuard, Error> {
        let held = self.inner.clone();
        let guard = self.runtime.run(async move { held.reenter().await })?;
        Ok(LockGuard {
            held: HeldLock {
                inner: guard.handle(),
                runtime: Arc::clone(&self.runtime),
            },
            guard: Some(guard),
        })
    }

    /// Waits up to `timeout` for the lock to be lost (or released), and
    /// says why; `None` if it is still held when the time is up.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::{LockConfig, LostReason};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?)?;
    /// let guard = lock.try_acquire("nightly")?;
    /// assert!(guard.wait_lost(Duration::from_millis(10)).is_none());
    /// lock.force_release("nightly")?;
    /// let notice = guard.wait_lost(Duration::from_secs(5)).expect("lost");
    /// assert_eq!(notice.reason, LostReason::ForceReleased);
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LossNotice> {
        let lost = self.inner.lost();
        self.runtime
            .run(async move { tokio::time::timeout(timeout, lost).await.ok() })
    }
}

/// The blocking [`crate::LockGuard`]: dereferences to [`HeldLock`] for
/// `is_held`, `validity`, `fencing_token` and the rest; released by
/// [`release`](Self::release) or, before its drop returns, by drop.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::blocking::MultiLock;
/// use quorumlock::LockConfig;
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
/// {
///     let _guard = lock.try_acquire("scoped")?;
///     // ... work ...
/// } // released here, before the scope's end returns
/// lock.try_acquire("scoped")?.release();
/// # Ok(())
/// # }
/// ```
pub struct LockGuard {
    held: HeldLock,
    /// `None` only once released.
    guard: Option<crate::LockGuard>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held.fmt(f)
    }
}

impl Deref for LockGuard {
    type Target = HeldLock;

    fn deref(&self) -> &HeldLock {
        &self.held
    }
}

impl LockGuard {
    /// A view to hand to work on other threads.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let guard = lock.try_acquire("invoice:8")?;
    /// let held = guard.handle();
    /// assert_eq!(held.key(), "invoice:8");
    /// guard.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn handle(&self) -> HeldLock {
        self.held.clone()
    }

    /// Extends the lock to `ttl` on every node ([`crate::LockGuard::extend`]),
    /// returning the new validity.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let config = LockConfig::builder().nodes(nodes).ttl(Duration::from_secs(5)).build()?;
    /// let lock = MultiLock::new(config)?;
    /// let mut guard = lock.try_acquire("long-job")?;
    /// let validity = guard.extend(Duration::from_secs(20))?;
    /// assert!(validity > Duration::from_secs(10));
    /// guard.release();
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let mut guard = self.guard.take().expect("present until released");
        let (guard, extended) = self.held.runtime.run(async move {
            let extended = guard.extend(ttl).await;
            (guard, extended)
        });
        self.guard = Some(guard);
        extended
    }

    /// Releases on every node and reports what each did
    /// ([`crate::LockGuard::release`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::blocking::MultiLock;
    /// use quorumlock::LockConfig;
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?)?;
    /// let report = lock.try_acquire("once")?.release();
    /// assert!(report.was_held);
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(mut self) -> ReleaseReport {
        self.release_now()
            .expect("present until released, and release takes the guard")
    }

    fn release_now(&mut self) -> Option<ReleaseReport> {
        let guard = self.guard.take()?;
        Some(self.held.runtime.run(async move { guard.release().await }))
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Released before the drop returns: a scope's end is a release
        // point the caller can rely on, as with a mutex guard.
        self.release_now();
    }
}
