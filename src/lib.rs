//! Distributed locks over N independent Redis masters that stay safe when
//! servers fail.
//!
//! A lock on one Redis key breaks when its master fails over to a replica
//! that never saw the key: a second client then gets the "same" lock while
//! the first still works. `quorumlock` locks on N independent masters
//! ("nodes") at once and counts the lock as held only when a quorum of them
//! agreed, within a time budget: the Redlock algorithm, done concurrently and
//! with every edge case (rollback, late replies, lost scripts, paused nodes)
//! handled.
//!
//! # From the top
//!
//! * [`LockConfig`] holds the nodes, the TTL, the [`Quorum`] policy, the drift
//!   factor, the per-node timeout and the [`RetryPolicy`]; its builder rejects
//!   settings that cannot work with a [`ConfigError`] naming field and value.
//! * [`MultiLock`] sends the acquire script to every node at once and decides
//!   as soon as the quorum is won or out of reach, never waiting on a slow
//!   node. A lost attempt is rolled back on every node it may have written to.
//! * [`LockGuard`] is what a win gives you: the *validity* (`ttl − elapsed −
//!   drift`) during which you may assume exclusivity, [`LockGuard::extend`],
//!   and [`LockGuard::release`], which reports what each node did.
//! * The [`watchdog`] (on with [`LockConfigBuilder::watchdog`], always on in
//!   [`MultiLock::run_exclusive`]) renews a guard on every node while the
//!   holder works, re-takes keys that nodes lost, and signals the loss
//!   ([`HeldLock::lost`], [`HeldLock::cancellation_token`], on the guard too) before the
//!   deadline when it can no longer prove the lock is held.
//! * [`HeldLock::fencing_token`] gives each holder a number larger than every
//!   earlier holder's, across all nodes ([`fence`]), so the protected
//!   resource can reject a holder that resumes after a pause
//!   ([`fenced::FencedResource`] is one such resource).
//! * [`HeldLock::reenter`] and [`Owner`] with [`MultiLock::acquire_as`] let
//!   nested code (or another process) take a lock its holder already holds;
//!   [`MultiLock::acquire_all`] takes several names at once, all or nothing.
//! * [`MultiSemaphore`] (at most K holders of a name) and [`MultiRwLock`]
//!   (many readers or one writer) are built from the same locks: each is a
//!   set of slots, each slot an ordinary lock name, so they keep every
//!   guarantee above.
//! * Waiting acquires are woken by release notices ([`wake`]), one
//!   subscriber connection per node, instead of polling.
//! * [`Error`] separates contention ([`Error::Contended`], with how long the
//!   holder still has) from missing nodes ([`Error::QuorumNotReached`], with
//!   each node's [`NodeError`]) and from a win that came too late.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let testbed = quorumlock_testbed::Testbed::start(5)?;
//! # let nodes = testbed.urls();
//! use std::time::Duration;
//! use quorumlock::{Error, LockConfig, MultiLock, Quorum, Wait};
//!
//! let config = LockConfig::builder()
//!     .nodes(nodes)                       // five independent masters
//!     .quorum(Quorum::Majority)           // three must agree
//!     .ttl(Duration::from_secs(10))
//!     .build()?;
//! let lock = MultiLock::new(config);
//!
//! let guard = lock.acquire("payment:4711", Wait::up_to(Duration::from_secs(1))).await?;
//! // A second owner is refused while the first holds the lock.
//! match lock.try_acquire("payment:4711").await {
//!     Err(Error::Contended { free_in, .. }) => assert!(free_in.is_some()),
//!     other => panic!("expected contention, got {other:?}"),
//! }
//! assert!(guard.validity() > Duration::from_secs(9));
//! guard.release().await;
//! # Ok(())
//! # }
//! ```
//!
//! In the examples, `nodes` is a `Vec<String>` of your nodes' URLs
//! (`redis://host:port`, one per independent master), as your configuration
//! gives them, and `resource_url` the URL of a Redis server that is not a
//! node. The examples also run as the crate's tests: lines hidden from this
//! page start local `redis-server`s for them with the repository's test
//! harness and fill in those URLs.
//!
//! # Safety
//!
//! * Every write to a lock key is a Lua script conditional on the owner
//!   token (a UUID v4: 122 random bits from the OS): no client deletes or extends a
//!   lock it does not own.
//! * Deadlines use `CLOCK_BOOTTIME` on Linux, which keeps counting while the
//!   host is suspended, as the nodes' expiry clocks do. On other platforms
//!   the monotonic clock is used; where it stops during suspend, a guard
//!   that resumes after a sleep may believe its deadline is further away
//!   than the nodes do.
//! * Each node has one ordered connection, so a rollback or release can
//!   never overtake its own acquire on a node.
//! * A guard never reports itself held past its deadline, and is never
//!   turned back from not held to held.
//!
//! What the algorithm cannot give: exclusivity against a holder that pauses
//! (GC, swap, a stopped VM) past its validity. Protect the resource with
//! [fencing tokens](fence) for that.
//!
//! A node that lost data (a restart, a failover to a lagging replica) could
//! let a second owner win a lock the first still holds. quorumlock
//! enforces the delayed restart itself: such a node casts no vote for the
//! [quarantine](LockConfigBuilder::quarantine) (default: the TTL), judged
//! in the same script call as each vote, and fencing counters carry the
//! node's epoch, so a counter that went back is never trusted.
//!
//! A node may also be a Sentinel-managed master group
//! ([`LockConfigBuilder::sentinel_node`]): the lock follows its failovers,
//! and asks of its masters that they refuse writes once cut off from their
//! replicas, so that a failover that leaves two masters never lets both
//! vote (see [`SentinelNode`]).
//!
//! # Cargo features
//!
//! * `tls-rustls`: `rediss://` nodes over rustls (the platform's and the
//!   webpki roots; a private CA or a client certificate through
//!   [`LockConfigBuilder::node_client`]).
//! * `tls-native-tls`: `rediss://` nodes over the platform's TLS (OpenSSL on
//!   Linux).
//!
//! * `blocking`: `quorumlock::blocking`, the same API for code that is not async,
//!   on a runtime thread of its own (as `reqwest::blocking`).
//!
//! * `metrics`: counters, a gauge and histograms through the
//!   [`metrics`](https://docs.rs/metrics) facade, listed below.
//!
//! # Metrics
//!
//! With the `metrics` feature, quorumlock records through the `metrics`
//! crate's facade, so whatever exporter the service installed (Prometheus,
//! StatsD, OpenTelemetry) gets them. Durations are in seconds. Each sits
//! next to the matching [`LockStats`] counter, which works without the
//! feature.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `quorumlock_acquires_total` | counter | `outcome` | acquire calls (`try_acquire*`, `acquire*`, `run_exclusive`) by how they ended |
//! | `quorumlock_acquire_seconds` | histogram | `outcome` | an acquire call, from the call to its result, waits included |
//! | `quorumlock_wait_seconds` | histogram | | of an acquire call, the time spent waiting between attempts |
//! | `quorumlock_attempts_total` | counter | `outcome` | attempts (one fan-out round each) by how they ended |
//! | `quorumlock_attempt_seconds` | histogram | | an attempt's round, until the quorum was decided |
//! | `quorumlock_renewals_total` | counter | `outcome`: `renewed`, `failed` | watchdog renewals of one lock |
//! | `quorumlock_renewal_seconds` | histogram | | a successful renewal, from its round's start |
//! | `quorumlock_extends_total` | counter | `outcome`: `extended`, `failed` | [`LockGuard::extend`] calls |
//! | `quorumlock_releases_total` | counter | | held locks released by their holder |
//! | `quorumlock_losses_total` | counter | `reason` | held locks lost before release |
//! | `quorumlock_hold_seconds` | histogram | | a held lock, from its win to its release or loss |
//! | `quorumlock_watched_locks` | gauge | | locks the watchdog renews now |
//! | `quorumlock_fencing_tokens_total` | counter | | fencing tokens established |
//! | `quorumlock_node_errors_total` | counter | `node` | failed calls to a node |
//! | `quorumlock_node_timeouts_total` | counter | `node` | calls a node did not answer within the node timeout |
//! | `quorumlock_node_counting` | gauge | `node` | 1 while the node's votes count toward the quorum, 0 from when it stops (unreachable, quarantined, silent, same server, refused; logged at warn) until it counts again (logged at info) |
//!
//! Label values: `outcome` of an acquire or attempt is `acquired`,
//! `contended`, `quorum_not_reached`, `validity_used_up`,
//! `wait_budget_exhausted` (calls only) or `error`; `reason` is
//! `validity_expired`, `keys_gone`, `renewals_failed`, `max_hold_reached` or
//! `force_released`; `node` is the node's URL without credentials.
//!
//! # Traces
//!
//! Every public operation runs in a `tracing` span at debug level:
//! `acquire` (fields `key`, `wait_ms`, `attempts`, `elapsed_us`,
//! `waited_us`) around its `attempt` spans (`key`, `nodes`, `won`,
//! `elapsed_us`, `validity_ms`), `renew` (one per renewal group, `locks`),
//! `extend` (`key`, `ttl_ms`), `release` (`key`, `nodes`) and `fencing`
//! (`key`, `nodes`). Losses are logged at warn level.
//!
//! Without a TLS feature, a `rediss://` node is [`ConfigError::TlsNotEnabled`].
//! The `redis` crate is re-exported as [`redis`] (its features are listed
//! there), so a client you build for [`LockConfigBuilder::node_client`] is
//! of the version the lock uses.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// The Rust snippets of README.md and GUIDE.md, compiled (and run, unless
// marked `no_run`) with the doctests, so that what a reader pastes builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../GUIDE.md")]
pub struct GuideDoctests;

// The layers, each importing only from the layers below it (see
// ARCHITECTURE.md; `tests/architecture.rs` keeps the shape).
// 0 pure: no I/O, no async.
mod attempts;
mod background;
mod batch;
mod clock;
mod config;
mod error;
mod health;
mod keys;
mod owner;
mod quorum;
mod redact;
mod retry;
mod server_ids;
mod stats;
mod telemetry;
mod wait;
// 1 I/O: the nodes and the rounds sent to them.
mod core;
mod epoch;
mod fanout;
pub mod fenced;
mod node;
mod scripts;
mod sentinel;
// 2 state: a held lock's one owner of mutable state.
mod lease;
// 3 services: renewal, wake-ups, giving back.
mod release;
mod services;
pub mod wake;
pub mod watchdog;
// 4 rounds: an acquire, a fencing read.
mod acquire;
pub mod fence;
// 5 handles.
mod guard;
// 6 the service.
mod any_of;
mod call;
mod lock;
mod rwlock;
mod semaphore;
// 7 front ends.
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;

pub use clock::Stamp;
pub use config::{GuardOptions, LockConfig, LockConfigBuilder, SentinelNode};
pub use error::{
    ConfigError, Error, LostReason, NodeError, NodeErrorKind, NodeOutcome, NodeReport, NodeReports,
};
pub use guard::{HeldLock, LockGuard};
pub use lease::{Hold, LossNotice, Renewal};
pub use lock::MultiLock;
pub use owner::Owner;
pub use quorum::Quorum;
/// The `redis` crate this lock is built on (1.8), for clients you configure
/// yourself ([`LockConfigBuilder::node_client`]) and for resources that
/// check fencing tokens.
///
/// Its features enabled by quorumlock: `tokio-comp` (async connections on
/// Tokio, with `aio`) and `script` ([`redis::Script`], a Lua script sent by
/// its SHA1 and loaded on first use); with quorumlock's `tls-rustls` also
/// `tokio-rustls-comp` and `tls-rustls-webpki-roots`, with `tls-native-tls`
/// also `tokio-native-tls-comp`. To depend on `redis` yourself instead,
/// keep the same major version, so that a client you build is the type
/// [`LockConfigBuilder::node_client`] takes, and name the features you
/// use:
///
/// ```toml
/// redis = { version = "1.8", default-features = false, features = ["tokio-comp", "script"] }
/// ```
///
/// A counter that only a holder with a fencing token at least the last one
/// may increase, through the re-export alone (the check and the write are
/// one script call, so nothing comes between them):
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?; // 3 local redis-servers
/// # let nodes = testbed.urls();
/// # let resource_server = quorumlock_testbed::Testbed::start(1)?; // a local redis-server
/// # let resource_url = resource_server.urls()[0].clone();
/// use quorumlock::redis::{self, Script};
/// use quorumlock::{LockConfig, MultiLock};
///
/// // Reply: the new count, or -1 when a larger token was seen before.
/// let fenced_incr = Script::new(
///     r"
///     local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
///     if tonumber(ARGV[1]) < last then return -1 end
///     redis.call('HSET', KEYS[1], 'token', ARGV[1])
///     return redis.call('HINCRBY', KEYS[1], 'count', 1)
///     ",
/// );
/// // The counter lives on a server of its own, not on a lock node.
/// let mut counter = redis::Client::open(resource_url)?
///     .get_multiplexed_async_connection()
///     .await?;
///
/// let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let guard = lock.try_acquire("visits").await?;
/// let token = guard.fencing_token().await?;
/// let count: i64 = fenced_incr.key("visits").arg(token).invoke_async(&mut counter).await?;
/// assert_eq!(count, 1);
/// guard.release().await;
///
/// // A holder that comes back with an older token changes nothing.
/// let stale: i64 = fenced_incr.key("visits").arg(token - 1).invoke_async(&mut counter).await?;
/// assert_eq!(stale, -1);
/// # Ok(())
/// # }
/// ```
pub use redis;
pub use rwlock::{MultiRwLock, ReadGuard, WriteGuard};
pub use semaphore::{MultiSemaphore, Permit};
// The re-export promises `redis::Script` (its `script` feature). This crate's
// dev-dependencies turn that feature on too, so the doctest above would pass
// without it: the library's own build (`cargo build`, `cargo publish`) fails
// here instead if the feature is ever dropped from Cargo.toml.
#[allow(dead_code)]
type ReexportCarriesScript = redis::Script;
pub use release::ReleaseReport;
pub use retry::RetryPolicy;
pub use stats::{LockStats, NodeStats};
/// The token [`HeldLock::cancellation_token`] hands out (from `tokio-util`).
pub use tokio_util::sync::CancellationToken;
pub use wait::Wait;
