//! Fencing tokens that strictly increase across successive holders of a
//! lock name, over N independent masters.
//!
//! A lease can run out while its holder is paused (GC, swap, a stopped VM):
//! when it resumes, it may write although someone else holds the lock now.
//! Only the protected resource can stop that write, by remembering the
//! largest token it accepted and refusing smaller ones. For that the token
//! must grow from one holder to the next, whichever nodes each holder won.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let testbed = quorumlock_testbed::Testbed::start(3)?;
//! # let nodes = testbed.urls();
//! # let resource_server = quorumlock_testbed::Testbed::start(1)?;
//! # let resource_url = resource_server.urls()[0].clone();
//! use quorumlock::{LockConfig, MultiLock};
//! use quorumlock::fenced::{FencedResource, Write};
//!
//! let lock = MultiLock::new(LockConfig::builder().nodes(nodes).build()?);
//! // A resource on its own server, not on the lock nodes.
//! let account = FencedResource::open(&resource_url, "account:42").await?;
//!
//! let first = lock.try_acquire("account:42").await?;
//! let t1 = first.fencing_token().await?;
//! assert_eq!(account.write(t1, "balance=10").await?, Write::Accepted);
//! first.release().await;
//!
//! let second = lock.try_acquire("account:42").await?;
//! let t2 = second.fencing_token().await?;
//! assert!(t2 > t1);
//! assert_eq!(account.write(t2, "balance=7").await?, Write::Accepted);
//! // The first holder, resuming late, is refused.
//! assert_eq!(account.write(t1, "balance=11").await?, Write::Rejected { last: t2 });
//! second.release().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Why not the maximum of per-node counters
//!
//! The obvious scheme (each node `INCR`s its counter on a win, the token is
//! the largest of the won nodes' values) lets a later holder get a smaller
//! token: with counters {n1: 10, n2: 1, n3: 1}, A wins {n1, n2} and gets
//! max(11, 2) = 11; then B wins {n2, n3} and gets max(3, 2) = 3. Counters
//! also rise on failed partial attempts, so a minority can run far ahead.
//! The crate's integration tests run exactly this schedule against both
//! schemes.
//!
//! # The scheme
//!
//! Each lock name has a counter on every node (`quorumlock:fence:<name>`,
//! no TTL), stored as `<value> <epoch id>`: the value and the node epoch it
//! was written in (see [`LockConfigBuilder::quarantine`](crate::LockConfigBuilder::quarantine)
//! for node epochs: a node starts a new epoch whenever its data may have
//! gone back or away: a restart, a promotion from a replica). A counter is
//! **current** when it was written in the node's present epoch, or when it
//! is absent from a node whose epoch is its whole history (an adopted,
//! brand-new node: the counter was never written). Asked for its token, a
//! holder:
//!
//! 1. **Reads** the counters. The acquire script already returned them from
//!    every node it won (once a holder of the lock service has asked for a
//!    token, or with
//!    [`prefetch_fencing`](crate::LockConfigBuilder::prefetch_fencing)), so
//!    this costs nothing unless those reads are too few (see the read rule);
//!    then it reads every node once more (one extra round trip, e.g. for a
//!    name's first token on nodes with a history, or a lock service's first
//!    token).
//! 2. **Picks** `p` = one more than every counter it read, current or not.
//! 3. **Raises** the counter to `max(counter, p)`, stamped with the node's
//!    epoch, on every node, in one script that does so only while the lock
//!    key there still carries its owner token or is absent. An absent key
//!    (a node the acquire decided without, or one that lost the key) is
//!    re-taken first with the holder's token, for the validity it has left,
//!    as a renewal heals it; a key another owner holds stops the raise
//!    there. It hands `p` out once a **majority of all nodes** confirmed and
//!    the lock is still held (before its deadline).
//!
//! **Read rule.** The reads must include, for every name, a *current*
//! counter from a majority of the nodes. A young (quarantined) node's
//! current counter counts too: fencing needs epochs, not the quarantine.
//!
//! **The time floor.** When even every node's answer does not meet the
//! read rule (a majority of the nodes lost the name's counters, e.g. in a
//! rolling restart of every node, or a new name on servers met with a
//! history), but a majority answered, `p` is also raised above the largest
//! of their clocks (`TIME`) in microseconds. The counters then hold `p`,
//! current, and later holders use the read rule again.
//!
//! The uncontended cost is one round trip (step 3), paid on the first call
//! only: the token is cached, and holds re-entered through
//! [`HeldLock::reenter`](crate::HeldLock::reenter) share it.
//!
//! # Why it is safe
//!
//! Let A be handed `p_A`, and let B hold the lock after A (B's hold starts
//! after A's ended; mutual exclusion orders holders). Then `p_B > p_A`:
//!
//! * Counters are written only by a raise (step 3), which takes the
//!   maximum: within one epoch of a node its counter never goes down. A
//!   restart, a failover or a lost marker starts a new epoch, so a counter
//!   that went back or away is never current.
//! * A's raise reached a majority `M_A` before A's deadline, so before B
//!   held anything. B reads a node only after winning the key there
//!   (acquire) or after its own hold began (extra read), so after A's raise
//!   on it, if it is in `M_A`.
//! * B's current counters come from a majority, which meets `M_A` in some
//!   node `x`. If `x` is in the epoch of A's raise, its counter is
//!   `≥ p_A`. If `x` started a new epoch since, its current counter was
//!   written in that epoch (or `x` is an adopted, empty node, which holds no
//!   history and so cannot be in `M_A` with an older epoch), by the raise
//!   of some holder C after `x`'s loss, so after A's raise: `p_C > p_A` by
//!   this argument for C, and the counter is `≥ p_C`.
//! * With the time floor, `p_B` is above the nodes' clocks, and every
//!   earlier token is either a counter value (far below any clock in µs) or
//!   an earlier floor, taken from clocks that have moved on since.
//! * Either way B's `p_B` is above `p_A`. Tokens of one holder's re-entries
//!   are the same token.
//!
//! The property test in this module checks the argument over random
//! histories in which any nodes lose their data (restarts, rolling restarts
//! of every node, failovers that send a counter back to any earlier value)
//! between holders.
//!
//! # Limits
//!
//! * It needs mutual exclusion: the Redlock assumptions (clocks within the
//!   drift allowance) and the quarantine (or operators delaying restarts by
//!   a TTL).
//! * The time floor needs the nodes' clocks not to go back (by more than
//!   the time between two holders): keep them on NTP, slewing.
//! * An operator deleting or lowering counters, or rewriting the epoch
//!   marker, can make a token repeat or go down.
//! * The token does not say the lock is still held: check
//!   [`HeldLock::is_held`](crate::HeldLock::is_held), and let the resource reject stale writes.
//! * Counters are validated: a value that is not a whole number below
//!   2^53 − 1 (exact in the scripts' Lua numbers, with room for the next
//!   token) is a [`NodeErrorKind::InvalidCounter`](crate::NodeErrorKind::InvalidCounter)
//!   naming the node, and is never raised or copied.
//! * Tokens from the time floor are large (microseconds since 1970, about
//!   1.8 × 10^15); a resource must store them as 64-bit integers.
//! * Counters are never deleted; each name that ever had a token keeps one
//!   small key per node.

use std::sync::Arc;

use tokio::time::Instant;

use crate::clock::Stamp;
use crate::core::ttl_millis;
use crate::error::{Error, LostReason, NodeError, NodeOutcome};
use crate::fanout::{End, QuorumRound, fan_out};
use crate::lease::Lease;
use crate::quorum::Decision;
use crate::scripts::fence::RaiseFence;
use crate::scripts::reply::{OwnerCheck, Reading};
use crate::stats::bump;
use crate::telemetry;

/// What was read from one node: each name's counter, or `None` when the
/// node was not read.
type Read = Option<Box<[Reading]>>;

/// A majority of `n` nodes.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The read rule: for every name, a current counter (see [`Reading`]) from
/// a majority of the nodes.
pub(crate) fn reads_suffice(reads: &[Read], names: usize) -> bool {
    let needed = majority(reads.len());
    (0..names).all(|k| {
        let current = reads
            .iter()
            .flatten()
            .filter(|r| r.get(k).is_some_and(|c| c.current))
            .count();
        current >= needed
    })
}

/// One more than every counter read, current or not (absent counts as 0).
pub(crate) fn next_token(reads: &[Read]) -> u64 {
    let highest = reads
        .iter()
        .flatten()
        .flat_map(|r| r.iter().filter_map(|c| c.value))
        .max()
        .unwrap_or(0);
    highest.saturating_add(1)
}

/// The token when the read rule cannot be met but a majority of the nodes
/// answered (every node of a majority lost the name's counters, or a new
/// name on nodes with a history): above every counter read and above the
/// nodes' clocks in µs (see "The time floor" in the module docs). `None`
/// when too few nodes answered.
pub(crate) fn floor_token(reads: &[Read], times_us: &[Option<u64>]) -> Option<u64> {
    let answered = reads.iter().filter(|r| r.is_some()).count();
    if answered < majority(reads.len()) {
        return None;
    }
    let clock = times_us.iter().flatten().copied().max()?;
    Some(next_token(reads).max(clock.saturating_add(1)))
}

/// Reads (if needed), picks and raises the token; see the module docs.
pub(crate) async fn establish(lease: &Arc<Lease>) -> Result<u64, Error> {
    lease.ensure_held()?;
    lease.core.token_asked();
    let token = pick_token(lease).await?;
    raise(lease, token).await
}

/// The token: from the counters the acquire read when they meet the read
/// rule; otherwise after one more read of every node, from the counters or,
/// if they still fall short, from the time floor.
async fn pick_token(lease: &Lease) -> Result<u64, Error> {
    let core = &lease.core;
    let n = core.nodes.len();
    let names = lease.entry.keys.len();
    let mut reads: Vec<Read> = if lease.fence_reads.len() == n {
        lease.fence_reads.to_vec()
    } else {
        vec![None; n]
    };
    if reads_suffice(&reads, names) {
        return Ok(next_token(&reads));
    }
    let mut errors: Vec<Option<NodeError>> = vec![None; n];
    let mut times_us: Vec<Option<u64>> = vec![None; n];
    let keys = &lease.entry.keys;
    let (end, _unfinished) = fan_out(
        n,
        Instant::now() + core.config.node_timeout,
        |i| core.nodes[i].read_fences(Arc::clone(keys)),
        |i, reply| {
            match reply {
                Ok(read) => {
                    times_us[i] = Some(read.time_us);
                    reads[i] = Some(read.readings);
                }
                Err(e) => errors[i] = Some(e),
            }
            reads_suffice(&reads, names)
        },
    )
    .await;
    if reads_suffice(&reads, names) {
        return Ok(next_token(&reads));
    }
    if let Some(token) = floor_token(&reads, &times_us) {
        tracing::debug!(key = %lease.name, token, "fencing token from the time floor");
        return Ok(token);
    }
    let outcomes = reads
        .iter()
        .zip(errors)
        .map(|(read, error)| match (read, error) {
            (Some(_), _) => Some(Ok(NodeOutcome::CountersRead)),
            (None, Some(e)) => Some(Err(e)),
            (None, None) => None,
        });
    Err(Error::FencingUnavailable {
        key: lease.name.to_string(),
        required: majority(n),
        confirmed: 0,
        nodes: core.outcome_reports(outcomes, end == End::DeadlinePassed),
    })
}

/// Raises the counters to `token` where the lease still holds the keys
/// (re-taking the ones that are absent, as a renewal heals), and hands the token out once a majority of all nodes confirmed while
/// the lease is held.
async fn raise(lease: &Lease, token: u64) -> Result<u64, Error> {
    let core = &lease.core;
    let n = core.nodes.len();
    let start = Stamp::now();
    // A key re-taken by the raise lives no longer than the validity.
    let heal_ms = ttl_millis(lease.deadline().saturating_since(start)).max(1);
    let mut round = QuorumRound::new(n, majority(n), start);
    let (end, unfinished) = fan_out(
        n,
        Instant::now() + core.config.node_timeout,
        |i| {
            core.nodes[i].raise_fence(RaiseFence {
                entry: lease.entry.clone(),
                token,
                heal_ms,
            })
        },
        |i, reply| round.record(i, reply, OwnerCheck::vote),
    )
    .await;
    round.finish(end);
    // Dropped, not finished in the background: a raise re-takes an absent
    // key, and one sent after the guard's release would leave a key there
    // until it expires. A raise already queued on a connection runs before
    // any release queued after it; one not yet queued is skipped. The
    // majority that confirmed the token is all a later reader needs.
    drop(unfinished);

    let tally = round.tally;
    if tally.decision() == Decision::Won && lease.is_held() {
        bump(&core.counters.fencing_tokens);
        telemetry::fencing_token();
        tracing::debug!(key = %lease.name, token, confirmed = tally.won(), "fencing token");
        return Ok(token);
    }
    let nodes = core.reports(&mut round.replies, end);
    if tally.contention_rules_out_quorum() {
        lease.end(LostReason::KeysGone(nodes));
        return Err(lease.ended_error());
    }
    lease.ensure_held()?;
    Err(Error::FencingUnavailable {
        key: lease.name.to_string(),
        required: majority(n),
        confirmed: tally.won(),
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(counters: &[(Option<u64>, bool)]) -> Read {
        Some(
            counters
                .iter()
                .map(|&(value, current)| Reading { value, current })
                .collect(),
        )
    }

    #[test]
    fn the_read_rule_counts_current_counters_from_a_majority() {
        // 5 nodes, one name: three current counters suffice.
        let three = [
            read(&[(Some(4), true)]),
            read(&[(Some(9), true)]),
            read(&[(Some(1), true)]),
            None,
            None,
        ];
        assert!(reads_suffice(&three, 1));
        assert_eq!(next_token(&three), 10);
        // Stale counters (an older epoch: gone back in a failover, or kept
        // over a restart) do not count, though their values are used.
        let stale = [
            read(&[(Some(4), true)]),
            read(&[(Some(12), false)]),
            read(&[(Some(1), true)]),
            read(&[(None, false)]),
            None,
        ];
        assert!(!reads_suffice(&stale, 1));
        assert_eq!(next_token(&stale), 13);
        // Two names: each needs its majority.
        let two = [
            read(&[(Some(1), true), (None, false)]),
            read(&[(Some(1), true), (Some(3), true)]),
            None,
        ];
        assert!(!reads_suffice(&two, 2));
        assert!(reads_suffice(
            &[
                read(&[(Some(1), true), (Some(2), true)]),
                read(&[(Some(1), true), (Some(3), true)]),
                None
            ],
            2
        ));
    }

    #[test]
    fn the_time_floor_needs_a_majority_of_answers_and_tops_every_counter() {
        let reads = [read(&[(Some(7), false)]), read(&[(None, false)]), None];
        assert_eq!(
            floor_token(&reads, &[Some(5), Some(1_000), None]),
            Some(1_001)
        );
        assert_eq!(floor_token(&reads, &[Some(1), Some(2), None]), Some(8));
        assert_eq!(
            floor_token(
                &reads[..1]
                    .iter()
                    .cloned()
                    .chain([None, None])
                    .collect::<Vec<_>>(),
                &[Some(9), None, None]
            ),
            None
        );
    }

    #[test]
    fn the_counterexample_of_the_naive_scheme_does_not_regress() {
        // Counters {n1: 10, n2: 1, n3: 1}, all current. A wins {n1, n2}.
        let mut counters = [10u64, 1, 1];
        let reads_a = [
            read(&[(Some(counters[0]), true)]),
            read(&[(Some(counters[1]), true)]),
            None,
        ];
        assert!(reads_suffice(&reads_a, 1));
        let a = next_token(&reads_a);
        // A's raise reaches its majority {n1, n2}.
        for c in &mut counters[..2] {
            *c = (*c).max(a);
        }
        // Later B wins {n2, n3}.
        let reads_b = [
            None,
            read(&[(Some(counters[1]), true)]),
            read(&[(Some(counters[2]), true)]),
        ];
        let b = next_token(&reads_b);
        assert!(b > a, "{b} > {a}");
    }

    /// One node of the property test: its counter (value, epoch it was
    /// written in), its epoch, and whether the epoch is its whole history.
    #[derive(Clone, Copy, Debug)]
    struct Node {
        counter: Option<(u64, u32)>,
        epoch: u32,
        origin: bool,
    }

    impl Node {
        fn reading(&self) -> Reading {
            match self.counter {
                Some((value, epoch)) => Reading {
                    value: Some(value),
                    current: epoch == self.epoch,
                },
                None => Reading {
                    value: None,
                    current: self.origin,
                },
            }
        }
    }

    /// One holder: reads the nodes in `read_mask` (every node when that is
    /// not enough, as the extra read round does; the time floor when even
    /// that falls short), and raises the nodes in `raise_mask`, topped up
    /// to a majority. `clock`: the nodes' time in µs, which only rises.
    fn take_token<const N: usize>(
        nodes: &mut [Node; N],
        read_mask: u8,
        raise_mask: u8,
        clock: u64,
    ) -> u64 {
        let pick = |mask: u8| -> Vec<Read> {
            (0..N)
                .map(|i| (mask >> i & 1 == 1).then(|| Box::from([nodes[i].reading()])))
                .collect()
        };
        let mut reads = pick(read_mask);
        let token = if reads_suffice(&reads, 1) {
            next_token(&reads)
        } else {
            reads = pick(u8::MAX);
            if reads_suffice(&reads, 1) {
                next_token(&reads)
            } else {
                floor_token(&reads, &[Some(clock); N]).expect("every node answered")
            }
        };
        let mut raised: Vec<usize> = (0..N).filter(|i| raise_mask >> i & 1 == 1).collect();
        for i in 0..N {
            if raised.len() >= majority(N) {
                break;
            }
            if !raised.contains(&i) {
                raised.push(i);
            }
        }
        for &i in &raised {
            let node = &mut nodes[i];
            let kept = node.counter.map_or(0, |(value, _)| value);
            node.counter = Some((kept.max(token), node.epoch));
        }
        token
    }

    /// A data loss on node `i`: its counter gone (`back == None`) or back
    /// to an earlier value (a failover to a lagging replica; the replica's
    /// copy carries the epoch of the master that wrote it), and a new
    /// epoch that is not its whole history.
    fn lose(node: &mut Node, back: Option<Option<(u64, u32)>>, next_epoch: &mut u32) {
        node.counter = back.flatten();
        *next_epoch += 1;
        node.epoch = *next_epoch;
        node.origin = false;
    }

    proptest! {
        /// Any history of holders, each reading any set of nodes and
        /// raising a majority, with any nodes losing their data between
        /// holders (restarts, rolling restarts of every node, failovers
        /// that send a counter back to any earlier value): tokens strictly
        /// increase.
        #[test]
        fn tokens_increase_whatever_data_the_nodes_lose(
            steps in prop::collection::vec(
                (0u8..32, 0u8..32, prop::collection::vec((0usize..5, prop::option::of(0usize..64)), 0..3)),
                1..60,
            )
        ) {
            const N: usize = 5;
            let mut nodes = [Node { counter: None, epoch: 0, origin: true }; N];
            let mut history: Vec<Vec<Option<(u64, u32)>>> = vec![vec![None]; N];
            let mut next_epoch = 0;
            let mut last = 0u64;
            for (step, (read_mask, raise_mask, losses)) in steps.into_iter().enumerate() {
                for (i, back) in losses {
                    let back = back.map(|b| history[i][b % history[i].len()]);
                    lose(&mut nodes[i], back, &mut next_epoch);
                }
                // The clock in µs: far above any counter, rising per step.
                let clock = 1_000_000 * (step as u64 + 1);
                let token = take_token(&mut nodes, read_mask, raise_mask, clock);
                for (i, node) in nodes.iter().enumerate() {
                    history[i].push(node.counter);
                }
                prop_assert!(token > last, "token {} after {}", token, last);
                last = token;
            }
        }
    }
}
