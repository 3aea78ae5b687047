//! Lock settings, their defaults, and the checks that reject settings which
//! cannot give a safe lock.
//!
//! * this file: [`LockConfig`], the validated settings, and their getters;
//! * `builder`: [`LockConfigBuilder`], the defaults and the checks `build`
//!   runs (also on a TTL given at run time, [`check_ttl`]);
//! * `nodes`: what a node is (a URL, a client, a Sentinel group), parsed
//!   and compared;
//! * `guard_options`: [`GuardOptions`], one acquire's own TTL and watchdog.

use std::time::Duration;

use crate::quorum::Quorum;
use crate::retry::RetryPolicy;

mod builder;
mod guard_options;
mod nodes;
#[cfg(test)]
mod tests;

pub use builder::LockConfigBuilder;
pub(crate) use builder::check_ttl;
pub use guard_options::GuardOptions;
pub use nodes::SentinelNode;
pub(crate) use nodes::{NodeAddress, SentinelGroup, Target, display_name};

/// The longest TTL accepted: what Redis's `PX`/`PEXPIRE` take (a signed
/// 64-bit millisecond count, kept well clear of overflow when added to the
/// server's clock).
const MAX_TTL: Duration = Duration::from_millis(1 << 46);

/// Validated settings of a [`MultiLock`](crate::MultiLock). Build one with
/// [`LockConfig::builder`].
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{LockConfig, Quorum};
///
/// let config = LockConfig::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .ttl(Duration::from_secs(10))
///     .quorum(Quorum::Majority)
///     .build()?;
/// assert_eq!(config.required_nodes(), 2);
/// // Defaults derived from the TTL:
/// assert_eq!(config.node_timeout(), Duration::from_millis(50));
/// assert_eq!(config.min_validity(), Duration::from_secs(1));
/// # Ok::<(), quorumlock::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LockConfig {
    pub(crate) nodes: Vec<NodeAddress>,
    pub(crate) ttl: Duration,
    pub(crate) quorum: Quorum,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) min_validity: Duration,
    pub(crate) watchdog: bool,
    pub(crate) renew_interval: Duration,
    pub(crate) loss_margin: Duration,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) wake_ups: bool,
    pub(crate) fair: bool,
    pub(crate) prefetch_fencing: bool,
    pub(crate) quarantine: Duration,
}

impl LockConfig {
    /// Default TTL: 30 s, Redisson's watchdog timeout.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert_eq!(config.ttl(), LockConfig::DEFAULT_TTL);
    /// # Ok(())
    /// # }
    /// ```
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// Default drift factor: 1 % of the TTL (plus 2 ms), as in Redlock.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert_eq!(config.drift_factor(), LockConfig::DEFAULT_DRIFT_FACTOR);
    /// # Ok(())
    /// # }
    /// ```
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
    /// Upper bound of the default per-node timeout.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// // With the default 30 s TTL, a tenth of it is longer: the bound applies.
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert_eq!(config.node_timeout(), LockConfig::DEFAULT_NODE_TIMEOUT);
    /// # Ok(())
    /// # }
    /// ```
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Default bound on establishing one connection (runs in the background;
    /// callers never wait longer than their node timeout for it).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert_eq!(config.connect_timeout(), LockConfig::DEFAULT_CONNECT_TIMEOUT);
    /// # Ok(())
    /// # }
    /// ```
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

    /// Starts a builder.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert_eq!(config.node_urls().count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> LockConfigBuilder {
        LockConfigBuilder::default()
    }

    /// The least validity a win with `ttl` must leave: the configured one,
    /// scaled down for a guard with a shorter TTL of its own (as the
    /// renewal interval and the loss margin are).
    pub(crate) fn min_validity_for(&self, ttl: Duration) -> Duration {
        if ttl >= self.ttl {
            self.min_validity
        } else {
            self.min_validity
                .mul_f64(ttl.as_secs_f64() / self.ttl.as_secs_f64())
        }
    }

    /// The node URLs, in configuration order, each password replaced by
    /// `***`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://locker:s3cret@10.0.0.1:6379")
    ///     .node("redis://10.0.0.2:6379")
    ///     .build()?;
    /// let urls: Vec<&str> = config.node_urls().collect();
    /// assert_eq!(urls, ["redis://locker:***@10.0.0.1:6379", "redis://10.0.0.2:6379"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn node_urls(&self) -> impl ExactSizeIterator<Item = &str> {
        self.nodes.iter().map(|n| n.shown.as_str())
    }

    /// Time to live of the lock keys.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(10))
    ///     .build()?;
    /// assert_eq!(config.ttl(), Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The quorum policy.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, Quorum};
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").quorum(Quorum::All).build()?;
    /// assert_eq!(config.quorum(), Quorum::All);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quorum(&self) -> Quorum {
        self.quorum
    }

    /// Nodes an acquire must win: the policy applied to the node count.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, Quorum};
    /// let config = LockConfig::builder()
    ///     .nodes((0..5).map(|i| format!("redis://10.0.0.{i}:6379")))
    ///     .quorum(Quorum::AtLeast(4))
    ///     .build()?;
    /// assert_eq!(config.required_nodes(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn required_nodes(&self) -> usize {
        self.quorum.required(self.nodes.len())
    }

    /// The clock-drift factor.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .drift_factor(0.02)
    ///     .build()?;
    /// assert_eq!(config.drift_factor(), 0.02);
    /// # Ok(())
    /// # }
    /// ```
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// Deadline of each fan-out: no node is waited on longer.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .node_timeout(Duration::from_millis(20))
    ///     .build()?;
    /// assert_eq!(config.node_timeout(), Duration::from_millis(20));
    /// # Ok(())
    /// # }
    /// ```
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// Bound on establishing one connection.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .connect_timeout(Duration::from_millis(500))
    ///     .build()?;
    /// assert_eq!(config.connect_timeout(), Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How `acquire` spaces its attempts.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, RetryPolicy};
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .retry(RetryPolicy::default().with_max_attempts(3))
    ///     .build()?;
    /// assert_eq!(config.retry().max_attempts(), Some(3));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// A win that leaves no more validity than this is rolled back.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(10))
    ///     .build()?;
    /// assert_eq!(config.min_validity(), Duration::from_secs(1), "a tenth of the TTL");
    /// # Ok(())
    /// # }
    /// ```
    pub fn min_validity(&self) -> Duration {
        self.min_validity
    }

    /// Whether guards from `acquire`/`try_acquire` renew themselves in the
    /// background (see [`crate::watchdog`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .watchdog(true)
    ///     .build()?;
    /// assert!(config.watchdog());
    /// # Ok(())
    /// # }
    /// ```
    pub fn watchdog(&self) -> bool {
        self.watchdog
    }

    /// Whether waiting acquires are woken by release notices (see
    /// [`crate::wake`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .build()?;
    /// assert!(config.wake_ups(), "on by default");
    /// # Ok(())
    /// # }
    /// ```
    pub fn wake_ups(&self) -> bool {
        self.wake_ups
    }

    /// Whether waiters queue across processes, first come, first served
    /// (see [`LockConfigBuilder::fair`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert!(!config.fair(), "off by default");
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair(&self) -> bool {
        self.fair
    }

    /// Whether every acquire reads the fencing counters from the start
    /// (see [`LockConfigBuilder::prefetch_fencing`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").build()?;
    /// assert!(!config.prefetch_fencing(), "off by default");
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefetch_fencing(&self) -> bool {
        self.prefetch_fencing
    }

    /// How long a node whose data may be incomplete casts no vote (see
    /// [`LockConfigBuilder::quarantine`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(10))
    ///     .build()?;
    /// assert_eq!(config.quarantine(), Duration::from_secs(10), "the TTL by default");
    /// # Ok(())
    /// # }
    /// ```
    pub fn quarantine(&self) -> Duration {
        self.quarantine
    }

    /// How long after a successful acquire or renewal the watchdog renews.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(30))
    ///     .build()?;
    /// assert_eq!(config.renew_interval(), Duration::from_secs(10), "a third of the TTL");
    /// # Ok(())
    /// # }
    /// ```
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// How long before its validity deadline a guard is declared lost when
    /// no renewal succeeded.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(30))
    ///     .build()?;
    /// assert_eq!(config.loss_margin(), Duration::from_secs(3), "a tenth of the TTL");
    /// # Ok(())
    /// # }
    /// ```
    pub fn loss_margin(&self) -> Duration {
        self.loss_margin
    }

    /// How long the watchdog keeps renewing one guard, if bounded.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .max_hold(Duration::from_secs(3600))
    ///     .build()?;
    /// assert_eq!(config.max_hold(), Some(Duration::from_secs(3600)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_hold(&self) -> Option<Duration> {
        self.max_hold
    }
}
