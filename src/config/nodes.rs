//! What a configured node is (a URL, a ready client, a Sentinel group),
//! how it is parsed, shown without credentials, and compared (two entries
//! that reach the same server are refused).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use crate::error::ConfigError;
use crate::redact::redact_url;

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
pub(super) enum NodeSpec {
    Url(String),
    Client(Box<Client>),
    Sentinel(SentinelNode),
}

impl NodeSpec {
    /// As shown in `Debug` and errors: no password.
    pub(super) fn shown(&self) -> String {
        match self {
            NodeSpec::Url(url) => redact_url(url),
            NodeSpec::Client(client) => display_name(client.get_connection_info()),
            NodeSpec::Sentinel(node) => node.shown(),
        }
    }
}

/// A node that is a Sentinel-managed master group, for
/// [`LockConfigBuilder::sentinel_node`](crate::LockConfigBuilder::sentinel_node): the lock asks the sentinels for
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
    pub(super) fn shown(&self) -> String {
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

pub(super) fn parse_nodes(specs: Vec<NodeSpec>) -> Result<Vec<NodeAddress>, ConfigError> {
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
pub(super) fn mark_durable(
    nodes: &mut [NodeAddress],
    durable: Vec<String>,
) -> Result<(), ConfigError> {
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
