//! Metrics through the `metrics` crate's facade (feature `metrics`), so a
//! service's own exporter (Prometheus, StatsD, OpenTelemetry) picks them up
//! unchanged. Without the feature every function here is empty and
//! compiles away, so the call sites need no `cfg`.
//!
//! The names, units and labels are documented on the crate page (the
//! "Metrics" section of `lib.rs`); `tests/metrics.rs` pins them. Each
//! recording sits next to the matching [`LockStats`](crate::LockStats)
//! counter, so the two always agree.

use std::time::Duration;

use crate::error::{Error, LostReason};

/// How an acquire attempt or an acquire call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Contended,
    QuorumNotReached,
    ValidityUsedUp,
    WaitBudgetExhausted,
    Error,
}

impl Outcome {
    /// The outcome of an acquire call that returned `result`.
    pub(crate) fn of<T>(result: &Result<T, Error>) -> Outcome {
        match result {
            Ok(_) => Outcome::Acquired,
            Err(Error::Contended { .. }) => Outcome::Contended,
            Err(Error::QuorumNotReached { .. }) => Outcome::QuorumNotReached,
            Err(Error::ValidityUsedUp { .. }) => Outcome::ValidityUsedUp,
            Err(Error::WaitBudgetExhausted { .. }) => Outcome::WaitBudgetExhausted,
            Err(_) => Outcome::Error,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Contended => "contended",
            Outcome::QuorumNotReached => "quorum_not_reached",
            Outcome::ValidityUsedUp => "validity_used_up",
            Outcome::WaitBudgetExhausted => "wait_budget_exhausted",
            Outcome::Error => "error",
        }
    }
}

/// A loss's label: the reason without its details.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn reason_label(reason: &LostReason) -> &'static str {
    match reason {
        LostReason::Released => "released",
        LostReason::ValidityExpired => "validity_expired",
        LostReason::KeysGone(_) => "keys_gone",
        LostReason::RenewalsFailed(_) => "renewals_failed",
        LostReason::MaxHoldReached(_) => "max_hold_reached",
        LostReason::ForceReleased => "force_released",
    }
}

#[cfg(feature = "metrics")]
mod record {
    use super::*;

    pub(crate) fn attempt(outcome: Outcome, took: Duration) {
        metrics::counter!("quorumlock_attempts_total", "outcome" => outcome.label()).increment(1);
        metrics::histogram!("quorumlock_attempt_seconds").record(took.as_secs_f64());
    }

    pub(crate) fn acquire(outcome: Outcome, took: Duration, waited: Duration) {
        metrics::counter!("quorumlock_acquires_total", "outcome" => outcome.label()).increment(1);
        metrics::histogram!("quorumlock_acquire_seconds", "outcome" => outcome.label())
            .record(took.as_secs_f64());
        metrics::histogram!("quorumlock_wait_seconds").record(waited.as_secs_f64());
    }

    pub(crate) fn renewal(renewed: bool, took: Option<Duration>) {
        let outcome = if renewed { "renewed" } else { "failed" };
        metrics::counter!("quorumlock_renewals_total", "outcome" => outcome).increment(1);
        if let Some(took) = took {
            metrics::histogram!("quorumlock_renewal_seconds").record(took.as_secs_f64());
        }
    }

    pub(crate) fn extend(extended: bool) {
        let outcome = if extended { "extended" } else { "failed" };
        metrics::counter!("quorumlock_extends_total", "outcome" => outcome).increment(1);
    }

    pub(crate) fn ended(reason: &LostReason, held_for: Duration) {
        if *reason == LostReason::Released {
            metrics::counter!("quorumlock_releases_total").increment(1);
        } else {
            metrics::counter!("quorumlock_losses_total", "reason" => reason_label(reason))
                .increment(1);
        }
        metrics::histogram!("quorumlock_hold_seconds").record(held_for.as_secs_f64());
    }

    pub(crate) fn watched(delta: f64) {
        metrics::gauge!("quorumlock_watched_locks").increment(delta);
    }

    pub(crate) fn fencing_token() {
        metrics::counter!("quorumlock_fencing_tokens_total").increment(1);
    }

    pub(crate) fn node_error(node: &str) {
        metrics::counter!("quorumlock_node_errors_total", "node" => node.to_owned()).increment(1);
    }

    pub(crate) fn node_timeout(node: &str) {
        metrics::counter!("quorumlock_node_timeouts_total", "node" => node.to_owned()).increment(1);
    }

    pub(crate) fn node_counting(node: &str, counting: bool) {
        metrics::gauge!("quorumlock_node_counting", "node" => node.to_owned())
            .set(f64::from(u8::from(counting)));
    }
}

#[cfg(not(feature = "metrics"))]
mod record {
    use super::*;

    pub(crate) fn attempt(_: Outcome, _: Duration) {}
    pub(crate) fn acquire(_: Outcome, _: Duration, _: Duration) {}
    pub(crate) fn renewal(_: bool, _: Option<Duration>) {}
    pub(crate) fn extend(_: bool) {}
    pub(crate) fn ended(_: &LostReason, _: Duration) {}
    pub(crate) fn watched(_: f64) {}
    pub(crate) fn fencing_token() {}
    pub(crate) fn node_error(_: &str) {}
    pub(crate) fn node_timeout(_: &str) {}
    pub(crate) fn node_counting(_: &str, _: bool) {}
}

pub(crate) use record::*;
