//! Lock settings, their defaults, and the checks that reject settings which
//! cannot give a safe lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use crate::error::ConfigError;
use crate::quorum::{self, Quorum};
use crate::redact::redact_url;
use crate::retry::RetryPolicy;

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
    pub(crate) quarantine: Duration,
}

/// One configured node: the URL as given and what it parsed to.
#[derive(Clone)]
pub(crate) struct NodeAddress {
    /// As given, credentials included: only compared, never shown.
    pub(crate) url: String,
    /// As shown: the password replaced by `***`.
    pub(crate) shown: String,
    pub(crate) target: Target,
    /// Declared durable: no quarantine after a restart.
    pub(crate) durable: bool,
}

/// Where a node's server is found.
#[derive(Clone)]
// Large only with a TLS feature (its client carries the TLS settings):
// one per node, made once, so boxing the common case would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    /// Always this server.
    Direct(Client),
    /// Whichever server a Sentinel group names as its master, asked again
    /// at every (re)connection.
    Sentinel(Arc<SentinelGroup>),
}

/// A Sentinel-managed master, as the node connects to it.
pub(crate) struct SentinelGroup {
    /// The master group's name (`sentinel monitor <name> …`).
    pub(crate) service: String,
    /// One client per sentinel, asked in this order.
    pub(crate) sentinels: Vec<Client>,
    /// Credentials, database and protocol for the master.
    pub(crate) master: RedisConnectionInfo,
    /// The longest `min-replicas-max-lag` its masters may have: how long a
    /// master cut off from its replicas may still take writes.
    pub(crate) max_replica_lag: Duration,
}

impl SentinelGroup {
    /// What a Sentinel node adds to the quarantine: a master cut off from
    /// its replicas and the sentinels takes our scripts until its replicas'
    /// last acknowledgement is `max_replica_lag` old (whole seconds, an
    /// acknowledgement a second), so up to that plus 2 s after the replica
    /// that replaces it was promoted.
    pub(crate) fn extra_quarantine(&self) -> Duration {
        self.max_replica_lag + Duration::from_secs(2)
    }
}

impl Target {
    /// The client to connect with when it does not move (`None`: ask the
    /// sentinels).
    pub(crate) fn direct(&self) -> Option<&Client> {
        match self {
            Target::Direct(client) => Some(client),
            Target::Sentinel(_) => None,
        }
    }
}

impl fmt::Debug for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeAddress")
            .field("url", &self.shown)
            .field("durable", &self.durable)
            .finish_non_exhaustive()
    }
}

/// A node as given to the builder.
#[derive(Clone)]
enum NodeSpec {
    Url(String),
    Client(Box<Client>),
    Sentinel(SentinelNode),
}

impl NodeSpec {
    /// As shown in `Debug` and errors: no password.
    fn shown(&self) -> String {
        match self {
            NodeSpec::Url(url) => redact_url(url),
            NodeSpec::Client(client) => display_name(client.get_connection_info()),
            NodeSpec::Sentinel(node) => node.shown(),
        }
    }
}

/// A node that is a Sentinel-managed master group, for
/// [`LockConfigBuilder::sentinel_node`]: the lock asks the sentinels for
/// the current master at every (re)connection, so it follows failovers.
///
/// A failover is data loss for a lock when the promoted replica missed
/// the lock key; the node's epoch (see the crate docs on the quarantine)
/// makes the promoted replica cast no vote for the quarantine.
///
/// A failover can also leave **two masters**: the old one, cut off from
/// the sentinels but not from a client, keeps taking that client's
/// renewals while the promoted replica's quarantine runs out. So a
/// Sentinel node votes only on masters that refuse writes once cut off
/// from their replicas: each master must have `min-replicas-to-write 1`
/// (or more) and `min-replicas-max-lag` at most
/// [`max_replica_lag`](Self::max_replica_lag) (checked with `CONFIG GET`
/// on every connection: a master that fails the check, or refuses the
/// check, gets no vote). Every script goes to it flagged as a write
/// (`#!lua`, Redis 7), so such a master refuses all of them (`NOREPLICAS`)
/// from at most that lag plus 2 s after the promotion, and the node's
/// quarantine is that much longer than the lock's: every key the old
/// master extended has expired before the promoted replica votes.
#[derive(Clone)]
pub struct SentinelNode {
    service: String,
    sentinels: Vec<String>,
    master: RedisConnectionInfo,
    max_replica_lag: Duration,
}

impl SentinelNode {
    /// The master group `service` (its name in `sentinel monitor`), found
    /// through these sentinels (`redis://host:port` URLs), asked in order.
    pub fn new<I, S>(service: impl Into<String>, sentinels: I) -> SentinelNode
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SentinelNode {
            service: service.into(),
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: RedisConnectionInfo::default(),
            max_replica_lag: Duration::from_secs(10),
        }
    }

    /// The largest `min-replicas-max-lag` a master of this group may have
    /// (default 10 s, Redis's default). The node's quarantine is this plus
    /// 2 s longer than the lock's.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::SentinelNode;
    ///
    /// let node = SentinelNode::new("locks-a", ["redis://10.0.1.1:26379"])
    ///     .max_replica_lag(Duration::from_secs(2));
    /// assert_eq!(node.replica_lag(), Duration::from_secs(2));
    /// ```
    pub fn max_replica_lag(mut self, lag: Duration) -> SentinelNode {
        self.max_replica_lag = lag;
        self
    }

    /// The bound set by [`max_replica_lag`](Self::max_replica_lag).
    ///
    /// ```
    /// use std::time::Duration;
    /// let node = quorumlock::SentinelNode::new("locks-a", ["redis://10.0.1.1:26379"]);
    /// assert_eq!(node.replica_lag(), Duration::from_secs(10));
    /// ```
    pub fn replica_lag(&self) -> Duration {
        self.max_replica_lag
    }

    /// Credentials, database and protocol for the master (default: none,
    /// database 0, RESP2).
    pub fn master_settings(mut self, settings: RedisConnectionInfo) -> SentinelNode {
        self.master = settings;
        self
    }

    /// `redis+sentinel://<service>`: how the node is shown and named (e.g.
    /// in [`LockConfigBuilder::durable_nodes`]).
    fn shown(&self) -> String {
        format!("redis+sentinel://{}", self.service)
    }
}

impl fmt::Debug for SentinelNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sentinels: Vec<String> = self.sentinels.iter().map(|u| redact_url(u)).collect();
        f.debug_struct("SentinelNode")
            .field("service", &self.service)
            .field("sentinels", &sentinels)
            .finish_non_exhaustive()
    }
}

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
            .field("quarantine", &self.quarantine)
            .field("durable", &shown(&self.durable))
            .finish()
    }
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
    /// its release notice wakes that waiter alone. Without it, the waiter
    /// whose attempt reaches the nodes first wins, often the process that
    /// just released (higher throughput under contention, no fairness).
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
        let connect_timeout = self
            .connect_timeout
            .unwrap_or(LockConfig::DEFAULT_CONNECT_TIMEOUT);
        if connect_timeout.is_zero() {
            return Err(ConfigError::ConnectTimeoutZero {
                value: connect_timeout,
            });
        }
        let drift_factor = self
            .drift_factor
            .unwrap_or(LockConfig::DEFAULT_DRIFT_FACTOR);
        if !(drift_factor.is_finite() && (0.0..1.0).contains(&drift_factor)) {
            return Err(ConfigError::DriftFactorOutOfRange {
                value: drift_factor,
            });
        }
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
            renew_interval,
            loss_margin,
            max_hold: self.max_hold,
            quarantine,
        })
    }
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

fn check_ttl_with(
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

fn parse_nodes(specs: Vec<NodeSpec>) -> Result<Vec<NodeAddress>, ConfigError> {
    if specs.is_empty() {
        return Err(ConfigError::NoNodes);
    }
    let mut nodes: Vec<NodeAddress> = Vec::with_capacity(specs.len());
    for spec in specs {
        let node = match spec {
            NodeSpec::Url(url) => from_url(url)?,
            NodeSpec::Client(client) => {
                let shown = display_name(client.get_connection_info());
                NodeAddress {
                    url: shown.clone(),
                    shown,
                    target: Target::Direct(*client),
                    durable: false,
                }
            }
            NodeSpec::Sentinel(node) => from_sentinel(node)?,
        };
        if let Some(first) = nodes.iter().find(|n| same_target(&n.target, &node.target)) {
            return Err(ConfigError::DuplicateNode {
                url: node.shown,
                first: first.shown.clone(),
            });
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// A node from its URL.
fn from_url(url: String) -> Result<NodeAddress, ConfigError> {
    let client = client_from_url(&url)?;
    Ok(NodeAddress {
        shown: redact_url(&url),
        url,
        target: Target::Direct(client),
        durable: false,
    })
}

/// A client for a URL; `rediss://` needs a TLS feature.
fn client_from_url(url: &str) -> Result<Client, ConfigError> {
    let tls_on = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));
    if !tls_on
        && url
            .get(..9)
            .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
    {
        return Err(ConfigError::TlsNotEnabled {
            url: redact_url(url),
        });
    }
    let info = url
        .into_connection_info()
        .map_err(|e| invalid_url(url, &e))?;
    Client::open(info).map_err(|e| invalid_url(url, &e))
}

/// A node from its Sentinel group: each sentinel URL must parse.
fn from_sentinel(node: SentinelNode) -> Result<NodeAddress, ConfigError> {
    let shown = node.shown();
    if node.sentinels.is_empty() {
        return Err(ConfigError::NoSentinels {
            service: node.service,
        });
    }
    let sentinels = node
        .sentinels
        .iter()
        .map(|url| client_from_url(url))
        .collect::<Result<Vec<Client>, ConfigError>>()?;
    Ok(NodeAddress {
        url: shown.clone(),
        shown,
        target: Target::Sentinel(Arc::new(SentinelGroup {
            service: node.service,
            sentinels,
            master: node.master,
            max_replica_lag: node.max_replica_lag,
        })),
        durable: false,
    })
}

/// Two targets that would lock the same keys: the same address and
/// database, or the same Sentinel group.
fn same_target(a: &Target, b: &Target) -> bool {
    match (a, b) {
        (Target::Direct(a), Target::Direct(b)) => {
            same_server(a.get_connection_info(), b.get_connection_info())
        }
        (Target::Sentinel(a), Target::Sentinel(b)) => a.service == b.service,
        _ => false,
    }
}

/// `redis://host:port[/db]`, without credentials, for reports and logs.
pub(crate) fn display_name(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    let db = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{}{db}", host_port(host, *port)),
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{}{db}", host_port(host, *port))
        }
        other => format!("{other}{db}"),
    }
}

/// `host:port`, an IPv6 address in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A URL the parser refused, shown without its password (in the parser's
/// words too, should they quote it).
fn invalid_url(url: &str, error: &redis::RedisError) -> ConfigError {
    let shown = redact_url(url);
    ConfigError::InvalidNodeUrl {
        reason: error.to_string().replace(url, &shown),
        url: shown,
    }
}

/// Marks the nodes named in `durable` (as given to the builder); a name
/// that is not one of the nodes is an error.
fn mark_durable(nodes: &mut [NodeAddress], durable: Vec<String>) -> Result<(), ConfigError> {
    for url in durable {
        match nodes.iter_mut().find(|n| n.url == url) {
            Some(node) => node.durable = true,
            None => {
                return Err(ConfigError::UnknownDurableNode {
                    url: redact_url(&url),
                });
            }
        }
    }
    Ok(())
}

/// Same address and database: two entries that would lock the same keys.
fn same_server(a: &ConnectionInfo, b: &ConnectionInfo) -> bool {
    let addr = |i: &ConnectionInfo| match i.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{}:{port}", host.to_ascii_lowercase())
        }
        other => other.to_string(),
    };
    addr(a) == addr(b) && a.redis_settings().db() == b.redis_settings().db()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> LockConfigBuilder {
        LockConfig::builder().nodes([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
    }

    #[test]
    fn defaults_are_documented_values() {
        let c = three().build().expect("valid");
        assert_eq!(c.ttl(), Duration::from_secs(30));
        assert_eq!(c.quorum(), Quorum::Majority);
        assert_eq!(c.required_nodes(), 2);
        assert_eq!(c.drift_factor(), 0.01);
        assert_eq!(c.node_timeout(), Duration::from_millis(50));
        assert_eq!(c.min_validity(), Duration::from_secs(3));
        // A short TTL scales the default node timeout down instead of failing.
        let c = three()
            .ttl(Duration::from_millis(200))
            .build()
            .expect("valid");
        assert_eq!(c.node_timeout(), Duration::from_millis(20));
    }

    #[test]
    fn no_nodes() {
        assert_eq!(
            LockConfig::builder().build().unwrap_err(),
            ConfigError::NoNodes
        );
    }

    #[test]
    fn unparsable_url_is_named() {
        let err = LockConfig::builder()
            .node("redis://127.0.0.1:1")
            .node("http://nope")
            .build()
            .unwrap_err();
        match &err {
            ConfigError::InvalidNodeUrl { url, .. } => assert_eq!(url, "http://nope"),
            other => panic!("expected InvalidNodeUrl, got {other:?}"),
        }
        assert!(err.to_string().contains("http://nope"), "{err}");
    }

    #[test]
    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    fn tls_without_a_tls_feature_names_the_feature() {
        let err = LockConfig::builder()
            .node("rediss://app:secret@127.0.0.1:6380")
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::TlsNotEnabled {
                url: "rediss://app:***@127.0.0.1:6380".into()
            }
        );
        assert!(err.to_string().contains("tls-rustls"), "{err}");
    }

    #[test]
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn tls_urls_parse_with_a_tls_feature() {
        let config = LockConfig::builder()
            .node("rediss://127.0.0.1:6380")
            .build()
            .expect("valid");
        assert_eq!(config.node_urls().next(), Some("rediss://127.0.0.1:6380"));
    }

    #[test]
    fn clients_configured_by_the_caller_are_nodes_shown_without_secrets() {
        let client = redis::Client::open("redis://app:secret@[::1]:7000/2").expect("url");
        let config = LockConfig::builder()
            .node_client(client)
            .node("redis://127.0.0.1:7000")
            .build()
            .expect("valid");
        let urls: Vec<&str> = config.node_urls().collect();
        assert_eq!(urls, ["redis://[::1]:7000/2", "redis://127.0.0.1:7000"]);
        assert!(!format!("{config:?}").contains("secret"));
        // The same server given twice, once as a client: refused.
        let twice = LockConfig::builder()
            .node("redis://127.0.0.1:7000")
            .node_client(redis::Client::open("redis://127.0.0.1:7000").expect("url"))
            .build()
            .unwrap_err();
        assert!(
            matches!(twice, ConfigError::DuplicateNode { .. }),
            "{twice}"
        );
    }

    #[test]
    fn duplicate_nodes_are_named_even_when_spelled_differently() {
        let err = LockConfig::builder()
            .nodes([
                "redis://127.0.0.1:7000",
                "redis://127.0.0.1:7001/",
                "redis://127.0.0.1:7000/0",
            ])
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::DuplicateNode {
                url: "redis://127.0.0.1:7000/0".into(),
                first: "redis://127.0.0.1:7000".into()
            }
        );
        // Another database on the same server is another node.
        assert!(
            LockConfig::builder()
                .nodes(["redis://127.0.0.1:7000/0", "redis://127.0.0.1:7000/1"])
                .build()
                .is_ok()
        );
    }

    #[test]
    fn quorum_k_out_of_range() {
        for k in [0, 4] {
            let err = three().quorum(Quorum::AtLeast(k)).build().unwrap_err();
            assert_eq!(err, ConfigError::QuorumOutOfRange { k, nodes: 3 });
            assert!(err.to_string().contains(&format!("AtLeast({k})")));
        }
        assert!(three().quorum(Quorum::AtLeast(3)).build().is_ok());
        assert!(three().quorum(Quorum::AtLeast(1)).build().is_ok());
    }

    #[test]
    fn ttl_zero_and_huge() {
        for ttl in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_TTL + Duration::from_millis(1),
        ] {
            assert!(
                matches!(three().ttl(ttl).build(), Err(ConfigError::TtlOutOfRange { ttl: t, .. }) if t == ttl)
            );
        }
    }

    #[test]
    fn node_timeout_must_be_well_below_ttl() {
        let ttl = Duration::from_secs(1);
        for node_timeout in [
            Duration::ZERO,
            Duration::from_millis(101),
            Duration::from_secs(2),
        ] {
            let err = three()
                .ttl(ttl)
                .node_timeout(node_timeout)
                .build()
                .unwrap_err();
            assert_eq!(
                err,
                ConfigError::NodeTimeoutOutOfRange {
                    node_timeout,
                    ttl,
                    max: Duration::from_millis(100)
                }
            );
        }
        assert!(
            three()
                .ttl(ttl)
                .node_timeout(Duration::from_millis(100))
                .build()
                .is_ok()
        );
    }

    #[test]
    fn drift_factor_out_of_range() {
        for value in [-0.1, 1.0, f64::NAN, f64::INFINITY] {
            match three().drift_factor(value).build() {
                Err(ConfigError::DriftFactorOutOfRange { value: v }) => {
                    assert!(v.to_bits() == value.to_bits())
                }
                other => panic!("{value}: {other:?}"),
            }
        }
    }

    #[test]
    fn drift_that_leaves_no_validity() {
        // 0.95 of 1 s plus 2 ms leaves 48 ms, below the default minimum of 100 ms.
        let err = three()
            .ttl(Duration::from_secs(1))
            .drift_factor(0.95)
            .build()
            .unwrap_err();
        assert!(
            matches!(err, ConfigError::NoValidityLeft { drift_factor, .. } if drift_factor == 0.95),
            "{err:?}"
        );
        // A 2 ms TTL is eaten by the fixed 2 ms allowance alone.
        let err = three()
            .ttl(Duration::from_millis(2))
            .node_timeout(Duration::from_micros(100))
            .min_validity(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(matches!(err, ConfigError::NoValidityLeft { .. }), "{err:?}");
    }

    #[test]
    fn watchdog_defaults_follow_the_ttl() {
        let c = three().ttl(Duration::from_secs(9)).build().expect("valid");
        assert!(!c.watchdog());
        assert_eq!(c.renew_interval(), Duration::from_secs(3));
        assert_eq!(c.loss_margin(), Duration::from_millis(900));
        assert_eq!(c.max_hold(), None);
    }

    #[test]
    fn renew_interval_must_leave_room_before_the_loss() {
        // Lease of 10 s: 10 s − 102 ms drift; minus the 1 s margin.
        let max = Duration::from_millis(8_898);
        for renew_interval in [Duration::ZERO, max, Duration::from_secs(20)] {
            let err = three()
                .ttl(Duration::from_secs(10))
                .renew_interval(renew_interval)
                .build()
                .unwrap_err();
            assert_eq!(
                err,
                ConfigError::RenewIntervalOutOfRange {
                    renew_interval,
                    max
                }
            );
        }
    }

    #[test]
    fn loss_margin_and_max_hold_out_of_range() {
        let lease = Duration::from_millis(9_898);
        for loss_margin in [Duration::ZERO, lease, Duration::from_secs(11)] {
            let err = three()
                .ttl(Duration::from_secs(10))
                .loss_margin(loss_margin)
                .build()
                .unwrap_err();
            assert_eq!(
                err,
                ConfigError::LossMarginOutOfRange { loss_margin, lease }
            );
        }
        assert_eq!(
            three().max_hold(Duration::ZERO).build().unwrap_err(),
            ConfigError::MaxHoldZero
        );
    }

    #[test]
    fn connect_timeout_zero() {
        assert_eq!(
            three().connect_timeout(Duration::ZERO).build().unwrap_err(),
            ConfigError::ConnectTimeoutZero {
                value: Duration::ZERO
            }
        );
    }

    #[test]
    fn bad_retry_policy_is_reported() {
        let err = three()
            .retry(RetryPolicy::default().with_jitter(2.0))
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::InvalidRetry {
                    field: "jitter",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

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
