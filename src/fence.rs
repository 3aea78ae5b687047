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
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let testbed = quorumlock_testbed::Testbed::start(3)?;
//! # let resource_server = quorumlock_testbed::Testbed::start(1)?;
//! use quorumlock::{LockConfig, MultiLock};
//! use quorumlock::fenced::{FencedResource, Write};
//!
//! let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).build()?);
//! // A resource on its own server, not on the lock nodes.
//! let account = FencedResource::open(&resource_server.urls()[0], "account:42").await?;
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
//! no TTL). Asked for its token, a holder:
//!
//! 1. **Reads** the counters. The acquire script already returned them from
//!    every node it won, so this costs nothing unless those reads are too few
//!    (see the read rule); then it reads more nodes with `MGET` (one extra
//!    round trip, e.g. for a name's very first token).
//! 2. **Picks** `p` = one more than every counter it read.
//! 3. **Raises** the counter to `p` on every node, in one script that does so
//!    only while the lock key there still carries its owner token, and
//!    never lowers a counter. It hands `p` out once a **majority of all
//!    nodes** confirmed and the lock is still held (before its deadline).
//!
//! **Read rule.** The reads must include, for every name, a *present*
//! counter from a majority of the nodes plus one (on 5 nodes or more: 4 of
//! 5, 5 of 7; on 3 or 4 nodes a majority), or an answer from every node. A
//! node without the counter does not count: it may have lost its data. The
//! extra node covers a counter that went *back* rather than away: a node
//! that failed over to a replica which had not yet received the last
//! raises. The project's chaos suite found that case (a master failing
//! over to a lagging replica): with a bare majority, a holder whose raise majority
//! included the failed-over node and a later holder that read the other
//! two nodes plus that one got the same token.
//!
//! The uncontended cost is one round trip (step 3), paid on the first call
//! only: the token is cached, and holds re-entered through
//! [`HeldLock::reenter`] share it.
//!
//! # Why it is safe
//!
//! Let A be handed `p_A`, and let B hold the lock after A (B's hold starts
//! after A's ended; mutual exclusion orders holders). Then `p_B > p_A`:
//!
//! * Counters only rise, and only by a holder while it holds the key on
//!   that node (step 3). A's raise reached a majority `M_A` before A's
//!   deadline, so before B held anything.
//! * B reads a counter from a node only after winning the key there
//!   (acquire) or after its own hold began (extra read), so after A's raise
//!   on that node, if the node is in `M_A`.
//! * A present counter below `p_A` can only be on a node outside `M_A`, or
//!   on the one node of `M_A` whose counter went back (a failover):
//!   a node of `M_A` that lost its data has no counter, and only a holder
//!   writes one again, with a token larger than `p_A` (by this argument for
//!   that holder). At most `N − |M_A|` nodes are outside `M_A`, fewer than a
//!   majority, so `majority + 1` present counters include two nodes of
//!   `M_A`, at least one of which did not go back: its counter is `≥ p_A`.
//!   (On 3 or 4 nodes the rule needs a majority, which tolerates no
//!   rollback.)
//! * If B instead heard every node, at least one node of `M_A` kept its data
//!   (at most a minority loses or rolls back data), and B read its counter
//!   `≥ p_A`.
//! * Either way B's `p_B` is above `p_A`. Tokens of one holder's re-entries
//!   are the same token.
//!
//! # Limits
//!
//! * It needs mutual exclusion: the Redlock assumptions (clocks within the
//!   drift allowance, a node that loses its data stays out for a TTL) hold.
//! * More than a minority of nodes losing their data at once, more than one
//!   node whose counter goes back (on 3 or 4 nodes: any), or an operator
//!   deleting or lowering counters, can make a token repeat or go down. A
//!   failover to a lagging replica or a node restored from an old backup
//!   makes a counter go back: restore a node empty instead.
//! * The token does not say the lock is still held: check
//!   [`HeldLock::is_held`], and let the resource reject stale writes.
//! * The first token of a name needs every node to answer (no node has a
//!   counter yet), or a majority plus one that already have counters.
//! * Counters are Lua numbers on the nodes: exact up to 2^53.
//! * Counters are never deleted; each name that ever had a token keeps one
//!   small key per node.

use std::sync::Arc;

use tokio::time::Instant;

use crate::clock::Stamp;
use crate::error::{Error, LostReason, NodeError, NodeOutcome};
use crate::fanout::{End, QuorumRound, fan_out};
use crate::guard::HeldLock;
use crate::lease::Lease;
use crate::node::OwnerCheck;
use crate::quorum::Decision;
use crate::stats::bump;

/// What was read from one node: each name's counter (`None`: absent), or
/// `None` when the node was not read.
type Read = Option<Box<[Option<u64>]>>;

impl HeldLock {
    /// This holder's fencing token: larger than the token of every earlier
    /// holder of the lock's name(s), under the conditions set out in
    /// [`crate::fence`]. Give it to the protected resource with every
    /// write, e.g. [`FencedResource`](crate::fenced::FencedResource).
    ///
    /// The first call costs one round trip to the nodes (two for a name's
    /// very first token); later calls, and holds re-entered through this
    /// one, return the same token. For a lock on several names, the token is
    /// larger than every earlier token of each of its names.
    ///
    /// The first call fails with [`Error::Lost`] when the lock is no longer
    /// held, and with [`Error::FencingUnavailable`] when too few nodes
    /// confirmed in time (the lock may still be held; calling again
    /// retries). Once established, the token is returned even after the
    /// lock is lost: it names this holder, it does not say the lock is
    /// still held (that is what the resource's check is for).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the token unset; counters may have been
    /// raised, which only makes later tokens larger.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let testbed = quorumlock_testbed::Testbed::start(3)?;
    /// use quorumlock::{LockConfig, MultiLock};
    ///
    /// let lock = MultiLock::new(LockConfig::builder().nodes(testbed.urls()).build()?);
    /// let guard = lock.try_acquire("batch").await?;
    /// let token = guard.fencing_token().await?;
    /// assert_eq!(guard.fencing_token().await?, token, "one holder, one token");
    /// guard.release().await;
    /// let next = lock.try_acquire("batch").await?;
    /// assert!(next.fencing_token().await? > token);
    /// # next.release().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fencing_token(&self) -> Result<u64, Error> {
        let lease = &self.lease;
        lease
            .fence
            .get_or_try_init(|| establish(lease))
            .await
            .copied()
    }
}

/// A majority of `n` nodes.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// How many nodes whose counter went *back* (a failover to a replica that
/// lagged) the read rule tolerates: one when the nodes outside a majority
/// leave room for it (5 nodes or more), else none.
fn rollbacks_tolerated(n: usize) -> usize {
    usize::from(n - majority(n) >= 2)
}

/// How many present counters the read rule needs: a majority, plus one per
/// tolerated rollback, so that every later reader meets at least one node
/// of the holder's raise majority that neither lost nor rolled back its
/// counter.
pub(crate) fn present_needed(n: usize) -> usize {
    majority(n) + rollbacks_tolerated(n)
}

/// The read rule: for every name a present counter on
/// [`present_needed`] nodes, or an answer from every node.
pub(crate) fn reads_suffice(reads: &[Read], names: usize) -> bool {
    let n = reads.len();
    if reads.iter().all(Option::is_some) {
        return true;
    }
    (0..names).all(|k| {
        let present = reads
            .iter()
            .flatten()
            .filter(|r| r.get(k).copied().flatten().is_some())
            .count();
        present >= present_needed(n)
    })
}

/// One more than every counter read (absent counts as 0).
pub(crate) fn next_token(reads: &[Read]) -> u64 {
    let highest = reads
        .iter()
        .flatten()
        .flat_map(|r| r.iter().flatten())
        .copied()
        .max()
        .unwrap_or(0);
    highest.saturating_add(1)
}

/// Reads (if needed), picks and raises the token; see the module docs.
async fn establish(lease: &Arc<Lease>) -> Result<u64, Error> {
    lease.ensure_held()?;
    let reads = read_counters(lease).await?;
    raise(lease, next_token(&reads)).await
}

/// The counters the read rule needs: those the acquire read, and, when
/// they are too few, one more read of every node.
async fn read_counters(lease: &Lease) -> Result<Vec<Read>, Error> {
    let core = &lease.core;
    let n = core.nodes.len();
    let names = lease.entry.keys.len();
    let mut reads: Vec<Read> = if lease.fence_reads.len() == n {
        lease.fence_reads.to_vec()
    } else {
        vec![None; n]
    };
    if reads_suffice(&reads, names) {
        return Ok(reads);
    }
    let mut errors: Vec<Option<NodeError>> = vec![None; n];
    let keys = &lease.entry.keys;
    let (end, _unfinished) = fan_out(
        n,
        Instant::now() + core.config.node_timeout,
        |i| core.nodes[i].read_fences(Arc::clone(keys)),
        |i, reply| {
            match reply {
                Ok(read) => {
                    reads[i].get_or_insert(read);
                }
                Err(e) => errors[i] = Some(e),
            }
            reads_suffice(&reads, names)
        },
    )
    .await;
    if reads_suffice(&reads, names) {
        return Ok(reads);
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
        required: present_needed(n),
        confirmed: 0,
        nodes: core.outcome_reports(outcomes, end == End::DeadlinePassed),
    })
}

/// Raises the counters to `token` where the lease still holds the keys,
/// and hands the token out once a majority of all nodes confirmed while
/// the lease is held.
async fn raise(lease: &Lease, token: u64) -> Result<u64, Error> {
    let core = &lease.core;
    let n = core.nodes.len();
    let mut round = QuorumRound::new(n, majority(n), Stamp::now());
    let (end, unfinished) = fan_out(
        n,
        Instant::now() + core.config.node_timeout,
        |i| core.nodes[i].raise_fence(lease.entry.clone(), token),
        |i, reply| round.record(i, reply, OwnerCheck::vote),
    )
    .await;
    round.finish(end);
    // The other nodes get the raise too: later readers then find more
    // nodes up to date.
    unfinished.finish_in_background(core.background_bound(), "fence");

    let tally = round.tally;
    if tally.decision() == Decision::Won && lease.is_held() {
        bump(&core.counters.fencing_tokens);
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

    fn read(values: &[Option<u64>]) -> Read {
        Some(values.to_vec().into_boxed_slice())
    }

    #[test]
    fn the_read_rule_counts_present_counters_or_every_node() {
        // 5 nodes, one name: four present counters suffice, three do not
        // (one of them may have gone back in a failover).
        let four = [
            read(&[Some(4)]),
            read(&[Some(9)]),
            read(&[Some(1)]),
            read(&[Some(2)]),
            None,
        ];
        assert!(reads_suffice(&four, 1));
        assert_eq!(next_token(&four), 10);
        assert!(!reads_suffice(
            &four[..3]
                .iter()
                .cloned()
                .chain([None, None])
                .collect::<Vec<_>>(),
            1
        ));
        // 3 nodes: a majority.
        assert!(reads_suffice(
            &[read(&[Some(4)]), read(&[Some(9)]), None],
            1
        ));
        // A node without a counter (lost its data, or never raised) does
        // not count towards the majority.
        let absent = [
            read(&[Some(4)]),
            read(&[None]),
            read(&[Some(1)]),
            read(&[Some(2)]),
            None,
        ];
        assert!(!reads_suffice(&absent, 1));
        // Every node answered: enough even without counters (a new name).
        let all = [read(&[None]), read(&[None]), read(&[None])];
        assert!(reads_suffice(&all, 1));
        assert_eq!(next_token(&all), 1);
        // Two names: each needs its majority.
        let two = [read(&[Some(1), None]), read(&[Some(1), Some(3)]), None];
        assert!(!reads_suffice(&two, 2));
        assert!(reads_suffice(
            &[read(&[Some(1), Some(2)]), read(&[Some(1), Some(3)]), None],
            2
        ));
    }

    #[test]
    fn the_counterexample_of_the_naive_scheme_does_not_regress() {
        // Counters {n1: 10, n2: 1, n3: 1}. A wins {n1, n2}.
        let mut counters = [10u64, 1, 1];
        let reads_a = [read(&[Some(counters[0])]), read(&[Some(counters[1])]), None];
        assert!(reads_suffice(&reads_a, 1));
        let a = next_token(&reads_a);
        // A's raise reaches its majority {n1, n2}.
        for c in &mut counters[..2] {
            *c = (*c).max(a);
        }
        // Later B wins {n2, n3}.
        let reads_b = [None, read(&[Some(counters[1])]), read(&[Some(counters[2])])];
        let b = next_token(&reads_b);
        assert!(b > a, "{b} > {a}");
    }

    /// One holder of the property tests: reads the nodes in `read_mask`
    /// (all of them when that is not enough, as the extra read round
    /// does), picks its token and raises the nodes in `raise_mask`, topped
    /// up to a majority.
    fn take_token<const N: usize>(
        counters: &mut [Option<u64>; N],
        read_mask: u8,
        raise_mask: u8,
    ) -> u64 {
        let mut reads: Vec<Read> = (0..N)
            .map(|i| {
                if read_mask >> i & 1 == 1 {
                    read(&[counters[i]])
                } else {
                    None
                }
            })
            .collect();
        if !reads_suffice(&reads, 1) {
            reads = (0..N).map(|i| read(&[counters[i]])).collect();
        }
        let token = next_token(&reads);
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
            counters[i] = Some(counters[i].unwrap_or(0).max(token));
        }
        token
    }

    #[test]
    fn a_counter_that_went_back_in_a_failover_does_not_repeat_a_token() {
        // The chaos suite's case: 5 nodes, A raises {n0, n1, n4} to 1240;
        // n2 and n3 stay at 1239; n4 fails over to a replica at 1229.
        let counters = [1240u64, 1240, 1239, 1239, 1229];
        let reads_b = [
            None,
            None,
            read(&[Some(counters[2])]),
            read(&[Some(counters[3])]),
            read(&[Some(counters[4])]),
        ];
        // A bare majority would give B 1240 again: the rule asks for more.
        assert!(!reads_suffice(&reads_b, 1));
        let all: Vec<Read> = counters.iter().map(|c| read(&[Some(*c)])).collect();
        assert!(next_token(&all) > 1240);
    }

    proptest! {
        /// Histories where, besides nodes losing their data, one node (a
        /// replicated one) may fail over to any earlier state of its
        /// counter: tokens still strictly increase on 5 nodes.
        #[test]
        fn tokens_increase_with_one_node_rolling_back(
            steps in prop::collection::vec(
                (0u8..32, 0u8..32, prop::option::of(0usize..4), prop::option::of(0usize..64)),
                1..60,
            )
        ) {
            const N: usize = 5;
            const REPLICATED: usize = 4;
            let mut counters: [Option<u64>; N] = [None; N];
            let mut history: Vec<Option<u64>> = vec![None];
            let mut last = 0u64;
            for (read_mask, raise_mask, lose, rollback) in steps {
                if let Some(node) = lose {
                    counters[node] = None;
                }
                if let Some(back) = rollback {
                    counters[REPLICATED] = history[back % history.len()];
                }
                let token = take_token(&mut counters, read_mask, raise_mask);
                history.push(counters[REPLICATED]);
                prop_assert!(token > last, "token {} after {}", token, last);
                last = token;
            }
        }
    }

    proptest! {
        /// Any history of holders, each reading a sound set and raising a
        /// majority, with a minority of nodes losing their data between
        /// holders: tokens strictly increase.
        #[test]
        fn tokens_increase_over_any_history(
            steps in prop::collection::vec((0u8..32, 0u8..32, prop::option::of(0usize..5)), 1..60)
        ) {
            const N: usize = 5;
            let mut counters: [Option<u64>; N] = [None; N];
            let mut last = 0u64;
            for (read_mask, raise_mask, lose) in steps {
                // A minority (here: one node) may lose its data.
                if let Some(node) = lose {
                    counters[node] = None;
                }
                let token = take_token(&mut counters, read_mask, raise_mask);
                prop_assert!(token > last, "token {} after {}", token, last);
                last = token;
            }
        }
    }
}
