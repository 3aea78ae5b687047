//! [`GuardOptions`]: one acquire's own TTL and watchdog setting.

use std::time::Duration;

use super::LockConfig;
use super::builder::check_ttl_with;
use crate::error::ConfigError;

/// How one acquire keeps its guard, when it differs from the lock's
/// configuration: the keys' TTL and whether the watchdog renews it.
/// Redisson users know this as `tryLock(wait, lease)`; one [`MultiLock`]
/// (one set of connections) serves every lease length.
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
/// // A short job: a 2 s lease, no watchdog.
/// let quick = GuardOptions::default().ttl(Duration::from_secs(2));
/// let guard = lock.acquire_with("cache-warm", Wait::up_to(Duration::from_secs(1)), &quick).await?;
/// assert!(guard.validity() <= Duration::from_secs(2));
/// guard.release().await;
/// // A long one: the watchdog keeps it alive, whatever the lock's default.
/// let long = GuardOptions::default().watchdog(true);
/// let guard = lock.try_acquire_with("reindex", &long).await?;
/// guard.release().await;
/// # Ok(())
/// # }
/// ```
///
/// [`MultiLock`]: crate::MultiLock
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct GuardOptions {
    ttl: Option<Duration>,
    watchdog: Option<bool>,
}

impl GuardOptions {
    /// The keys' TTL for this guard (default: the lock's). Checked as the
    /// lock's TTL is: a TTL that leaves no validity is
    /// [`Error::Config`](crate::Error::Config).
    ///
    /// ```
    /// use std::time::Duration;
    /// let brief = quorumlock::GuardOptions::default().ttl(Duration::from_secs(3));
    /// assert_eq!(brief, quorumlock::GuardOptions::default().ttl(Duration::from_secs(3)));
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> GuardOptions {
        self.ttl = Some(ttl);
        self
    }

    /// Whether the watchdog renews this guard (default: the lock's
    /// setting).
    ///
    /// ```
    /// let watched = quorumlock::GuardOptions::default().watchdog(true);
    /// assert_ne!(watched, quorumlock::GuardOptions::default());
    /// ```
    pub fn watchdog(mut self, on: bool) -> GuardOptions {
        self.watchdog = Some(on);
        self
    }

    /// The TTL and watchdog setting for a guard of a lock with `config`,
    /// the TTL checked against the other settings.
    pub(crate) fn resolve(&self, config: &LockConfig) -> Result<(bool, Duration), ConfigError> {
        let ttl = self.ttl.unwrap_or(config.ttl);
        check_ttl_with(
            ttl,
            config.node_timeout,
            config.drift_factor,
            config.min_validity_for(ttl),
        )?;
        Ok((self.watchdog.unwrap_or(config.watchdog), ttl))
    }
}
