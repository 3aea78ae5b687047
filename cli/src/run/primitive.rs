//! What `run` takes of its name, by mode: the mutex, a reader or the
//! writer of the read-write lock, or one permit of the semaphore. Every
//! one of them is held as a [`LockGuard`] (each guard's `into_guard`), so
//! the rest of `run` (fencing token, watchdog loss, release) is the same
//! for all.

use std::ops::Deref;

use quorumlock::{
    Error, LockConfig, LockGuard, MultiLock, MultiRwLock, MultiSemaphore, ReleaseReport, Wait,
};

use crate::args::Mode;
use crate::slots::Primitive;

/// The lock service of one mode.
pub enum Service {
    Mutex(MultiLock),
    Reader(MultiRwLock),
    Writer(MultiRwLock),
    Permit(MultiSemaphore, u32),
}

impl Service {
    pub fn new(mode: Mode, config: LockConfig) -> Service {
        match mode {
            Mode::Mutex => Service::Mutex(MultiLock::new(config)),
            Mode::Reader => Service::Reader(MultiRwLock::new(config)),
            Mode::Writer => Service::Writer(MultiRwLock::new(config)),
            Mode::Permit(k) => Service::Permit(MultiSemaphore::new(config), k),
        }
    }

    pub fn mode(&self) -> Mode {
        match self {
            Service::Mutex(_) => Mode::Mutex,
            Service::Reader(_) => Mode::Reader,
            Service::Writer(_) => Mode::Writer,
            Service::Permit(_, k) => Mode::Permit(*k),
        }
    }

    /// The lock service underneath (connections, `warm_up`).
    pub fn lock(&self) -> &MultiLock {
        match self {
            Service::Mutex(lock) => lock,
            Service::Reader(rw) | Service::Writer(rw) => rw.lock(),
            Service::Permit(semaphore, _) => semaphore.lock(),
        }
    }

    /// The name, waiting up to `wait`.
    pub async fn acquire(&self, name: &str, wait: Wait) -> Result<Held, Error> {
        let (guard, slot) = match self {
            Service::Mutex(lock) => (lock.acquire(name, wait).await?, None),
            Service::Reader(rw) => {
                let reader = rw.read(name, wait).await?;
                let slot = reader.slot();
                (reader.into_guard(), Some(slot))
            }
            Service::Writer(rw) => (rw.write(name, wait).await?.into_guard(), None),
            Service::Permit(semaphore, k) => {
                let permit = semaphore.acquire(name, *k, wait).await?;
                let slot = permit.slot();
                (permit.into_guard(), Some(slot))
            }
        };
        Ok(Held { guard, slot })
    }

    /// The keys whose holders keep this mode out of `name`, to read for
    /// a waiting line: the mutex's own key, every reader slot (a writer
    /// holds them all), or a semaphore's first few slots (every one is
    /// held while a permit is refused).
    pub fn refusing_keys(&self, name: &str) -> Vec<String> {
        match self {
            Service::Mutex(_) => vec![name.to_owned()],
            Service::Reader(_) | Service::Writer(_) => {
                Primitive::ReadWrite.keys(name, Primitive::ReadWrite.slots())
            }
            Service::Permit(_, k) => Primitive::Semaphore.keys(name, (*k).min(NAMED)),
        }
    }
}

/// How many holders a waiting line names, at most.
pub const NAMED: u32 = 4;

/// The name held: the guard of its key (a reader's or a permit's slot,
/// every reader slot for a writer).
pub struct Held {
    guard: LockGuard,
    /// The reader slot or permit held (`QUORUMLOCK_SLOT`).
    slot: Option<u32>,
}

impl Deref for Held {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl Held {
    /// The reader slot or permit held (`QUORUMLOCK_SLOT`).
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    pub async fn release(self) -> ReleaseReport {
        self.guard.release().await
    }
}
