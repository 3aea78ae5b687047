//! [`LockConfigBuilder`]: the defaults, and the checks `build` runs.

use std::fmt;
use std::time::Duration;

use redis::Client;

use super::nodes::{NodeSpec, mark_durable, parse_nodes};
use super::{LockConfig, MAX_TTL, SentinelNode};
use crate::error::ConfigError;
use crate::quorum::{self, Quorum};
use crate::redact::redact_url;
use crate::retry::RetryPolicy;

/// Builder for [`LockConfig`]; every setting but the nodes has a default.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use quorumlock::{LockConfig, Quorum};
///
/// let config = LockConfig::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .quorum(Quorum::Majority)
///     .ttl(Duration::from_secs(10))
///     .watchdog(true)
///     .build()?;
/// assert_eq!(config.required_nodes(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct LockConfigBuilder {
    nodes: Vec<NodeSpec>,
    ttl: Option<Duration>,
    quorum: Quorum,
    drift_factor: Option<f64>,
    node_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    retry: RetryPolicy,
    min_validity: Option<Duration>,
    watchdog: bool,
    renew_interval: Option<Duration>,
    loss_margin: Option<Duration>,
    max_hold: Option<Duration>,
    wake_ups: Option<bool>,
    fair: bool,
    prefetch_fencing: bool,
    quarantine: Option<Duration>,
    durable: Vec<String>,
}

impl fmt::Debug for LockConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |urls: &[String]| urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>();
        let nodes: Vec<String> = self.nodes.iter().map(NodeSpec::shown).collect();
        f.debug_struct("LockConfigBuilder")
            .field("nodes", &nodes)
            .field("ttl", &self.ttl)
            .field("quorum", &self.quorum)
            .field("drift_factor", &self.drift_factor)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .field("min_validity", &self.min_validity)
            .field("watchdog", &self.watchdog)
            .field("renew_interval", &self.renew_interval)
            .field("loss_margin", &self.loss_margin)
            .field("max_hold", &self.max_hold)
            .field("wake_ups", &self.wake_ups)
            .field("fair", &self.fair)
            .field("prefetch_fencing", &self.prefetch_fencing)
            .field("quarantine", &self.quarantine)
            .field("durable", &shown(&self.durable))
            .finish()
    }
}

impl LockConfigBuilder {
    /// Adds one node, a `redis://` URL (or `rediss://` with the `tls-rustls`
    /// or `tls-native-tls` feature, or `redis+unix://`).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://10.0.0.1:6379")
    ///     .node("redis://user:password@10.0.0.2:6379/0")
    ///     .node("redis+unix:///run/redis/redis.sock")
    ///     .build()?;
    /// assert_eq!(config.node_urls().count(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(NodeSpec::Url(url.into()));
        self
    }

    /// Adds several nodes.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let urls = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
    /// let config = LockConfig::builder().nodes(urls).build()?;
    /// assert_eq!(config.node_urls().count(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes
            .extend(urls.into_iter().map(|url| NodeSpec::Url(url.into())));
        self
    }

    /// Adds one node from a client you configured yourself: what a URL
    /// cannot say, such as TLS with your own CA or a client certificate
    /// (`redis::Client::build_with_tls`, with a TLS feature), RESP3, or a unix socket with a
    /// password. The lock makes its own connection from it: **one ordered
    /// connection per node**, never a pool, because a release must reach a
    /// node after the acquire it undoes, and only one connection keeps
    /// that order.
    ///
    /// The node is shown (and named in [`durable_nodes`](Self::durable_nodes))
    /// as `redis://host:port[/db]`, `rediss://…` or the socket path, without
    /// credentials.
    ///
    /// ```
    /// use quorumlock::LockConfig;
    /// // The `redis` crate of the version the lock uses.
    /// use quorumlock::redis::{self, ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo};
    ///
    /// // RESP3, which a URL cannot ask for.
    /// let info = ConnectionAddr::Tcp("10.0.0.1".into(), 6379)
    ///     .into_connection_info()?
    ///     .set_redis_settings(RedisConnectionInfo::default().set_protocol(ProtocolVersion::RESP3));
    /// let config = LockConfig::builder()
    ///     .node_client(redis::Client::open(info)?)
    ///     .build()?;
    /// assert_eq!(config.node_urls().count(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn node_client(mut self, client: Client) -> Self {
        self.nodes.push(NodeSpec::Client(Box::new(client)));
        self
    }

    /// Adds one node that is a Sentinel-managed master group: the node
    /// connects to whichever server the sentinels name as the master, asks
    /// again at every reconnection, and drops a connection whose server
    /// answers `READONLY` (demoted by a failover), so it follows failovers.
    ///
    /// ```no_run
    /// use quorumlock::{LockConfig, SentinelNode};
    ///
    /// fn sentinels(zone: &str) -> Vec<String> {
    ///     (1..=3)
    ///         .map(|i| format!("redis://sentinel-{i}.{zone}.internal:26379"))
    ///         .collect()
    /// }
    /// let config = LockConfig::builder()
    ///     .sentinel_node(SentinelNode::new("locks-a", sentinels("a")))
    ///     .sentinel_node(SentinelNode::new("locks-b", sentinels("b")))
    ///     .sentinel_node(SentinelNode::new("locks-c", sentinels("c")))
    ///     .build()?;
    /// assert_eq!(config.node_urls().next(), Some("redis+sentinel://locks-a"));
    /// # Ok::<(), quorumlock::ConfigError>(())
    /// ```
    pub fn sentinel_node(mut self, node: SentinelNode) -> Self {
        self.nodes.push(NodeSpec::Sentinel(node));
        self
    }

    /// Time to live of the lock keys (default 30 s). The holder's validity is
    /// always shorter: TTL minus the acquire time minus the drift allowance.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").ttl(Duration::from_secs(5)).build()?;
    /// assert_eq!(config.ttl(), Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Quorum policy (default [`Quorum::Majority`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// use quorumlock::Quorum;
    /// let config = LockConfig::builder()
    ///     .nodes((1..=5).map(|i| format!("redis://10.0.0.{i}:6379")))
    ///     .quorum(Quorum::AtLeast(4))
    ///     .build()?;
    /// assert_eq!(config.required_nodes(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quorum(mut self, quorum: Quorum) -> Self {
        self.quorum = quorum;
        self
    }

    /// Clock-drift factor (default 0.01): the allowance is
    /// `ttl × drift_factor + 2 ms`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").drift_factor(0.05).build()?;
    /// assert_eq!(config.drift_factor(), 0.05);
    /// // Out of range: a typed error naming the value.
    /// assert!(LockConfig::builder().node("redis://127.0.0.1:6379").drift_factor(2.0).build().is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = Some(factor);
        self
    }

    /// Per-node timeout (default: 50 ms or a tenth of the TTL, whichever is
    /// smaller). Must be at most a tenth of the TTL.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .node_timeout(Duration::from_millis(25))
    ///     .build()?;
    /// assert_eq!(config.node_timeout(), Duration::from_millis(25));
    /// # Ok(())
    /// # }
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Bound on establishing a connection (default 1 s).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .connect_timeout(Duration::from_secs(2))
    ///     .build()?;
    /// assert_eq!(config.connect_timeout(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Retry policy for [`MultiLock::acquire`](crate::MultiLock::acquire).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// use quorumlock::RetryPolicy;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .retry(RetryPolicy::default().with_base_delay(Duration::from_millis(5)))
    ///     .build()?;
    /// assert_eq!(config.retry().base_delay(), Duration::from_millis(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Minimum validity a win must leave (default: a tenth of the TTL).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(10))
    ///     .min_validity(Duration::from_secs(2))
    ///     .build()?;
    /// assert_eq!(config.min_validity(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.min_validity = Some(min);
        self
    }

    /// Turns the watchdog on for every guard of `acquire` and `try_acquire`
    /// (default off; [`MultiLock::run_exclusive`](crate::MultiLock::run_exclusive)
    /// always uses it). See [`crate::watchdog`] for what it guarantees.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").watchdog(true).build()?;
    /// assert!(config.watchdog());
    /// # Ok(())
    /// # }
    /// ```
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// Wakes waiting acquires when a holder releases (default on): one
    /// pub/sub subscriber connection per node, opened on the first wait.
    /// Off: waiters poll with the jittered backoff only. See [`crate::wake`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").wake_ups(false).build()?;
    /// assert!(!config.wake_ups());
    /// # Ok(())
    /// # }
    /// ```
    pub fn wake_ups(mut self, on: bool) -> Self {
        self.wake_ups = Some(on);
        self
    }

    /// Waiters queue for a name across processes, first come, first
    /// served (default off). A waiting acquire takes a place in the name's
    /// waiter queue on each node that refuses it, ordered by when the call
    /// began; a free name then goes only to the first waiter in line, and
    /// its release notice wakes that waiter alone. Without it, waiters
    /// queue too (from the attempt they make at once after their first is
    /// refused), but only for the notice: a release wakes the longest
    /// waiting one alone, which nearly always takes the name, yet their
    /// places refuse nobody (they queue behind every fair place), so a
    /// caller that asks just after a release may take the name first. A
    /// process that released a name another process waits for steps aside
    /// for a moment so that it does not win every time (see
    /// [`wake_ups`](Self::wake_ups)).
    ///
    /// Every client honours the queues, fair or not: a name some fair
    /// waiter queues for is refused to the others
    /// ([`NodeOutcome::WaitersAhead`](crate::NodeOutcome::WaitersAhead)).
    /// The cost of the order: a waiter whose process stops (a crash, a long
    /// pause) holds a free name back until its place lapses, two longest
    /// backoffs plus a node timeout after its last attempt (at least 2 s).
    /// Needs wake-ups (a waiter learns its turn from the release notice):
    /// with [`wake_ups(false)`](Self::wake_ups), `build` fails with
    /// [`ConfigError::FairNeedsWakeUps`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder().node("redis://127.0.0.1:6379").fair(true).build()?;
    /// assert!(config.fair());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// Every acquire reads its names' fencing counters from the start
    /// (default off: from the first time a holder of this lock service
    /// asks for a [fencing token](crate::HeldLock::fencing_token)).
    ///
    /// A token needs the counters of a majority of the nodes. The acquire
    /// reads them from every node it wins, at no extra round trip, but the
    /// read is about a fifth of an acquire's work on a node, wasted when
    /// nobody asks for a token. So by default a lock service's acquires
    /// skip it until one of its holders first asks for a token, and that
    /// first token reads the counters itself: one more round trip, once.
    /// Turn this on when the very first token's latency matters too (a
    /// short-lived process that takes one lock and asks for its token,
    /// as `quorumlock run` does).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .prefetch_fencing(true)
    ///     .build()?;
    /// assert!(config.prefetch_fencing());
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefetch_fencing(mut self, on: bool) -> Self {
        self.prefetch_fencing = on;
        self
    }

    /// How long a node whose data may be incomplete casts no vote (default:
    /// the TTL). Set it to **the longest TTL any client uses on these
    /// nodes**.
    ///
    /// A node's data may be incomplete when it restarted (with or without
    /// persistence), was promoted from a replica, or is met with no record
    /// of its history: a lock it lost could then be won by a second owner
    /// while the first still holds it on the other nodes. Such a node
    /// still takes every write (so it blocks others), but its answers do
    /// not count toward any quorum (acquire, extend, renewal, fencing)
    /// until the quarantine has passed since that event, on the node's own
    /// clock: by then every lock it may have lost has expired everywhere.
    /// The check runs inside the same script call as the vote. A long-
    /// running master that was never promoted is dated from its start, so
    /// a deployment of running servers locks at once;
    /// [`MultiLock::adopt_empty_nodes`](crate::MultiLock::adopt_empty_nodes)
    /// adopts brand-new, empty ones at once.
    ///
    /// `Duration::ZERO` turns the quarantine off: a restart or failover
    /// then relies on operators delaying it by a TTL, as plain Redlock does.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// // Clients on these nodes use TTLs up to 60 s.
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(10))
    ///     .quarantine(Duration::from_secs(60))
    ///     .build()?;
    /// assert_eq!(config.quarantine(), Duration::from_secs(60));
    /// # Ok(())
    /// # }
    /// ```
    pub fn quarantine(mut self, quarantine: Duration) -> Self {
        self.quarantine = Some(quarantine);
        self
    }

    /// Declares nodes durable (give each URL exactly as given to
    /// [`node`](Self::node)): AOF with `appendfsync always`, never failed
    /// over to a replica. They skip the quarantine after a restart. Only
    /// for nodes that truly lose nothing: a durable node that loses data
    /// breaks mutual exclusion.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    ///     .durable_nodes(["redis://10.0.0.1:6379"])
    ///     .build()?;
    /// assert_eq!(config.node_urls().count(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn durable_nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.durable.extend(urls.into_iter().map(Into::into));
        self
    }

    /// How long after a successful acquire or renewal the watchdog renews
    /// (default: a third of the TTL, as Redisson). Renewals due within a
    /// tenth of this of each other are sent to each node together.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(30))
    ///     .renew_interval(Duration::from_secs(5))
    ///     .build()?;
    /// assert_eq!(config.renew_interval(), Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// How long before the validity deadline a guard whose renewals keep
    /// failing is declared lost (default: a tenth of the TTL). It must cover
    /// the time the holder needs to notice and stop.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(30))
    ///     .loss_margin(Duration::from_secs(5))
    ///     .build()?;
    /// assert_eq!(config.loss_margin(), Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = Some(margin);
        self
    }

    /// Stops renewing a guard this long after it was acquired (default:
    /// never). The guard then runs out its validity and is declared lost
    /// with [`LostReason::MaxHoldReached`](crate::LostReason::MaxHoldReached).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .watchdog(true)
    ///     .max_hold(Duration::from_secs(15 * 60))
    ///     .build()?;
    /// assert_eq!(config.max_hold(), Some(Duration::from_secs(900)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Checks every setting and returns the first problem, naming the field
    /// and the value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::{ConfigError, LockConfig};
    ///
    /// // A node timeout over a tenth of the TTL cannot work: refused, with the values.
    /// let refused = LockConfig::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .ttl(Duration::from_secs(1))
    ///     .node_timeout(Duration::from_millis(500))
    ///     .build();
    /// assert!(matches!(refused, Err(ConfigError::NodeTimeoutOutOfRange { .. })));
    /// assert!(matches!(LockConfig::builder().build(), Err(ConfigError::NoNodes)));
    /// ```
    pub fn build(self) -> Result<LockConfig, ConfigError> {
        let mut nodes = parse_nodes(self.nodes)?;
        mark_durable(&mut nodes, self.durable)?;
        let n = nodes.len();
        if let Quorum::AtLeast(k) = self.quorum
            && (k == 0 || k > n)
        {
            return Err(ConfigError::QuorumOutOfRange { k, nodes: n });
        }

        let ttl = self.ttl.unwrap_or(LockConfig::DEFAULT_TTL);
        let node_timeout = self
            .node_timeout
            .unwrap_or_else(|| LockConfig::DEFAULT_NODE_TIMEOUT.min(ttl / 10));
        let connect_timeout = connect_timeout(self.connect_timeout)?;
        let drift_factor = drift_factor(self.drift_factor)?;
        let min_validity = self.min_validity.unwrap_or(ttl / 10);
        check_ttl_with(ttl, node_timeout, drift_factor, min_validity)?;
        self.retry.validate()?;
        let lease = quorum::lease(ttl, drift_factor);
        let loss_margin = self.loss_margin.unwrap_or(ttl / 10);
        if loss_margin.is_zero() || loss_margin >= lease {
            return Err(ConfigError::LossMarginOutOfRange { loss_margin, lease });
        }
        // A renewal must be due before the loss is: leave room for retries.
        let renew_interval = self.renew_interval.unwrap_or(ttl / 3);
        let max_interval = lease - loss_margin;
        if renew_interval.is_zero() || renew_interval >= max_interval {
            return Err(ConfigError::RenewIntervalOutOfRange {
                renew_interval,
                max: max_interval,
            });
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(ConfigError::MaxHoldZero);
        }
        let wake_ups = self.wake_ups.unwrap_or(true);
        if self.fair && !wake_ups {
            return Err(ConfigError::FairNeedsWakeUps);
        }
        let quarantine = self.quarantine.unwrap_or(ttl);
        if quarantine > MAX_TTL {
            return Err(ConfigError::QuarantineOutOfRange {
                quarantine,
                max: MAX_TTL,
            });
        }

        Ok(LockConfig {
            nodes,
            ttl,
            quorum: self.quorum,
            drift_factor,
            node_timeout,
            connect_timeout,
            retry: self.retry,
            min_validity,
            watchdog: self.watchdog,
            wake_ups,
            fair: self.fair,
            prefetch_fencing: self.prefetch_fencing,
            renew_interval,
            loss_margin,
            max_hold: self.max_hold,
            quarantine,
        })
    }
}

/// The connect timeout set, or the default; never zero.
fn connect_timeout(set: Option<Duration>) -> Result<Duration, ConfigError> {
    let value = set.unwrap_or(LockConfig::DEFAULT_CONNECT_TIMEOUT);
    if value.is_zero() {
        return Err(ConfigError::ConnectTimeoutZero { value });
    }
    Ok(value)
}

/// The drift factor set, or the default; finite, in [0, 1).
fn drift_factor(set: Option<f64>) -> Result<f64, ConfigError> {
    let value = set.unwrap_or(LockConfig::DEFAULT_DRIFT_FACTOR);
    if !(value.is_finite() && (0.0..1.0).contains(&value)) {
        return Err(ConfigError::DriftFactorOutOfRange { value });
    }
    Ok(value)
}

/// Checks a TTL passed at run time (e.g. to `extend`) against the lock's
/// other settings, as `build` does for the configured one.
pub(crate) fn check_ttl(ttl: Duration, config: &LockConfig) -> Result<(), ConfigError> {
    check_ttl_with(
        ttl,
        config.node_timeout,
        config.drift_factor,
        config.min_validity,
    )
}

pub(super) fn check_ttl_with(
    ttl: Duration,
    node_timeout: Duration,
    drift_factor: f64,
    min_validity: Duration,
) -> Result<(), ConfigError> {
    if ttl < Duration::from_millis(1) || ttl > MAX_TTL {
        return Err(ConfigError::TtlOutOfRange { ttl, max: MAX_TTL });
    }
    // "Well below": a fan-out that uses its whole timeout still leaves most
    // of the TTL as validity.
    let max = ttl / 10;
    if node_timeout.is_zero() || node_timeout > max {
        return Err(ConfigError::NodeTimeoutOutOfRange {
            node_timeout,
            ttl,
            max,
        });
    }
    let drift = quorum::drift(ttl, drift_factor);
    if quorum::lease(ttl, drift_factor) <= min_validity {
        return Err(ConfigError::NoValidityLeft {
            ttl,
            drift_factor,
            drift,
            min_validity,
        });
    }
    Ok(())
}
