//! When to try again after a failed attempt: capped exponential backoff with
//! jitter, so that contending clients spread out instead of colliding in step.

use std::time::Duration;

use crate::error::ConfigError;

/// How [`MultiLock::acquire`](crate::MultiLock::acquire) spaces its attempts.
///
/// Attempt `k` (from 1) is followed by a pause of
/// `min(max_delay, base_delay × 2^(k−1))`, of which a random share up to
/// `jitter` is taken off. Attempts stop when the caller's wait budget is
/// spent or after `max_attempts`, whichever comes first.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::RetryPolicy;
///
/// let retry = RetryPolicy::default()
///     .with_base_delay(Duration::from_millis(5))
///     .with_max_delay(Duration::from_millis(100))
///     .with_jitter(0.5)
///     .with_max_attempts(20);
/// assert_eq!(retry.max_attempts(), Some(20));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    max_attempts: Option<u32>,
    base_delay: Duration,
    max_delay: Duration,
    jitter: f64,
}

impl Default for RetryPolicy {
    /// No attempt limit (the wait budget decides), 10 ms base delay doubling
    /// up to 200 ms, half of each delay randomised.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: None,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(200),
            jitter: 0.5,
        }
    }
}

impl RetryPolicy {
    /// Stop after this many attempts even if wait budget is left (at least 1).
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// let retry = RetryPolicy::default().with_max_attempts(5);
    /// assert_eq!(retry.max_attempts(), Some(5));
    /// ```
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The pause after the first failed attempt (above zero).
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// let retry = RetryPolicy::default().with_base_delay(Duration::from_millis(2));
    /// assert_eq!(retry.base_delay(), Duration::from_millis(2));
    /// ```
    pub fn with_base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// The longest pause between two attempts (at least `base_delay`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// let retry = RetryPolicy::default().with_max_delay(Duration::from_millis(500));
    /// assert_eq!(retry.max_delay(), Duration::from_millis(500));
    /// ```
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// The share of each pause that is randomised, from 0 (none) to 1 (all).
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// let retry = RetryPolicy::default().with_jitter(1.0);
    /// assert_eq!(retry.jitter(), 1.0);
    /// ```
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The attempt limit, if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().max_attempts(), None, "the wait budget decides");
    /// ```
    pub fn max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The pause after the first failed attempt.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().base_delay(), Duration::from_millis(10));
    /// ```
    pub fn base_delay(&self) -> Duration {
        self.base_delay
    }

    /// The longest pause.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().max_delay(), Duration::from_millis(200));
    /// ```
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The randomised share of each pause.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().jitter(), 0.5);
    /// ```
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, value: String, reason| {
            Err(ConfigError::InvalidRetry {
                field,
                value,
                reason,
            })
        };
        if self.max_attempts == Some(0) {
            return bad("max_attempts", "0".into(), "at least one attempt is needed");
        }
        if self.base_delay.is_zero() {
            return bad(
                "base_delay",
                "0ns".into(),
                "a zero delay makes waiters spin",
            );
        }
        if self.max_delay < self.base_delay {
            return bad(
                "max_delay",
                format!("{:?}", self.max_delay),
                "must be at least base_delay",
            );
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return bad(
                "jitter",
                self.jitter.to_string(),
                "must be a number from 0 to 1",
            );
        }
        Ok(())
    }

    /// The pause after failed attempt `attempt` (counting from 1), given a
    /// uniform random `unit` in `[0, 1)`.
    pub(crate) fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let full = self
            .base_delay
            .saturating_mul(1 << doublings)
            .min(self.max_delay);
        // At most `full` (the factor is at most 1); a product the float
        // rounds above `Duration::MAX` stays at `full` rather than panic.
        let factor = 1.0 - self.jitter * unit.clamp(0.0, 1.0);
        Duration::try_from_secs_f64(full.as_secs_f64() * factor).map_or(full, |d| d.min(full))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let p = RetryPolicy::default().with_jitter(0.0);
        let got: Vec<u128> = (1..=7).map(|k| p.delay(k, 0.9).as_millis()).collect();
        assert_eq!(got, vec![10, 20, 40, 80, 160, 200, 200]);
    }

    #[test]
    fn rejects_bad_values_naming_them() {
        let cases = [
            (RetryPolicy::default().with_max_attempts(0), "max_attempts"),
            (
                RetryPolicy::default().with_base_delay(Duration::ZERO),
                "base_delay",
            ),
            (
                RetryPolicy::default().with_max_delay(Duration::from_millis(1)),
                "max_delay",
            ),
            (RetryPolicy::default().with_jitter(f64::NAN), "jitter"),
            (RetryPolicy::default().with_jitter(1.5), "jitter"),
        ];
        for (policy, field) in cases {
            match policy.validate() {
                Err(ConfigError::InvalidRetry { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: expected InvalidRetry, got {other:?}"),
            }
        }
    }

    proptest! {
        #[test]
        fn delay_stays_within_its_band(
            base in 1u64..1000, extra in 0u64..10_000, jitter in 0.0f64..=1.0,
            attempt in 1u32..200, unit in 0.0f64..1.0,
        ) {
            let p = RetryPolicy::default()
                .with_base_delay(Duration::from_micros(base))
                .with_max_delay(Duration::from_micros(base + extra))
                .with_jitter(jitter);
            prop_assert!(p.validate().is_ok());
            let d = p.delay(attempt, unit);
            let full = p.delay(attempt, 0.0);
            prop_assert!(d <= full);
            prop_assert!(full <= p.max_delay());
            prop_assert!(d.as_secs_f64() >= full.as_secs_f64() * (1.0 - jitter) - 1e-9);
            prop_assert!(p.delay(attempt + 1, 0.0) >= full, "the ceiling never shrinks");
        }

        /// Any durations a caller can pass, up to `Duration::MAX`: a delay
        /// within the policy's ceiling, never a panic.
        #[test]
        fn delay_over_the_full_range_of_durations(
            secs in any::<u64>(), nanos in 0u32..1_000_000_000, extra in any::<u64>(),
            jitter in 0.0f64..=1.0, attempt in any::<u32>(), unit in 0.0f64..=1.0,
        ) {
            let base = Duration::new(secs, nanos).max(Duration::from_nanos(1));
            let max = base.saturating_add(Duration::from_secs(extra));
            let p = RetryPolicy::default().with_base_delay(base).with_max_delay(max).with_jitter(jitter);
            prop_assert!(p.validate().is_ok());
            prop_assert!(p.delay(attempt, unit) <= max);
        }
    }

    #[test]
    fn the_longest_delays_saturate() {
        let p = RetryPolicy::default()
            .with_base_delay(Duration::MAX)
            .with_max_delay(Duration::MAX)
            .with_jitter(0.0);
        assert_eq!(p.delay(1, 0.5), Duration::MAX);
        assert_eq!(p.delay(u32::MAX, 1.0), Duration::MAX);
    }
}
