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
//! * Waiting acquires are woken by release notices ([`wake`]), one
//!   subscriber connection per node, instead of polling.
//! * [`Error`] separates contention ([`Error::Contended`], with how long the
//!   holder still has) from missing nodes ([`Error::QuorumNotReached`], with
//!   each node's [`NodeError`]) and from a win that came too late.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let testbed = quorumlock_testbed::Testbed::start(5)?;
//! use std::time::Duration;
//! use quorumlock::{Error, LockConfig, MultiLock, Quorum};
//!
//! let config = LockConfig::builder()
//!     .nodes(testbed.urls())              // five independent masters
//!     .quorum(Quorum::Majority)           // three must agree
//!     .ttl(Duration::from_secs(10))
//!     .build()?;
//! let lock = MultiLock::new(config);
//!
//! let guard = lock.acquire("payment:4711", Duration::from_secs(1)).await?;
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
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The layers, each importing only from the layers below it (see
// ARCHITECTURE.md; `tests/architecture.rs` keeps the shape).
// 0 pure: no I/O, no async.
mod clock;
mod config;
mod error;
mod keys;
mod owner;
mod quorum;
mod redact;
mod retry;
mod server_ids;
mod stats;
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
pub mod wake;
pub mod watchdog;
// 4 handles.
mod guard;
// 5 the service.
mod acquire;
pub mod fence;
mod lock;
mod scoped;

pub use clock::Stamp;
pub use config::{LockConfig, LockConfigBuilder, SentinelNode};
pub use error::{
    ConfigError, Error, LostReason, NodeError, NodeErrorKind, NodeOutcome, NodeReport, NodeReports,
};
pub use guard::{HeldLock, LockGuard};
pub use lease::{Hold, LossNotice, Renewal};
pub use lock::MultiLock;
pub use owner::Owner;
pub use quorum::Quorum;
pub use release::ReleaseReport;
pub use retry::RetryPolicy;
pub use stats::{LockStats, NodeStats};
/// The token [`HeldLock::cancellation_token`] hands out (from `tokio-util`).
pub use tokio_util::sync::CancellationToken;
