//! One hold's story in the history, told the same way by every client of
//! a run: the worker tasks of each workload (mutex, read-write lock,
//! semaphore) and the controls' clients.
//!
//! A [`HoldLog`] logs the acquire call ([`What::AcquireStart`]), its
//! failure or win (with the validity deadline, the nodes held and, for a
//! read-write lock or a semaphore, the [`Mode`]), the fencing token, each
//! renewal and the loss notice ([`Watcher`]), and the start of the release:
//! everything the checker builds a hold's interval from.
//!
//! [`Held`] is what a win gives, whichever primitive gave it: it derefs
//! to the slot's (or slots') [`LockGuard`].

use std::ops::Deref;
use std::time::Duration;

use quorumlock::{
    Error, HeldLock, Hold, LockGuard, Owner, Permit, ReadGuard, ReleaseReport, Stamp, WriteGuard,
};
use tokio::sync::oneshot;

use super::history::{self, HistoryWriter, Mode, What};

/// A hold won from any of the primitives.
pub enum Held {
    /// A mutex's (or a multi-name lock's).
    Lock(LockGuard),
    /// A read-write lock's read side.
    Read(ReadGuard),
    /// A read-write lock's write side.
    Write(WriteGuard),
    /// A semaphore's permit, with the K the holder believes in (the K it
    /// passed, unless a control lies about it).
    Permit(Permit, u32),
}

impl Deref for Held {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        match self {
            Held::Lock(guard) => guard,
            Held::Read(guard) => guard,
            Held::Write(guard) => guard,
            Held::Permit(permit, _) => permit,
        }
    }
}

impl Held {
    /// What the history calls it (`None` for a lock).
    pub fn mode(&self) -> Option<Mode> {
        match self {
            Held::Lock(_) => None,
            Held::Read(guard) => Some(Mode::Read { slot: guard.slot() }),
            Held::Write(_) => Some(Mode::Write),
            Held::Permit(permit, permits) => Some(Mode::Permit {
                slot: permit.slot(),
                permits: *permits,
            }),
        }
    }

    /// Gives it back.
    pub async fn release(self) -> ReleaseReport {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Read(guard) => guard.release().await,
            Held::Write(guard) => guard.release().await,
            Held::Permit(permit, _) => permit.release().await,
        }
    }
}

/// The indexes (configuration order) of the nodes a guard holds, for
/// [`What::Won`].
pub fn held_indexes(guard: &LockGuard) -> Vec<usize> {
    guard
        .nodes()
        .enumerate()
        .filter(|(_, (_, h))| *h == Hold::Held)
        .map(|(i, _)| i)
        .collect()
}

/// The hold's validity deadline as a `CLOCK_MONOTONIC` stamp.
pub fn deadline_of(held: &HeldLock) -> history::Nanos {
    to_monotonic(held.deadline())
}

/// A stamp on the lock's deadline clock (`CLOCK_BOOTTIME`) as a stamp on
/// `CLOCK_MONOTONIC`; the two differ only by time spent suspended, so the
/// difference is taken now. Also right for a deadline in the past (a
/// paused holder's), which `validity()` would clamp to zero.
pub fn to_monotonic(stamp: Stamp) -> history::Nanos {
    let boot = Stamp::now();
    let mono = history::now();
    let ahead = stamp.saturating_since(boot).as_nanos() as u64;
    let behind = boot.saturating_since(stamp).as_nanos() as u64;
    (mono + ahead).saturating_sub(behind)
}

/// Logs the events of one acquire call and, if it wins, of its hold.
///
/// Logging never fails the caller: a full disk would make the history
/// useless, and the run notices the missing lines.
#[derive(Clone, Debug)]
pub struct HoldLog {
    log: HistoryWriter,
    key: String,
    hold: String,
    /// Whether the call's [`What::AcquireStart`] named its owner.
    owner_named: bool,
}

impl HoldLog {
    /// Logs the start of an acquire call of `key` (the user's name: the
    /// mutex's, the read-write lock's, the semaphore's) as attempt `hold`.
    /// `owner`: the owner every attempt of the call writes, when the call
    /// takes one (a mutex's `acquire_as`); otherwise the winning attempt's
    /// is logged with the win.
    pub fn attempt(log: &HistoryWriter, key: &str, hold: &str, owner: Option<&Owner>) -> HoldLog {
        let rec = HoldLog {
            log: log.clone(),
            key: key.to_string(),
            hold: hold.to_string(),
            owner_named: owner.is_some(),
        };
        rec.log(What::AcquireStart {
            key: rec.key.clone(),
            hold: rec.hold.clone(),
            owner: owner.map(|o| o.token().to_string()),
        });
        rec
    }

    /// The lock name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The hold id.
    pub fn hold(&self) -> &str {
        &self.hold
    }

    fn log(&self, what: What) {
        let _ = self.log.log(what);
    }

    /// The call failed.
    pub fn failed(&self, error: &Error) {
        self.log(What::Failed {
            key: self.key.clone(),
            hold: self.hold.clone(),
            error: error.to_string(),
        });
    }

    /// The call won `guard`, a hold of kind `mode`.
    pub fn won(&self, guard: &LockGuard, mode: Option<Mode>) {
        self.log(What::Won {
            key: self.key.clone(),
            hold: self.hold.clone(),
            deadline: deadline_of(&guard.handle()),
            nodes: held_indexes(guard),
            mode,
            owner: (!self.owner_named).then(|| guard.token().to_string()),
        });
    }

    /// Gets the hold's fencing token and logs it (or why there is none).
    pub async fn token(&self, held: &HeldLock) -> Option<u64> {
        match held.fencing_token().await {
            Ok(token) => {
                self.log(What::Token {
                    key: self.key.clone(),
                    hold: self.hold.clone(),
                    token,
                });
                Some(token)
            }
            Err(error) => {
                self.log(What::TokenFailed {
                    key: self.key.clone(),
                    hold: self.hold.clone(),
                    error: error.to_string(),
                });
                None
            }
        }
    }

    /// Logs each renewal of the hold (its new deadline, seen every `poll`)
    /// and its loss, until [`Watcher::stop`].
    pub fn watch(&self, held: &HeldLock, poll: Duration) -> Watcher {
        let (done, mut done_rx) = oneshot::channel::<()>();
        let held = held.clone();
        let rec = self.clone();
        let task = tokio::spawn(async move {
            let mut last = held.last_renewal().map(|r| r.started);
            let lost = held.lost();
            tokio::pin!(lost);
            loop {
                tokio::select! {
                    _ = &mut done_rx => return,
                    notice = &mut lost => {
                        rec.log(What::Lost {
                            key: rec.key.clone(),
                            hold: rec.hold.clone(),
                            deadline: to_monotonic(notice.deadline),
                            reason: notice.reason.to_string(),
                        });
                        return;
                    }
                    _ = tokio::time::sleep(poll) => {
                        let now = held.last_renewal().map(|r| r.started);
                        if now != last && held.is_held() {
                            last = now;
                            rec.log(What::Renew {
                                key: rec.key.clone(),
                                hold: rec.hold.clone(),
                                deadline: deadline_of(&held),
                            });
                        }
                    }
                }
            }
        });
        Watcher { done, task }
    }

    /// Logs the end of the work under the hold ([`What::Release`], stamped
    /// before the release is sent) and releases it; stops `watcher` first
    /// (`lost()` also resolves on release, which is not a loss).
    pub async fn release(&self, held: Held, watcher: Option<Watcher>) -> ReleaseReport {
        if let Some(watcher) = watcher {
            watcher.stop().await;
        }
        let handle = held.handle();
        self.log(What::Release {
            key: self.key.clone(),
            hold: self.hold.clone(),
            deadline: deadline_of(&handle),
            held: handle.is_held(),
        });
        held.release().await
    }
}

/// The task logging a hold's renewals and loss ([`HoldLog::watch`]).
pub struct Watcher {
    done: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Stops watching, and waits until the task has.
    pub async fn stop(self) {
        let _ = self.done.send(());
        let _ = self.task.await;
    }
}
