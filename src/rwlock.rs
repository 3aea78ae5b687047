//! [`MultiRwLock`]: many readers or one writer of a name, over N
//! independent Redis masters, with the mutex's guarantees.
//!
//! The type's documentation says how it works and why it is safe.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Request;
use crate::any_of::{self, AnyOf, Sweepers};
use crate::call;
use crate::config::{GuardOptions, LockConfig};
use crate::error::Error;
use crate::guard::{HeldLock, LockGuard};
use crate::keys::{RW_PREFIX, check_primitive_name, slot_name};
use crate::lock::{MultiLock, run_holding};
use crate::wait::Wait;

/// A read-write lock over N independent Redis masters: many readers or
/// one writer of a name at once.
///
/// # How
///
/// A name has [`READER_SLOTS`](MultiRwLock::READER_SLOTS) reader slots,
/// each an ordinary lock name (`quorumlock:rw:<name>:<i>`). A **reader**
/// takes one slot, as a semaphore's permit does (`any_of`). A **writer**
/// takes every slot at once, as one lock on several names: each node takes
/// all of them in one script call or none, and the writer wins when a
/// quorum of nodes gave it all of them.
///
/// # Why it is safe
///
/// A writer's quorum and any other holder's quorum of one slot share a
/// node (two majorities meet; likewise for every quorum policy, which
/// never lets two holders of one name in). On that node the slot was
/// either the writer's, or the other holder's, not both within their
/// validities: that is the mutex's guarantee, slot by slot, with node
/// epochs and the quarantine (a node that lost its data votes for nobody
/// until every lease it may have forgotten has ended). So a writer never
/// overlaps a reader or another writer. Readers take different slots, so
/// they never exclude each other, up to `READER_SLOTS` at once.
///
/// # A writer is not starved by readers
///
/// A read-write lock service is always [fair](crate::LockConfigBuilder::fair):
/// a waiting writer that a node refuses takes a place in the waiter queue
/// of every slot there. A reader never queues, and a free slot with a
/// waiter queued on it is refused to anyone but that waiter. So once a
/// writer waits, readers that come after it are refused, the readers that
/// hold finish, and the writer gets the name; the readers then come back
/// in. A stream of writers can keep readers out in the same way (writers
/// go first).
///
/// The preference is a liveness rule, not a safety one, and faults can
/// open a gap in it: a writer's place is given up on a node where an
/// attempt of it took the slots, and an attempt that then loses (its
/// requests to other nodes lost) or a queued node that loses its data
/// leaves the writer queued on too few nodes until its next refused
/// attempt queues it again (with its first ticket, so in its old order).
/// A reader may get in meanwhile. `tests/model_slots.rs` shows both
/// schedules; exclusion is never at stake.
///
/// # Fencing tokens
///
/// A writer's [token](HeldLock::fencing_token) is larger than every token
/// handed out before it on the name, a reader's included, and smaller than
/// every later one: writers are ordered. A reader's token is larger than
/// every earlier writer's, so a resource that takes writes from writers
/// only can still check a reader against stale writers; readers holding at
/// once may get equal tokens.
///
/// # Limits
///
/// At most [`READER_SLOTS`](MultiRwLock::READER_SLOTS) readers hold at
/// once; more wait. The number is fixed (every client of a name must use
/// the same slots, or a writer would not exclude a reader on a slot it
/// does not know). A writer's acquire and release touch every slot: about
/// `READER_SLOTS` times a mutex's server work per node.
///
/// # Example
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let testbed = quorumlock_testbed::Testbed::start(3)?;
/// # let nodes = testbed.urls();
/// use quorumlock::{Error, LockConfig, MultiRwLock};
///
/// let config = MultiRwLock::new(LockConfig::builder().nodes(nodes).build()?);
/// let a = config.try_read("settings").await?;
/// let b = config.try_read("settings").await?;
/// // Readers share; a writer is refused while they hold.
/// assert!(matches!(config.try_write("settings").await, Err(Error::Contended { .. })));
/// a.release().await;
/// b.release().await;
/// let w = config.try_write("settings").await?;
/// assert!(matches!(config.try_read("settings").await, Err(Error::Contended { .. })));
/// w.release().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MultiRwLock {
    lock: MultiLock,
    /// How many of this service's calls wait for one name's slots at once.
    sweepers: Arc<Sweepers>,
}

impl fmt::Debug for MultiRwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiRwLock")
            .field("lock", &self.lock)
            .finish()
    }
}

impl MultiRwLock {
    /// How many readers may hold a name at once: the name's reader slots.
    pub const READER_SLOTS: u32 = 32;

    /// A read-write lock service over the configured nodes. It has a lock
    /// service of its own, always with [wake-ups](crate::LockConfigBuilder::wake_ups)
    /// and [fair](crate::LockConfigBuilder::fair) waiter queues, which a
    /// waiting writer needs (see [`MultiRwLock`]).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::{LockConfig, MultiRwLock};
    ///
    /// let rw = MultiRwLock::new(LockConfig::builder().node("redis://127.0.0.1:6379").build()?);
    /// assert!(rw.lock().config().fair());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(mut config: LockConfig) -> MultiRwLock {
        config.fair = true;
        config.wake_ups = true;
        MultiRwLock {
            lock: MultiLock::new(config),
            sweepers: Arc::default(),
        }
    }

    /// The lock name of reader slot `slot` of `name`:
    /// `quorumlock:rw:<name>:<slot>` (a writer holds every slot below
    /// [`READER_SLOTS`](Self::READER_SLOTS)), for an operator's
    /// [`force_release`](MultiLock::force_release) and for tools that read
    /// the nodes.
    ///
    /// ```
    /// use quorumlock::MultiRwLock;
    /// assert_eq!(MultiRwLock::slot_name("catalog", 0), "quorumlock:rw:catalog:0");
    /// ```
    pub fn slot_name(name: &str, slot: u32) -> String {
        slot_name(RW_PREFIX, name, slot)
    }

    /// The lock service underneath: its settings, [`stats`](MultiLock::stats),
    /// [`warm_up`](MultiLock::warm_up) and [`settle`](MultiLock::settle).
    pub fn lock(&self) -> &MultiLock {
        &self.lock
    }

    /// One attempt at the read side of `name`: a reader slot if the name
    /// has no writer (and none waiting), [`Error::Contended`] otherwise.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::try_acquire`].
    pub async fn try_read(&self, name: &str) -> Result<ReadGuard, Error> {
        self.reader(name, None, self.lock_defaults()).await
    }

    /// The read side of `name`, waiting up to `wait` for a writer to leave.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::acquire`].
    pub async fn read(&self, name: &str, wait: Wait) -> Result<ReadGuard, Error> {
        self.reader(name, Some(wait), self.lock_defaults()).await
    }

    /// [`read`](Self::read) with this guard's own TTL or watchdog setting.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::acquire`].
    pub async fn read_with(
        &self,
        name: &str,
        wait: Wait,
        options: &GuardOptions,
    ) -> Result<ReadGuard, Error> {
        let how = options.resolve(self.lock.config())?;
        self.reader(name, Some(wait), how).await
    }

    /// One attempt at the write side of `name`: every reader slot, all or
    /// nothing.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::try_acquire`].
    pub async fn try_write(&self, name: &str) -> Result<WriteGuard, Error> {
        self.writer(name, None, self.lock_defaults()).await
    }

    /// The write side of `name`, waiting up to `wait` for the readers and
    /// any writer to leave. While it waits, readers that come after it
    /// are refused.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::acquire`]: a dropped wait gives its queue
    /// places up.
    pub async fn write(&self, name: &str, wait: Wait) -> Result<WriteGuard, Error> {
        self.writer(name, Some(wait), self.lock_defaults()).await
    }

    /// [`write`](Self::write) with this guard's own TTL or watchdog setting.
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::acquire`].
    pub async fn write_with(
        &self,
        name: &str,
        wait: Wait,
        options: &GuardOptions,
    ) -> Result<WriteGuard, Error> {
        let how = options.resolve(self.lock.config())?;
        self.writer(name, Some(wait), how).await
    }

    /// Reads `name` (waiting up to `wait`), runs `work` while the watchdog
    /// keeps the read side, and releases it, as [`MultiLock::run_exclusive`].
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::run_exclusive`].
    pub async fn run_reading<F, Fut, T>(&self, name: &str, wait: Wait, work: F) -> Result<T, Error>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.reader(name, Some(wait), self.watched()).await?;
        run_holding(guard.guard, name, work).await
    }

    /// Writes `name` (waiting up to `wait`), runs `work` while the watchdog
    /// keeps the write side, and releases it, as [`MultiLock::run_exclusive`].
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// # let nodes = testbed.urls();
    /// use std::time::Duration;
    /// use quorumlock::{LockConfig, MultiRwLock, Wait};
    ///
    /// let rw = MultiRwLock::new(LockConfig::builder().nodes(nodes).build()?);
    /// let wait = Wait::up_to(Duration::from_secs(1));
    /// let token = rw.run_writing("catalog", wait, |held| async move { held.fencing_token().await }).await??;
    /// let next = rw.run_writing("catalog", wait, |held| async move { held.fencing_token().await }).await??;
    /// assert!(next > token);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`MultiLock::run_exclusive`].
    pub async fn run_writing<F, Fut, T>(&self, name: &str, wait: Wait, work: F) -> Result<T, Error>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.writer(name, Some(wait), self.watched()).await?;
        run_holding(guard.guard, name, work).await
    }

    fn lock_defaults(&self) -> (bool, Duration) {
        (self.lock.config().watchdog(), self.lock.config().ttl())
    }

    fn watched(&self) -> (bool, Duration) {
        (true, self.lock.config().ttl())
    }

    async fn reader(
        &self,
        name: &str,
        wait: Option<Wait>,
        how: (bool, Duration),
    ) -> Result<ReadGuard, Error> {
        check_rw_name(name)?;
        let any = AnyOf {
            label: name,
            prefix: RW_PREFIX,
            count: Self::READER_SLOTS,
            how,
            wait: wait.map(Wait::budget),
            active: self.sweepers.for_slots(name, Self::READER_SLOTS),
        };
        let (guard, slot) = any_of::acquire(self.lock.services(), any).await?;
        Ok(ReadGuard {
            guard,
            name: name.into(),
            slot,
        })
    }

    async fn writer(
        &self,
        name: &str,
        wait: Option<Wait>,
        how: (bool, Duration),
    ) -> Result<WriteGuard, Error> {
        check_rw_name(name)?;
        let slots: Vec<String> = (0..Self::READER_SLOTS)
            .map(|slot| slot_name(RW_PREFIX, name, slot))
            .collect();
        let request = Request::new(&slots, None, how)?;
        let budget = wait.map(Wait::budget);
        let guard = call::acquire(self.lock.services(), request, budget)
            .await
            .map_err(|e| e.renamed(name))?;
        Ok(WriteGuard {
            guard,
            name: name.into(),
        })
    }
}

/// Checks a read-write lock's name.
fn check_rw_name(name: &str) -> Result<(), Error> {
    check_primitive_name(name, "a read-write lock needs a name")
}

/// The read side of a [`MultiRwLock`] name: one of its reader slots.
///
/// It derefs to the slot's [`LockGuard`] (validity, `lost()`, fencing
/// token, extend, release on drop); its [`key`](HeldLock::key) is the
/// slot's lock name, `quorumlock:rw:<name>:<slot>`.
#[must_use = "a read guard dropped at once is released at once; bind it for as long as the work runs"]
pub struct ReadGuard {
    guard: LockGuard,
    name: Box<str>,
    slot: u32,
}

/// The write side of a [`MultiRwLock`] name: every reader slot.
///
/// It derefs to the [`LockGuard`] of all the slots (one validity, one
/// watchdog, one release; its [`keys`](HeldLock::keys) are the slots' lock
/// names).
#[must_use = "a write guard dropped at once is released at once; bind it for as long as the work runs"]
pub struct WriteGuard {
    guard: LockGuard,
    name: Box<str>,
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("name", &self.name)
            .field("slot", &self.slot)
            .field("guard", &self.guard)
            .finish()
    }
}

impl fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGuard")
            .field("name", &self.name)
            .field("guard", &self.guard)
            .finish()
    }
}

crate::guard::slot_guard!(ReadGuard, gives_back: "the read side", hands_over: "the reader slot");
crate::guard::slot_guard!(WriteGuard, gives_back: "the write side", hands_over: "every reader slot");

impl ReadGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which reader slot this reader holds.
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl WriteGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
