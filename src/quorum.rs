//! Pure decision logic: how many nodes a policy needs, the running tally of one
//! fan-out, and the validity a win leaves. No I/O here, so it can be tested
//! exhaustively.

use std::time::Duration;

/// How many nodes must agree for an acquire (or a renewal) to succeed.
///
/// ```
/// use quorumlock::Quorum;
/// assert_eq!(Quorum::Majority.required(5), 3);
/// assert_eq!(Quorum::Majority.required(4), 3);
/// assert_eq!(Quorum::All.required(5), 5);
/// assert_eq!(Quorum::AtLeast(2).required(5), 2);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quorum {
    /// More than half of the nodes: `n / 2 + 1`. The Redlock rule, and the
    /// only policy under which two holders can never both reach a quorum
    /// while every node keeps its data.
    #[default]
    Majority,
    /// Every node. Safe, but one unreachable node blocks every acquire.
    All,
    /// At least `k` nodes (`1 <= k <= n`). Mutual exclusion needs `2k > n`;
    /// a smaller `k` trades safety for availability and is the caller's choice.
    AtLeast(usize),
}

impl Quorum {
    /// The number of successes this policy needs out of `nodes`.
    ///
    /// ```
    /// use quorumlock::Quorum;
    /// assert_eq!(Quorum::Majority.required(5), 3);
    /// assert_eq!(Quorum::All.required(5), 5);
    /// assert_eq!(Quorum::AtLeast(4).required(5), 4);
    /// ```
    pub fn required(self, nodes: usize) -> usize {
        match self {
            Quorum::Majority => nodes / 2 + 1,
            Quorum::All => nodes,
            Quorum::AtLeast(k) => k,
        }
    }
}

/// One node's answer, as far as the decision is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vote {
    /// The node now holds our token.
    Won,
    /// Another owner holds the key on this node.
    Contended,
    /// Error or no answer: the node counts for nobody.
    Failed,
}

/// Where a fan-out stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not decided: the answers still missing could go either way.
    Pending,
    /// At least `required` nodes voted [`Vote::Won`].
    Won,
    /// Even if every missing answer were a win, the count would stay short.
    Impossible,
}

/// The running count of one fan-out's votes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tally {
    nodes: usize,
    required: usize,
    won: usize,
    contended: usize,
    failed: usize,
}

impl Tally {
    /// A tally for `nodes` answers of which `required` must be wins.
    pub(crate) fn new(nodes: usize, required: usize) -> Tally {
        Tally {
            nodes,
            required,
            won: 0,
            contended: 0,
            failed: 0,
        }
    }

    /// Counts one answer. Callers feed each node at most once.
    pub(crate) fn record(&mut self, vote: Vote) {
        match vote {
            Vote::Won => self.won += 1,
            Vote::Contended => self.contended += 1,
            Vote::Failed => self.failed += 1,
        }
    }

    /// Answers not yet recorded.
    pub(crate) fn missing(&self) -> usize {
        self.nodes
            .saturating_sub(self.won + self.contended + self.failed)
    }

    pub(crate) fn won(&self) -> usize {
        self.won
    }

    pub(crate) fn contended(&self) -> usize {
        self.contended
    }

    pub(crate) fn failed(&self) -> usize {
        self.failed
    }

    pub(crate) fn required(&self) -> usize {
        self.required
    }

    /// Decided as soon as the outcome is certain, not when every node answered.
    pub(crate) fn decision(&self) -> Decision {
        if self.won >= self.required {
            Decision::Won
        } else if self.won + self.missing() < self.required {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    /// Whether a failed attempt was lost to other owners: someone else
    /// holds some nodes, and the nodes that did not fail could have made a
    /// quorum had they been free. The answer a caller wants when deciding
    /// between "busy, wait" and "outage, alert".
    pub(crate) fn lost_to_contention(&self) -> bool {
        self.contended > 0 && self.nodes - self.failed >= self.required
    }

    /// Whether other owners (or the absence of our token) hold so many nodes
    /// that no quorum is possible however the rest answer: for a holder,
    /// proof that the lock is gone.
    pub(crate) fn contention_rules_out_quorum(&self) -> bool {
        self.contended > 0 && self.nodes - self.contended < self.required
    }
}

/// Allowance for clock drift between this host and the nodes:
/// `ttl × drift_factor + 2 ms` (the Redlock formula; the 2 ms cover the
/// millisecond granularity of Redis expiry).
pub(crate) fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    Duration::from_secs_f64(ttl.as_secs_f64() * drift_factor) + Duration::from_millis(2)
}

/// How long after a fan-out's start its keys are surely still ours:
/// `ttl − drift`. A holder's deadline is `start + lease`.
pub(crate) fn lease(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.saturating_sub(drift(ttl, drift_factor))
}

/// Time the holder may still assume exclusivity after a fan-out that started
/// `elapsed` ago: `ttl − elapsed − drift`, floored at zero.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Duration {
    lease(ttl, drift_factor).saturating_sub(elapsed)
}

/// How long until enough contended nodes free up for a quorum to become
/// possible among `nodes` nodes that did not fail, given the remaining TTLs
/// that the contended nodes reported
/// (`None`: a key without expiry). `None` in the result means "not known to
/// end" (a required node reported a key without expiry, or not enough nodes
/// are contended to explain the failure).
pub(crate) fn free_in(
    nodes: usize,
    required: usize,
    contended_pttls: &mut [Option<Duration>],
) -> Option<Duration> {
    // Nodes not contended could all be ours; we need `required - free` of
    // the contended ones to expire, the earliest first.
    let free = nodes.saturating_sub(contended_pttls.len());
    let more = required.checked_sub(free)?;
    if more == 0 {
        return Some(Duration::ZERO);
    }
    // `None` (no expiry) sorts last: it is the longest wait.
    contended_pttls.sort_by_key(|p| p.map_or((1, Duration::ZERO), |d| (0, d)));
    contended_pttls.get(more - 1).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vote_strategy() -> impl Strategy<Value = Vote> {
        prop_oneof![Just(Vote::Won), Just(Vote::Contended), Just(Vote::Failed)]
    }

    #[test]
    fn majority_of_small_clusters() {
        let got: Vec<usize> = (1..=7).map(|n| Quorum::Majority.required(n)).collect();
        assert_eq!(got, vec![1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn decides_early_on_majority_of_five() {
        let mut t = Tally::new(5, 3);
        t.record(Vote::Won);
        t.record(Vote::Won);
        assert_eq!(t.decision(), Decision::Pending);
        t.record(Vote::Won);
        assert_eq!(
            t.decision(),
            Decision::Won,
            "two answers still missing must not delay a win"
        );

        let mut t = Tally::new(5, 3);
        t.record(Vote::Contended);
        t.record(Vote::Failed);
        assert_eq!(t.decision(), Decision::Pending);
        t.record(Vote::Contended);
        assert_eq!(t.decision(), Decision::Impossible);
        assert!(
            t.lost_to_contention(),
            "4 live nodes could have made 3: busy, not down"
        );
        assert!(
            !t.contention_rules_out_quorum(),
            "3 nodes carry no foreign key"
        );

        // Three failures of five: an outage whatever the other nodes say.
        let mut t = Tally::new(5, 3);
        for v in [Vote::Failed, Vote::Failed, Vote::Contended, Vote::Failed] {
            t.record(v);
        }
        assert_eq!(t.decision(), Decision::Impossible);
        assert!(!t.lost_to_contention());
        // Three foreign keys of five: gone for a holder, whatever else fails.
        let mut t = Tally::new(5, 3);
        for v in [Vote::Contended, Vote::Contended, Vote::Contended] {
            t.record(v);
        }
        assert!(t.contention_rules_out_quorum() && t.lost_to_contention());
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let ttl = Duration::from_secs(10);
        assert_eq!(drift(ttl, 0.01), Duration::from_millis(102));
        assert_eq!(
            validity(ttl, Duration::from_millis(8), 0.01),
            Duration::from_millis(9890)
        );
        assert_eq!(validity(ttl, Duration::from_secs(11), 0.01), Duration::ZERO);
    }

    #[test]
    fn free_in_picks_the_kth_earliest_expiry() {
        let ms = |m| Some(Duration::from_millis(m));
        // 5 nodes, need 3, 4 contended: 1 free, so 2 of them must expire.
        let mut p = vec![ms(400), ms(100), None, ms(300)];
        assert_eq!(free_in(5, 3, &mut p), ms(300));
        // Only 2 contended of 5: contention does not explain the failure.
        assert_eq!(free_in(5, 3, &mut [ms(1), ms(2)]), Some(Duration::ZERO));
        // The key without expiry is the one we would wait for.
        assert_eq!(free_in(3, 3, &mut [ms(5), None]), None);
    }

    proptest! {
        /// Never "won" without the policy's count; "impossible" exactly when
        /// the remaining nodes cannot reach it; never both.
        #[test]
        fn tally_decides_exactly(
            nodes in 1usize..12,
            k_seed in 0usize..100,
            votes in proptest::collection::vec(vote_strategy(), 0..12),
        ) {
            let required = 1 + k_seed % nodes;
            let votes = &votes[..votes.len().min(nodes)];
            let mut t = Tally::new(nodes, required);
            let mut was_decided = None;
            for (i, v) in votes.iter().enumerate() {
                t.record(*v);
                let won = votes[..=i].iter().filter(|x| **x == Vote::Won).count();
                prop_assert_eq!(t.won(), won);
                prop_assert_eq!(t.missing(), nodes - (i + 1));
                match t.decision() {
                    Decision::Won => prop_assert!(won >= required),
                    Decision::Impossible => prop_assert!(won + t.missing() < required),
                    Decision::Pending => {
                        prop_assert!(won < required);
                        prop_assert!(won + t.missing() >= required);
                    }
                }
                // Once decided, a decision never flips.
                if let Some(d) = was_decided {
                    prop_assert_eq!(d, t.decision());
                }
                if t.decision() != Decision::Pending {
                    was_decided = Some(t.decision());
                }
            }
        }

        /// Majority quorums of the same node set always intersect.
        #[test]
        fn majorities_intersect(nodes in 1usize..50) {
            let q = Quorum::Majority.required(nodes);
            prop_assert!(2 * q > nodes);
            prop_assert!(q <= nodes);
        }

        /// Validity never exceeds ttl − drift and shrinks as elapsed grows.
        #[test]
        fn validity_is_bounded_and_monotone(
            ttl_ms in 1u64..1_000_000,
            a in 0u64..2_000_000,
            b in 0u64..2_000_000,
            factor in 0.0f64..0.5,
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let (lo, hi) = (a.min(b), a.max(b));
            let v_lo = validity(ttl, Duration::from_micros(lo), factor);
            let v_hi = validity(ttl, Duration::from_micros(hi), factor);
            prop_assert!(v_lo >= v_hi);
            prop_assert!(v_lo <= ttl.saturating_sub(drift(ttl, factor)));
            prop_assert!(v_lo + Duration::from_micros(lo) + drift(ttl, factor) <= ttl || v_lo.is_zero());
            // The deadline and the validity tell the same story: a lease
            // taken at `start` leaves `lease − elapsed` once `elapsed` passed.
            prop_assert_eq!(v_lo, lease(ttl, factor).saturating_sub(Duration::from_micros(lo)));
        }
    }
}
