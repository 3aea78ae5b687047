//! [`MultiLock::run_exclusive`]: hold a lock for exactly as long as a piece
//! of work runs, with the watchdog on, and give it back however the work
//! ends.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use crate::acquire::Request;
use crate::error::Error;
use crate::guard::HeldLock;
use crate::lock::MultiLock;
use crate::wait::Wait;

impl MultiLock {
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
    ///   cancelled with [`LostReason::MaxHoldReached`](crate::LostReason::MaxHoldReached).
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
        let guard = self
            .acquire_request(
                Request::new(&[key], None, (true, self.config().ttl()))?,
                Some(wait.budget()),
            )
            .await?;
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
}
