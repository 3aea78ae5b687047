//! Everything that can go wrong, typed so that callers can tell "someone else
//! holds it" from "not enough nodes answered" from "bad configuration".

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A configuration value that cannot work, naming the field and the value.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{ConfigError, LockConfig};
///
/// let error = LockConfig::builder()
///     .node("redis://127.0.0.1:6379")
///     .drift_factor(-1.0)
///     .build()
///     .unwrap_err();
/// assert!(matches!(error, ConfigError::DriftFactorOutOfRange { .. }));
/// println!("{error}"); // names the field and the value
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A URL given to `durable_nodes` is not one of the nodes.
    #[error("durable node {url:?} is not one of the nodes")]
    UnknownDurableNode {
        /// The URL as given, its password replaced by `***`.
        url: String,
    },
    /// A `rediss://` node, but the crate was built without TLS.
    #[error(
        "`nodes`: {url:?} needs TLS: enable the `tls-rustls` (or `tls-native-tls`) feature of quorumlock"
    )]
    TlsNotEnabled {
        /// The URL, its password replaced by `***`.
        url: String,
    },
    /// A Sentinel node with no sentinel to ask.
    #[error("`nodes`: the Sentinel group {service:?} has no sentinels")]
    NoSentinels {
        /// The master group's name.
        service: String,
    },
    /// `nodes` is empty.
    #[error("`nodes` is empty: a lock needs at least one Redis node")]
    NoNodes,
    /// A node URL does not parse.
    #[error("`nodes`: cannot parse {url:?} as a Redis URL: {reason}")]
    InvalidNodeUrl {
        /// The URL as given, its password replaced by `***`.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// Two URLs name the same server and database.
    #[error(
        "`nodes`: {url:?} names the same server as {first:?}; each node must be an independent master"
    )]
    DuplicateNode {
        /// The later URL, its password replaced by `***`.
        url: String,
        /// The earlier URL it duplicates, its password replaced by `***`.
        first: String,
    },
    /// `Quorum::AtLeast(k)` with `k = 0` or `k > nodes`.
    #[error("`quorum` is AtLeast({k}): k must be from 1 to the number of nodes ({nodes})")]
    QuorumOutOfRange {
        /// The configured k.
        k: usize,
        /// The number of nodes.
        nodes: usize,
    },
    /// The TTL is below one millisecond (Redis's expiry granularity) or
    /// above what `PEXPIRE` accepts.
    #[error("`ttl` is {ttl:?}: it must be from 1 ms to {max:?}")]
    TtlOutOfRange {
        /// The configured TTL.
        ttl: Duration,
        /// The largest TTL accepted.
        max: Duration,
    },
    /// The per-node timeout is zero or not well below the TTL.
    #[error(
        "`node_timeout` is {node_timeout:?}: it must be above zero and at most a tenth of the TTL ({max:?} for a TTL of {ttl:?})"
    )]
    NodeTimeoutOutOfRange {
        /// The configured per-node timeout.
        node_timeout: Duration,
        /// The TTL it is compared with.
        ttl: Duration,
        /// The largest accepted value for this TTL.
        max: Duration,
    },
    /// The connect timeout is zero.
    #[error("`connect_timeout` is {value:?}: it must be above zero")]
    ConnectTimeoutZero {
        /// The configured value.
        value: Duration,
    },
    /// The drift factor is not a finite number in `[0, 1)`.
    #[error("`drift_factor` is {value}: it must be a finite number from 0 up to (not including) 1")]
    DriftFactorOutOfRange {
        /// The configured factor.
        value: f64,
    },
    /// TTL minus the drift allowance is not above the minimum validity.
    #[error(
        "`drift_factor` {drift_factor} leaves no validity: a TTL of {ttl:?} minus its drift allowance of {drift:?} is not above `min_validity` ({min_validity:?})"
    )]
    NoValidityLeft {
        /// The TTL.
        ttl: Duration,
        /// The configured drift factor.
        drift_factor: f64,
        /// The resulting allowance (`ttl × drift_factor + 2 ms`).
        drift: Duration,
        /// The configured minimum validity.
        min_validity: Duration,
    },
    /// The loss margin is zero or not below the lease (TTL minus drift).
    #[error(
        "`loss_margin` is {loss_margin:?}: it must be above zero and below the TTL minus the drift allowance ({lease:?})"
    )]
    LossMarginOutOfRange {
        /// The configured margin.
        loss_margin: Duration,
        /// TTL minus the drift allowance.
        lease: Duration,
    },
    /// The renewal interval is zero or would come after the loss margin.
    #[error(
        "`renew_interval` is {renew_interval:?}: it must be above zero and below the TTL minus drift minus `loss_margin` ({max:?}), so that a renewal is due before the guard would be declared lost"
    )]
    RenewIntervalOutOfRange {
        /// The configured interval.
        renew_interval: Duration,
        /// The bound it must stay below.
        max: Duration,
    },
    /// The maximum hold time is zero.
    #[error("`max_hold` is zero: leave it unset for no bound, or give a positive duration")]
    MaxHoldZero,
    /// `fair(true)` with `wake_ups(false)`: a fair queue's first waiter
    /// learns its turn from a release notice.
    #[error(
        "`fair` is on but `wake_ups` is off: a waiter of a fair queue learns its turn from release notices; turn wake-ups on, or fairness off"
    )]
    FairNeedsWakeUps,
    /// The quarantine is longer than the scripts can count (they hold it
    /// in a Lua number, exact up to 2^53 ms; the bound is the longest TTL).
    #[error("`quarantine` is {quarantine:?}: at most {max:?} (the longest TTL)")]
    QuarantineOutOfRange {
        /// The configured quarantine.
        quarantine: Duration,
        /// The largest accepted.
        max: Duration,
    },
    /// A retry setting that cannot work.
    #[error("`retry.{field}` is {value}: {reason}")]
    InvalidRetry {
        /// The retry field.
        field: &'static str,
        /// The configured value.
        value: String,
        /// Why it is rejected.
        reason: &'static str,
    },
}

/// What kind of failure one node had.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind};
///
/// // Nothing listens on port 1: the one node fails.
/// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:1").build()?);
/// let error = lock.try_acquire("job").await.unwrap_err();
/// assert!(matches!(error, Error::QuorumNotReached { .. }));
/// let failure = error.node_reports().unwrap().errors().next().unwrap();
/// assert_eq!(failure.kind(), NodeErrorKind::Unreachable);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No connection: refused, reset, closed, or the connect failed.
    Unreachable,
    /// No answer within the per-node timeout (e.g. a paused server).
    Timeout,
    /// Authentication or permission failure (`NOAUTH`, `WRONGPASS`, `NOPERM`).
    Auth,
    /// The lock key holds a value of another type (`WRONGTYPE`).
    WrongType,
    /// The node is a read-only replica (`READONLY`).
    ReadOnly,
    /// The server is loading its dataset or busy running a script.
    Busy,
    /// The server answered something the lock scripts never return.
    UnexpectedReply,
    /// A fencing counter on the node is not a whole number in
    /// `0 ..= 2^53 − 2` (the range exact in the scripts' Lua numbers, with
    /// room for one more token). It is never used or written back.
    InvalidCounter,
    /// The node's data may be incomplete (it restarted, was promoted from
    /// a replica, or is met for the first time): it casts no vote until
    /// the quarantine has passed since then
    /// ([`NodeError::quarantine_left`] says how long). It still took the
    /// writes, so it blocks others meanwhile.
    Quarantined,
    /// [`MultiLock::adopt_empty_nodes`](crate::MultiLock::adopt_empty_nodes)
    /// refused a node that holds keys.
    NotEmpty,
    /// The node reaches the same Redis server (the same `run_id`) as
    /// another configured node, through another URL (`localhost` and
    /// `127.0.0.1`, two databases of one server, a proxy): one server
    /// casts one vote, so this node casts none.
    SameServer,
    /// Any other error.
    Other,
}

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeErrorKind::Unreachable => "unreachable",
            NodeErrorKind::Timeout => "timed out",
            NodeErrorKind::Auth => "authentication failed",
            NodeErrorKind::WrongType => "lock key holds a value of the wrong type",
            NodeErrorKind::ReadOnly => "node is a read-only replica",
            NodeErrorKind::Busy => "node is loading or busy",
            NodeErrorKind::UnexpectedReply => "unexpected reply",
            NodeErrorKind::InvalidCounter => "invalid fencing counter",
            NodeErrorKind::Quarantined => "quarantined",
            NodeErrorKind::NotEmpty => "not empty",
            NodeErrorKind::SameServer => "same server as another node",
            NodeErrorKind::Other => "error",
        })
    }
}

/// One node's failure, with the node named.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind};
///
/// // Nothing listens on port 1: the one node fails.
/// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:1").build()?);
/// let error = lock.try_acquire("job").await.unwrap_err();
/// assert!(matches!(error, Error::QuorumNotReached { .. }));
/// let failure = error.node_reports().unwrap().errors().next().unwrap();
/// println!("{failure}"); // "redis://127.0.0.1:1: unreachable: ..."
/// assert_eq!(failure.node(), "redis://127.0.0.1:1");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{node}: {kind}: {detail}")]
pub struct NodeError {
    node: Arc<str>,
    kind: NodeErrorKind,
    detail: String,
    quarantine_left: Option<Duration>,
}

impl NodeError {
    pub(crate) fn new(node: &Arc<str>, kind: NodeErrorKind, detail: impl Into<String>) -> Self {
        NodeError {
            node: Arc::clone(node),
            kind,
            detail: detail.into(),
            quarantine_left: None,
        }
    }

    /// The same error, its detail followed by what was done about it.
    pub(crate) fn noting(mut self, note: impl fmt::Display) -> Self {
        self.detail = format!("{}; {note}", self.detail);
        self
    }

    /// A [`NodeErrorKind::Quarantined`] error: the node votes again in
    /// `left`.
    pub(crate) fn quarantined(node: &Arc<str>, left: Duration) -> Self {
        NodeError {
            quarantine_left: Some(left),
            ..NodeError::new(
                node,
                NodeErrorKind::Quarantined,
                format!(
                    "its data may be incomplete (restarted, promoted, or new to this client): \
                     no vote for {} more",
                    Human(left)
                ),
            )
        }
    }

    /// For a [`NodeErrorKind::Quarantined`] node: how long until it votes
    /// again (on its own clock, as of its answer).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind};
    ///
    /// // Nothing listens on port 1: the one node fails.
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:1").build()?);
    /// let error = lock.try_acquire("job").await.unwrap_err();
    /// assert!(matches!(error, Error::QuorumNotReached { .. }));
    /// let failure = error.node_reports().unwrap().errors().next().unwrap();
    /// // Only a quarantined node says how long it still casts no vote.
    /// assert_eq!(failure.quarantine_left(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quarantine_left(&self) -> Option<Duration> {
        self.quarantine_left
    }

    /// The node's URL as configured (password elided).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind};
    ///
    /// // Nothing listens on port 1: the one node fails.
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:1").build()?);
    /// let error = lock.try_acquire("job").await.unwrap_err();
    /// assert!(matches!(error, Error::QuorumNotReached { .. }));
    /// let failure = error.node_reports().unwrap().errors().next().unwrap();
    /// assert_eq!(failure.node(), "redis://127.0.0.1:1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The class of failure.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind};
    ///
    /// // Nothing listens on port 1: the one node fails.
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:1").build()?);
    /// let error = lock.try_acquire("job").await.unwrap_err();
    /// assert!(matches!(error, Error::QuorumNotReached { .. }));
    /// let failure = error.node_reports().unwrap().errors().next().unwrap();
    /// assert_eq!(failure.kind(), NodeErrorKind::Unreachable);
    /// # Ok(())
    /// # }
    /// ```
    pub fn kind(&self) -> NodeErrorKind {
        self.kind
    }

    /// The underlying message (server reply or I/O error).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeErrorKind};
    ///
    /// // Nothing listens on port 1: the one node fails.
    /// let lock = MultiLock::new(LockConfig::builder().node("redis://127.0.0.1:1").build()?);
    /// let error = lock.try_acquire("job").await.unwrap_err();
    /// assert!(matches!(error, Error::QuorumNotReached { .. }));
    /// let failure = error.node_reports().unwrap().errors().next().unwrap();
    /// assert!(!failure.detail().is_empty(), "what the client library said");
    /// # Ok(())
    /// # }
    /// ```
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// What one node said during an attempt.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let holder = lock.try_acquire("stock:1").await?;
/// let refused = lock.try_acquire("stock:1").await.unwrap_err();
/// let reports = refused.node_reports().expect("contention reports each node");
/// assert!(reports.iter().any(|r| matches!(r.outcome, NodeOutcome::HeldByOther { .. })));
/// holder.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// The node took our token.
    Won,
    /// Another owner holds the key here, for `pttl` more (`None`: no expiry).
    HeldByOther {
        /// The key's remaining time to live on this node.
        pttl: Option<Duration>,
    },
    /// The key is free here, but a waiter of another acquire call is
    /// queued for it ahead of this one: a free lock goes to the longest
    /// waiting call first (see [`MultiLock::acquire`](crate::MultiLock::acquire)).
    WaitersAhead,
    /// Our token is not on this node (expired, deleted, or another owner's).
    NotHeld,
    /// The node failed.
    Failed(NodeError),
    /// The attempt was decided before this node answered. Its request may
    /// still land; a rollback or release is sent to it all the same.
    NoReplyBeforeDecision,
    /// The node answered a read of the fencing counters.
    CountersRead,
}

/// One node's outcome in an attempt.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let holder = lock.try_acquire("stock:1").await?;
/// let refused = lock.try_acquire("stock:1").await.unwrap_err();
/// let reports = refused.node_reports().expect("contention reports each node");
/// for report in reports {
///     println!("{}: {:?}", report.node, report.outcome);
/// }
/// holder.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReport {
    /// The node's URL.
    pub node: String,
    /// What it said.
    pub outcome: NodeOutcome,
}

/// The per-node outcomes of one attempt, in configuration order, printed
/// one node after another.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let holder = lock.try_acquire("stock:1").await?;
/// let refused = lock.try_acquire("stock:1").await.unwrap_err();
/// let reports = refused.node_reports().expect("contention reports each node");
/// println!("{reports}"); // one line per node
/// assert_eq!(reports.len(), 3);
/// holder.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReports(Vec<NodeReport>);

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = &self.node;
        match &self.outcome {
            NodeOutcome::Won => write!(f, "{node}: won"),
            NodeOutcome::HeldByOther { pttl: Some(p) } => {
                write!(f, "{node}: held by another for {}", Human(*p))
            }
            NodeOutcome::HeldByOther { pttl: None } => {
                write!(f, "{node}: held by another, no expiry")
            }
            NodeOutcome::WaitersAhead => write!(f, "{node}: free, but others wait ahead"),
            NodeOutcome::NotHeld => write!(f, "{node}: our token is gone"),
            NodeOutcome::Failed(e) => write!(f, "{e}"),
            NodeOutcome::NoReplyBeforeDecision => {
                write!(f, "{node}: not awaited (decided before it answered)")
            }
            NodeOutcome::CountersRead => write!(f, "{node}: fencing counters read"),
        }
    }
}

impl fmt::Display for NodeReports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl NodeReports {
    pub(crate) fn new(reports: Vec<NodeReport>) -> NodeReports {
        NodeReports(reports)
    }

    /// Each node's report, in configuration order.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let holder = lock.try_acquire("stock:1").await?;
    /// let refused = lock.try_acquire("stock:1").await.unwrap_err();
    /// let reports = refused.node_reports().expect("contention reports each node");
    /// assert_eq!(reports.iter().count(), 3);
    /// holder.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn iter(&self) -> std::slice::Iter<'_, NodeReport> {
        self.0.iter()
    }

    /// The reports as a slice, in configuration order.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let first_node = nodes[0].clone();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let holder = lock.try_acquire("stock:1").await?;
    /// let refused = lock.try_acquire("stock:1").await.unwrap_err();
    /// let reports = refused.node_reports().expect("contention reports each node");
    /// assert_eq!(reports.as_slice()[0].node, first_node);
    /// holder.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn as_slice(&self) -> &[NodeReport] {
        &self.0
    }

    /// How many nodes are reported.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let holder = lock.try_acquire("stock:1").await?;
    /// let refused = lock.try_acquire("stock:1").await.unwrap_err();
    /// let reports = refused.node_reports().expect("contention reports each node");
    /// assert_eq!(reports.len(), 3);
    /// holder.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no node is reported.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let holder = lock.try_acquire("stock:1").await?;
    /// let refused = lock.try_acquire("stock:1").await.unwrap_err();
    /// let reports = refused.node_reports().expect("contention reports each node");
    /// assert!(!reports.is_empty());
    /// holder.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The failures among the outcomes.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let holder = lock.try_acquire("stock:1").await?;
    /// let refused = lock.try_acquire("stock:1").await.unwrap_err();
    /// let reports = refused.node_reports().expect("contention reports each node");
    /// assert_eq!(reports.errors().count(), 0, "contention, not failure");
    /// holder.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn errors(&self) -> impl Iterator<Item = &NodeError> {
        self.0.iter().filter_map(|r| match &r.outcome {
            NodeOutcome::Failed(e) => Some(e),
            _ => None,
        })
    }
}

impl<'a> IntoIterator for &'a NodeReports {
    type Item = &'a NodeReport;
    type IntoIter = std::slice::Iter<'a, NodeReport>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for NodeReports {
    type Item = NodeReport;
    type IntoIter = std::vec::IntoIter<NodeReport>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Why a guard no longer holds its lock.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::{LockConfig, LostReason, MultiLock};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).watchdog(true).build()?);
/// let guard = lock.try_acquire("nightly").await?;
/// lock.force_release("nightly").await?;
/// let notice = guard.lost().await;
/// assert_eq!(notice.reason, LostReason::ForceReleased);
/// println!("lost: {}", notice.reason);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The validity deadline passed (or came within the loss margin) and
    /// nothing renewed it: a guard without the watchdog that was not
    /// extended in time.
    ValidityExpired,
    /// Too few nodes still carry our token for a quorum: other owners hold
    /// the key on the rest.
    KeysGone(NodeReports),
    /// The watchdog's renewals did not reach the quorum before the loss
    /// margin; the last round's per-node outcomes.
    RenewalsFailed(NodeReports),
    /// The watchdog stopped renewing after the configured maximum hold time.
    MaxHoldReached(Duration),
    /// The guard was released (or dropped).
    Released,
    /// An operator released the name whatever its owner
    /// ([`MultiLock::force_release`](crate::MultiLock::force_release)).
    ForceReleased,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::ValidityExpired => f.write_str("its validity deadline has passed"),
            LostReason::KeysGone(nodes) => {
                write!(f, "too few nodes still hold our token ({nodes})")
            }
            LostReason::RenewalsFailed(nodes) => write!(
                f,
                "renewals did not reach the quorum before the loss margin (last round: {nodes})"
            ),
            LostReason::MaxHoldReached(max) => {
                write!(f, "the maximum hold time of {} was reached", Human(*max))
            }
            LostReason::Released => f.write_str("it was released"),
            LostReason::ForceReleased => f.write_str("an operator force-released it"),
        }
    }
}

/// Errors of lock operations.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use quorumlock::{Error, LockConfig, MultiLock, Wait};
///
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let holder = lock.try_acquire("invoice:9").await?;
/// match lock.acquire("invoice:9", Wait::up_to(Duration::from_millis(50))).await {
///     Ok(_) => unreachable!("held by the first guard"),
///     Err(Error::WaitBudgetExhausted { attempts, last, .. }) => {
///         assert!(attempts >= 1);
///         assert!(matches!(*last, Error::Contended { .. }));
///     }
///     Err(Error::QuorumNotReached { .. }) => { /* too few nodes answered: retry later */ }
///     Err(other) => return Err(other.into()),
/// }
/// holder.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot work.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// Another owner holds the lock on enough nodes that no quorum is possible.
    #[error("lock {key:?} is held by another owner{}", free_in_text(*.free_in))]
    Contended {
        /// The lock name.
        key: String,
        /// When enough nodes should free up for a quorum, from the holders'
        /// remaining TTLs (`None`: a key without expiry blocks it).
        free_in: Option<Duration>,
        /// Each node's outcome.
        nodes: NodeReports,
    },
    /// Too few nodes answered "won" (node errors, timeouts, contention mixed).
    #[error("lock {key:?}: quorum not reached: {won} of the {required} nodes needed ({nodes})")]
    QuorumNotReached {
        /// The lock name.
        key: String,
        /// Nodes the policy needed.
        required: usize,
        /// Nodes won.
        won: usize,
        /// Each node's outcome.
        nodes: NodeReports,
    },
    /// A quorum was won, but too slowly: the validity left was not above the
    /// configured minimum, so the attempt was rolled back.
    #[error(
        "lock {key:?}: quorum won but the attempt took {}, leaving {} of validity (minimum {})", Human(*.elapsed), Human(*.validity), Human(*.min_validity)
    )]
    ValidityUsedUp {
        /// The lock name.
        key: String,
        /// How long the attempt took.
        elapsed: Duration,
        /// The validity it left.
        validity: Duration,
        /// The configured minimum.
        min_validity: Duration,
    },
    /// `acquire` ran out of wait budget (or attempts) without winning.
    #[error("gave up after {attempts} attempts in {}: {last}", Human(*.waited))]
    WaitBudgetExhausted {
        /// The lock name.
        key: String,
        /// Attempts made.
        attempts: u32,
        /// Time spent.
        waited: Duration,
        /// The last attempt's error.
        last: Box<Error>,
    },
    /// The lock can no longer be proven held.
    #[error("lock {key:?} lost: {reason}")]
    Lost {
        /// The lock name.
        key: String,
        /// Why.
        reason: LostReason,
    },
    /// A lock name (or list of names) that cannot be used.
    #[error("lock name {key:?}: {reason}")]
    InvalidKey {
        /// The name as given (empty for an empty list).
        key: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// A number of permits a semaphore cannot have (see
    /// [`MultiSemaphore::acquire`](crate::MultiSemaphore::acquire)).
    #[error("semaphore {name:?}: {permits} permits: {reason}")]
    InvalidPermits {
        /// The semaphore's name.
        name: String,
        /// The number of permits as given.
        permits: u32,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// An owner token that cannot be used (see [`Owner::from_token`](crate::Owner::from_token)).
    #[error("owner token {token:?}: {reason}")]
    InvalidOwner {
        /// The token as given.
        token: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The fencing token could not be established: too few nodes confirmed
    /// it (or answered the read of the counters) within the node timeout.
    /// The lock itself may still be held; asking again retries.
    #[error(
        "lock {key:?}: no fencing token: {confirmed} of the {required} nodes needed confirmed it ({nodes})"
    )]
    FencingUnavailable {
        /// The lock name.
        key: String,
        /// Nodes needed (a majority of all nodes).
        required: usize,
        /// Nodes that confirmed.
        confirmed: usize,
        /// Each node's outcome.
        nodes: NodeReports,
    },
}

/// A duration for people: milliseconds with one decimal below a second,
/// seconds with three above.
pub(crate) struct Human(pub(crate) Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < Duration::from_secs(1) {
            write!(f, "{:.1} ms", self.0.as_secs_f64() * 1e3)
        } else {
            write!(f, "{:.3} s", self.0.as_secs_f64())
        }
    }
}

fn free_in_text(free_in: Option<Duration>) -> String {
    match free_in {
        Some(d) => format!(" (a quorum may free up in {})", Human(d)),
        None => " (a holder's key has no expiry)".to_string(),
    }
}

impl Error {
    /// The same error under the name `name`: for the primitives whose
    /// locks are slots (`quorumlock:rw:<name>:<i>`), whose caller knows
    /// the name, not the slots.
    pub(crate) fn renamed(self, name: &str) -> Error {
        let key = name.to_owned();
        match self {
            Error::Contended { free_in, nodes, .. } => Error::Contended {
                key,
                free_in,
                nodes,
            },
            Error::QuorumNotReached {
                required,
                won,
                nodes,
                ..
            } => Error::QuorumNotReached {
                key,
                required,
                won,
                nodes,
            },
            Error::ValidityUsedUp {
                elapsed,
                validity,
                min_validity,
                ..
            } => Error::ValidityUsedUp {
                key,
                elapsed,
                validity,
                min_validity,
            },
            Error::WaitBudgetExhausted {
                attempts,
                waited,
                last,
                ..
            } => Error::WaitBudgetExhausted {
                key,
                attempts,
                waited,
                last: Box::new((*last).renamed(name)),
            },
            other => other,
        }
    }

    /// Whether another attempt could succeed, as opposed to a
    /// configuration error, a bad name or a lost lock: contention, a
    /// missing quorum, a slow attempt, a wait that ran out on one of
    /// those, and a fencing token that too few nodes confirmed (asking
    /// again retries).
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::{Error, NodeReports};
    ///
    /// let contended = Error::Contended {
    ///     key: "k".into(),
    ///     free_in: None,
    ///     nodes: NodeReports::default(),
    /// };
    /// let gave_up = Error::WaitBudgetExhausted {
    ///     key: "k".into(),
    ///     attempts: 3,
    ///     waited: Duration::from_millis(30),
    ///     last: Box::new(contended),
    /// };
    /// assert!(gave_up.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Contended { .. }
            | Error::QuorumNotReached { .. }
            | Error::ValidityUsedUp { .. }
            | Error::FencingUnavailable { .. } => true,
            Error::WaitBudgetExhausted { last, .. } => last.is_retryable(),
            _ => false,
        }
    }

    /// The per-node outcomes, for errors that have them (looking through
    /// [`Error::WaitBudgetExhausted`] to its last attempt).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{Error, LockConfig, MultiLock, NodeOutcome};
    ///
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let holder = lock.try_acquire("stock:1").await?;
    /// let refused = lock.try_acquire("stock:1").await.unwrap_err();
    /// let reports = refused.node_reports().expect("contention reports each node");
    /// assert_eq!(reports.len(), 3);
    /// holder.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn node_reports(&self) -> Option<&NodeReports> {
        match self {
            Error::Contended { nodes, .. }
            | Error::QuorumNotReached { nodes, .. }
            | Error::FencingUnavailable { nodes, .. } => Some(nodes),
            Error::Lost {
                reason: LostReason::KeysGone(nodes) | LostReason::RenewalsFailed(nodes),
                ..
            } => Some(nodes),
            Error::WaitBudgetExhausted { last, .. } => last.node_reports(),
            _ => None,
        }
    }
}
