//! The one clock behind every validity deadline.
//!
//! Redis expires keys by its wall clock, which keeps running while a host is
//! suspended. `std::time::Instant` on Linux reads `CLOCK_MONOTONIC`, which stops
//! during suspend: a holder that computed its deadline with it would, after a
//! resume, believe it still holds a lock whose keys have long expired. So on
//! Linux every deadline here is taken on `CLOCK_BOOTTIME`, which is monotonic
//! *and* counts suspended time. Elsewhere the code
//! falls back to `Instant`, whose platforms' suspend behaviour varies; see the
//! crate docs.

use std::time::Duration;

/// A point in time on the deadline clock (`CLOCK_BOOTTIME` on Linux).
///
/// Only differences between two stamps mean anything; the origin is
/// unspecified (on Linux it is the moment the machine booted).
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Stamp;
///
/// let start = Stamp::now();
/// let deadline = start.after(Duration::from_secs(10));
/// assert!(deadline > start);
/// assert!(deadline.remaining() <= Duration::from_secs(10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp(Duration);

impl Stamp {
    /// The current time on the deadline clock.
    ///
    /// ```
    /// let a = quorumlock::Stamp::now();
    /// let b = quorumlock::Stamp::now();
    /// assert!(b >= a, "the clock never goes back");
    /// ```
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn now() -> Stamp {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        // The kernel never returns negative or out-of-range fields for this clock.
        Stamp(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// The current time on the deadline clock.
    ///
    /// ```
    /// let a = quorumlock::Stamp::now();
    /// let b = quorumlock::Stamp::now();
    /// assert!(b >= a, "the clock never goes back");
    /// ```
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub fn now() -> Stamp {
        use std::sync::OnceLock;
        use std::time::Instant;
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        Stamp(ORIGIN.get_or_init(Instant::now).elapsed())
    }

    /// How long ago this stamp was taken (zero if it lies in the future).
    ///
    /// ```
    /// let start = quorumlock::Stamp::now();
    /// // ... work ...
    /// assert!(start.elapsed() < std::time::Duration::from_secs(60));
    /// ```
    pub fn elapsed(self) -> Duration {
        Stamp::now().saturating_since(self)
    }

    /// `self - earlier`, or zero when `earlier` is later than `self`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let a = quorumlock::Stamp::now();
    /// let b = a.after(Duration::from_millis(5));
    /// assert_eq!(b.saturating_since(a), Duration::from_millis(5));
    /// assert_eq!(a.saturating_since(b), Duration::ZERO);
    /// ```
    pub fn saturating_since(self, earlier: Stamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The stamp `d` after this one.
    ///
    /// ```
    /// use std::time::Duration;
    /// let now = quorumlock::Stamp::now();
    /// assert_eq!(now.after(Duration::from_secs(1)).saturating_since(now), Duration::from_secs(1));
    /// ```
    pub fn after(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_add(d))
    }

    /// The stamp `d` before this one (saturating at the clock's origin).
    pub(crate) fn before(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_sub(d))
    }

    /// The Tokio instant at which this stamp will be reached, for timers.
    pub(crate) fn to_instant(self) -> tokio::time::Instant {
        instant_in(self.remaining())
    }

    /// Time left from now until this stamp (zero once it has passed).
    ///
    /// ```
    /// use std::time::Duration;
    /// let deadline = quorumlock::Stamp::now().after(Duration::from_secs(30));
    /// assert!(deadline.remaining() > Duration::from_secs(29));
    /// assert_eq!(quorumlock::Stamp::now().remaining(), Duration::ZERO, "passed already");
    /// ```
    pub fn remaining(self) -> Duration {
        self.saturating_since(Stamp::now())
    }

    /// Time since the clock's origin, e.g. for logs that several processes
    /// of one host share.
    ///
    /// ```
    /// let now = quorumlock::Stamp::now();
    /// // On Linux: time since boot, shared by every process of the host.
    /// println!("t = {:?}", now.since_origin());
    /// ```
    pub fn since_origin(self) -> Duration {
        self.0
    }
}

/// When each attempt of one waiting acquire call that asks for grants
/// started, by attempt number from 1 (only those are numbered): a grant
/// names the attempt whose request it took the name for,
/// and the call's validity counts from that attempt's start. The stamp is
/// taken before the attempt sends anything, and a node takes the key only
/// after the request reached it, so the key outlives that start by its TTL
/// (with drift, as for any round's start).
#[derive(Debug, Default)]
pub(crate) struct AttemptStarts(Vec<Stamp>);

impl AttemptStarts {
    /// Stamps the start of the next attempt; its number.
    pub(crate) fn stamp_next(&mut self) -> u32 {
        self.0.push(Stamp::now());
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }

    /// How many attempts were stamped (the last one's number).
    pub(crate) fn made(&self) -> usize {
        self.0.len()
    }

    /// The start of attempt `attempt`; `None` for a number no attempt of
    /// the call had (0, or one beyond the last).
    pub(crate) fn of(&self, attempt: u32) -> Option<Stamp> {
        let index = usize::try_from(attempt).ok()?.checked_sub(1)?;
        self.0.get(index).copied()
    }
}

/// How far off a timer for "never in practice" is set (Tokio's own choice
/// for its far future: about 30 years).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The Tokio instant `d` from now. A caller may pass any duration (a wait
/// budget of `Duration::MAX`, a backoff of hours): one too long to add to
/// the clock becomes a time that never comes in practice, never a panic.
pub(crate) fn instant_in(d: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(d.min(FAR_FUTURE)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_numbered_from_one_and_unknown_numbers_have_no_start() {
        let mut starts = AttemptStarts::default();
        assert_eq!((starts.made(), starts.of(0), starts.of(1)), (0, None, None));
        assert_eq!(starts.stamp_next(), 1);
        assert_eq!(starts.stamp_next(), 2);
        assert_eq!(starts.made(), 2);
        let (first, second) = (starts.of(1).unwrap(), starts.of(2).unwrap());
        assert!(first <= second, "stamped in order");
        assert_eq!(
            (starts.of(0), starts.of(3), starts.of(u32::MAX)),
            (None, None, None)
        );
    }

    #[test]
    fn clock_moves_forward_and_math_saturates() {
        let a = Stamp::now();
        let b = Stamp::now();
        assert!(b >= a);
        assert_eq!(
            a.saturating_since(b.after(Duration::from_secs(1))),
            Duration::ZERO
        );
        assert_eq!(
            a.after(Duration::from_millis(5)).saturating_since(a),
            Duration::from_millis(5)
        );
        assert!(a.after(Duration::from_secs(3600)).remaining() > Duration::from_secs(3500));
    }

    #[test]
    fn timers_saturate_instead_of_panicking() {
        let now = tokio::time::Instant::now();
        for d in [Duration::ZERO, Duration::from_secs(1), Duration::MAX] {
            let at = instant_in(d);
            assert!(at >= now);
            assert!(at <= now + FAR_FUTURE + Duration::from_secs(1));
        }
        assert!(instant_in(Duration::MAX) > now + Duration::from_secs(86_400 * 365 * 29));
        let far = Stamp::now().after(Duration::MAX);
        assert!(far.to_instant() > now + Duration::from_secs(86_400 * 365 * 29));
    }
}
