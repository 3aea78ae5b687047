//! How long an acquire may wait for a name: a type of its own, so that the
//! wait budget is never taken for the lease (the TTL), which is also a
//! `Duration`.

use std::time::Duration;

/// The wait budget of [`MultiLock::acquire`](crate::MultiLock::acquire) and
/// its kin: how long the call may keep trying for a held name. It says
/// nothing about how long the lock is held once won; that is the TTL
/// ([`LockConfigBuilder::ttl`](crate::LockConfigBuilder::ttl), or
/// [`GuardOptions::ttl`](crate::GuardOptions::ttl) per call).
///
/// The last attempt starts before the budget is spent, so a call can
/// overrun it by at most one attempt (about one node timeout).
/// [`Wait::NONE`] makes one attempt, as
/// [`try_acquire`](crate::MultiLock::try_acquire) does, but with the
/// retrying call's error ([`Error::WaitBudgetExhausted`](crate::Error::WaitBudgetExhausted))
/// when the name is held.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Wait;
///
/// let wait = Wait::up_to(Duration::from_millis(1500));
/// assert_eq!(wait.budget(), Duration::from_millis(1500));
/// assert_eq!(Wait::NONE.budget(), Duration::ZERO);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Wait(Duration);

impl Wait {
    /// No waiting: one attempt.
    ///
    /// ```
    /// assert!(quorumlock::Wait::NONE.budget().is_zero());
    /// ```
    pub const NONE: Wait = Wait(Duration::ZERO);

    /// Keep trying for up to `budget`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let wait = quorumlock::Wait::up_to(Duration::from_secs(2));
    /// assert_eq!(wait.budget().as_secs(), 2);
    /// ```
    pub const fn up_to(budget: Duration) -> Wait {
        Wait(budget)
    }

    /// The budget.
    ///
    /// ```
    /// use std::time::Duration;
    /// let wait = quorumlock::Wait::up_to(Duration::from_millis(250));
    /// assert_eq!(wait.budget(), Duration::from_millis(250));
    /// ```
    pub const fn budget(self) -> Duration {
        self.0
    }
}
