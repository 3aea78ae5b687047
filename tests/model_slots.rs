//! An exhaustive model of the two primitives built from the quorum mutex
//! per "slot": the **counting semaphore** (a permit is one slot's mutex won)
//! and the **read-write lock** (a reader wins one slot, a writer every
//! slot). Pure state machines for 3 nodes and 3 clients, explored breadth
//! first (every reachable state, each once), checked for
//!
//! * **S1, at most K holders**: never more valid holders than the largest
//!   K any of them was granted under (with one K: at most K; when K
//!   changes, at most the largest K in force since the oldest live permit
//!   was granted);
//! * **S2, one holder per slot** (permits and readers);
//! * **S3** (K changes): more than K' holders, for a K' some acquirer
//!   passes, only while a permit on a slot ≥ K' runs;
//! * **W1, writer exclusion**: a valid writer overlaps no other valid
//!   holder, reader or writer (readers may overlap each other);
//! * **F1, writer preference** (a smaller property): once a writer is
//!   queued on a majority, no reader wins until that writer has held or
//!   given up;
//!
//! and two statements about changing K that the model refutes (they are
//! checked to fail, to pin down what the slot rule does promise):
//! **K1** "a grant under K' never leaves more than K' holders" and **K2**
//! "TTL after the last grant under the old K, at most K' hold".
//!
//! The designs must pass; deliberately broken variants must fail, and the
//! search prints the shortest counterexample of each (run with
//! `cargo test --test model_slots -- --nocapture`). No Redis, no library
//! code. Fencing tokens are left out: each slot is the mutex of
//! tests/model.rs, whose fencing that file covers.
//!
//! # What is modelled
//!
//! Time is discrete ticks; TTL = 2, quarantine Q = TTL. A node has one
//! lock key per slot, each with an entry (client, expiry) or none, the
//! clients queued on it (writer preference runs), and the age of its data
//! (capped at Q: old = votes). A client is idle, holds (until a tick, on a
//! slot or, a writer, on every slot, under some K), or waits in a writer
//! queue. The steps, each atomic at its tick, in any interleaving:
//!
//! * **tick**: keys expire (expiry ≤ now), validities end (until ≤ now);
//! * **permit** (semaphore) by an idle client passing a K of the run's
//!   K values: it tries one slot < K; its requests land on any set of
//!   nodes and take the slot's key where it is free; it wins when the old
//!   nodes among them are a majority (validity now + TTL, drift 0), else it
//!   rolls back;
//! * **reader**: the same on one of the R slots (any), except that a node
//!   with a writer's queue entry refuses it (queue runs);
//! * **writer**: its requests land on any set of nodes; one script per
//!   node takes every slot key there or none (all-or-nothing); it wins when
//!   a majority of old nodes gave it every slot. With the queue, a node
//!   that refuses it gets its queue entry, kept until it wins or gives up;
//!   a lost attempt rolls its keys back and waits;
//! * **renew** by a holder, on any set of nodes where its keys are its own
//!   or free (free: heal; a writer only where every slot is): re-sets them,
//!   and extends the validity to now + TTL when the old nodes among them
//!   are a majority;
//! * **release**; **give up** (a waiting writer leaves its queue places);
//! * **restart** of any node: every key and queue entry gone, young for Q
//!   ticks (accepts entries, casts no vote); any number of them, any nodes,
//!   so rolling restarts of every node are in.
//!
//! Variants: (a) per-node permit sets (each node keeps a set of holders and
//! admits a new one while it has fewer than K; a permit wins on a majority
//! of old nodes: the Redlock semaphore of other libraries); (b) Q = 0 and
//! Q = TTL − 1; (c) a writer that needs only a majority of the slots of a
//! node (R = 3: with R = 2 a majority is all of them); (d) a writer taking
//! the slots one by one in slot order, stopping at a taken one, with no
//! rollback (a lost attempt's entries stay until they expire); the queue
//! with the place used up on a node where a lost attempt took the slots
//! (what the mutex's acquire.lua does: it dequeues on taking, and the
//! rollback keeps no place), and with data losses.
//!
//! # What is abstracted away
//!
//! * As in tests/model.rs: no clock drift or skew; an acquire is one step
//!   whose requests reach any subset of the nodes (an interleaving of two
//!   acquires is the same as one after the other, each reaching the nodes
//!   it got); a request to a taken key, or one that a node refuses, is the
//!   same as one that never arrived; entries nobody uses (a lost attempt's
//!   whose rollback missed a node, a release's that missed one, entries
//!   past their holder's validity) only block others, so the model deletes
//!   them at once, which only adds behaviours; a renewed entry's expiry is
//!   capped at the holder's validity.
//! * A permit tries one slot per attempt. A client that tries several (one
//!   script per node taking any free slot < K) and keeps the one it won on
//!   a majority is covered: its entries on the other slots are entries
//!   nobody uses.
//! * One permit (or read or write hold) per client, each its own owner (as
//!   src/semaphore.rs and src/rwlock.rs do: no owner is passed, so every
//!   acquire has a fresh one): a process with two permits is two clients.
//!   Re-entry is not modelled: an owner re-entering a slot it holds would
//!   count a second permit on one slot (K + 1 permits on K slots).
//! * A writer's renewal writes a node only where every slot is its own or
//!   free (renew.lua: a key held by another owner writes nothing for the
//!   guard).
//! * Writers ignore each other's queue places (more behaviours: safety
//!   still holds; F1 is about readers). A waiting writer's places do not
//!   lapse (it refreshes them); giving up is the lapse.
//! * The queue only refuses: it grants nothing. So the safety runs without
//!   a queue cover a queue too; the queue run re-checks it.
//! * No fencing tokens (tests/model.rs), one name.
//!
//! # Bounds and reductions
//!
//! **None on time or data losses.** Every time in the state (expiries,
//! validities, ages, the time since the last grant under the old K) is
//! kept relative to now and capped, so the tick is not part of the state,
//! nor is the count of restarts: the state space is finite and explored
//! to the end, and the verdicts hold for traces of any length with any
//! number of restarts (for 3 nodes, 3 clients, TTL = 2). Only the F1 runs
//! bound the losses (0 or 1). `QUORUMLOCK_MODEL_SLOTS_BOUNDS=ticks,losses`
//! (`-`: unbounded) bounds the correct runs instead.
//!
//! Canonical states: nodes are sorted; clients are relabeled (all 6
//! permutations, every client may pass any K and take any role); slots too
//! where every acquirer may take any slot (one K; the read-write lock),
//! not when K changes (slot 1 is only for K = 2) nor in (d) (slot order);
//! in (a) key i is client i's membership, so keys follow the clients. The
//! smallest packing of all relabelings is the key. Checked with
//! `QUORUMLOCK_MODEL_SLOTS_SYMMETRY=off`: the same verdicts, the same
//! shortest counterexamples' lengths and the same depths (the check
//! caught slot order in (d)).
//!
//! Measured (debug build, `cargo test --test model_slots -- --test-threads
//! 1` on the shared 2-core machine at a load of about 2; the file takes
//! 5.8 s, 9 s when the machine is busier):
//!
//! | run | checks | states | transitions | depth | time | states, no symmetry |
//! |---|---|---|---|---|---|---|
//! | semaphore, K = 2 | S1, S2 | 1,657 | 24,010 | 13 | 0.10 s | 87,520 |
//! | semaphore, K = 1 or 2 | S1, S2, S3 | 5,862 | 85,998 | 13 | 0.22 s | 172,336 |
//! | K = 1 or 2, no renewals | S1, S2, K2 | 1,724 | 13,078 | 10 | 0.03 s | 37,461 |
//! | rwlock, R = 2 | W1, S2 | 1,855 | 25,932 | 13 | 0.11 s | 90,160 |
//! | rwlock, writer queue | W1, S2 | 38,086 | 750,068 | 16 | 3.0 s | 1,964,428 |
//! | rwlock, writer queue, no data loss | W1, S2, F1 | 335 | 5,253 | 7 | 0.02 s | 12,313 |
//! | (d) writer slot by slot | W1, S2 | 64,696 | 965,050 | 13 | 2.2 s | 2,101,873 |
//!
//! The broken variants stop at their first violation: 10 to 1,535 states,
//! under 0.05 s each. Without the symmetry reduction the file takes about
//! 130 s (the queue run 82 s).
//!
//! # Why the slot designs are safe (the argument the model checks)
//!
//! * **One holder per slot.** Each slot is exactly the mutex of
//!   tests/model.rs. A validity is backed by the old majority M of the
//!   grant or of the last extension, and lasts at most TTL from then. Each
//!   node of M keeps the entry until then, unless it loses its data; then
//!   it is young for Q ≥ TTL ticks, past the end of that validity. So while
//!   the holder is valid every node of M either holds its entry (refuses
//!   the slot to others) or casts no vote; a second holder of the slot needs
//!   an old majority, which meets M. A young node cannot let a (K+1)-th
//!   holder in for the same reason, slot by slot: it votes for no slot
//!   until every validity it backed before its loss has ended or has been
//!   re-backed by an extension on old nodes.
//! * **At most K.** A permit granted under K holds one slot < K; holders
//!   are on distinct slots; so there are at most as many holders as the
//!   largest K any live holder passed (S1), at most K' on the slots < K'
//!   (S3), and at most K once every permit granted under a larger K has
//!   ended.
//! * **Why per-node permit sets are not.** A mutex's majorities exclude
//!   each other because any two meet, and the node where they meet admits
//!   one. A node admitting K does not bound the holders by K: K + 1
//!   permits are refused only if some node is in all K + 1 majorities, and
//!   three majorities of three nodes ({n0,n1}, {n1,n2}, {n0,n2}) have no
//!   common node. Counting: N nodes admit N·K memberships, a permit uses a
//!   majority M of them, so ⌊N·K / M⌋ permits fit: 3 for N = 3, K = 2 (and
//!   for N = 5, K = 2, M = 3). Slots bring back "admits one" per key, and
//!   the bound K comes from the number of keys, not from the nodes.
//! * **Writer exclusion.** A writer counts a node only where it holds
//!   every slot key there, so a valid writer is at once a holder of every
//!   slot's mutex: a reader of slot s, or another writer, would be a second
//!   holder of slot s. A writer that counts a node where it holds only a
//!   majority of the slots (c) is not a holder of the slot it misses.
//!   All-or-nothing per node is not needed for safety, only for liveness:
//!   with (d) the writer is still safe, but lost attempts leave partial
//!   holds that block everyone (readers and writers) until they expire.
//!
//! # Findings
//!
//! * **The slot semaphore passes** (S1, S2) for every trace, with any
//!   number of restarts: rolling restarts of every node, losses of a node
//!   of a holder's bare majority and wins during a quarantine are all in
//!   the explored space ([`semaphore_slots_hold_at_most_k_permits`]).
//! * **Per-node permit sets (a) fail with no failure at all**, 3 steps:
//!   c0 on {n1,n2}, c1 on {n0,n2}, c2 on {n0,n1}; every node has 2 < 3
//!   members, 3 permits for K = 2. This is why the library builds the
//!   semaphore from slots.
//! * **The quarantine is needed slot by slot** (b): with Q = 0 a restarted
//!   node re-votes a slot: two holders of one slot in 3 steps, a third
//!   holder (K + 1) in 4 (c0 slot 0 on all, c1 slot 1 on {n1,n2}, n1
//!   restarts, c2 slot 1 on {n0,n1}); with Q = TTL − 1 in 4 and 5 steps.
//! * **Changing K** (acquirers passing K = 1 or 2, in any order): S1 and S3
//!   hold: never more holders than the largest K any live holder was
//!   granted under, so at most max(K_old, K'), and more than K' only while
//!   a permit on a slot ≥ K' runs. What the rule does **not** give: (K1) a
//!   new permit under K' may be granted while it makes more than K'
//!   holders, 2 steps (c0 takes slot 1 under K = 2, c1 slot 0 under
//!   K = 1: two hold); (K2) "at most K' once every old permit has ended"
//!   is true, but an old permit that renews never ends: 5 steps (c0 slot 1
//!   under K = 2, renews at t = 1, c1 slot 0 under K = 1 at t = 2, a TTL
//!   after the last K = 2 grant: two hold). Without renewals the excess
//!   ends within a TTL of the last grant under the old K (the run passes).
//!   Lowering K takes effect when the holders of slots ≥ K' release or
//!   stop renewing; bounding that would need renewals to know the current
//!   K, which the design does not have (src/semaphore.rs says as much: a
//!   watched permit runs until its holder releases it).
//! * **The read-write lock passes** (W1, S2) for every trace with
//!   restarts, readers overlapping and writers winning after data losses.
//!   A writer that needs only a majority of a node's slots (c) overlaps a
//!   reader in 2 steps (c0 reads slot 0 on all nodes, c1 takes slots 1, 2
//!   on all nodes and wins). The writer's all-or-nothing per node is for
//!   liveness, not safety: slot by slot without rollback (d) is safe, but
//!   lost attempts leave partial holds (18,023 explored states have one on
//!   every node) that refuse everybody until they expire.
//! * **Writer preference is best effort.** The queue never breaks safety
//!   (the queue run passes with restarts). F1 holds with no data loss when
//!   a writer keeps its place on a node where a lost attempt took the
//!   slots. It fails (5 steps) if taking the slots uses the place up, as
//!   the mutex's acquire.lua does (it dequeues on taking, and the rollback
//!   keeps no place): c0 reads slot 0 on all nodes, writer c1 is refused
//!   and queues on {n1,n2} (its request to n0 is lost), c0 releases, c1's
//!   next attempt reaches only n2, takes it and loses, c0 reads again on
//!   {n0,n2}. It fails (6 steps) when a queued node restarts: its queue is
//!   gone and after its quarantine it votes for a reader, until the
//!   writer's next attempt queues again. Both need a writer queued on a
//!   bare majority; src/rwlock.rs's "once a writer waits, readers that
//!   come after it are refused" holds in this best-effort sense.

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

const NODES: usize = 3;
const CLIENTS: usize = 3;
/// Lock keys per node: the slots (at most 3), or in the permit-set design
/// one set member per client.
const KEYS: usize = 3;
const MAJORITY: usize = 2;
const ALL_NODES: u8 = (1 << NODES) - 1;
/// Lease length in ticks.
const TTL: u8 = 2;

/// Invariants and properties a run checks (bit flags).
/// S1: no more holders than the largest K any live holder was granted
/// under (with one K: at most K holders).
const HOLDERS: u8 = 1;
/// S2: at most one holder per slot (readers and permits).
const SLOTS: u8 = 2;
/// W1: a writer overlaps no other holder (reader or writer).
const WRITER: u8 = 4;
/// K1 (expected to fail): a grant under K never leaves more than K holders.
const NEW_GRANT: u8 = 8;
/// K2 (expected to fail with renewals): TTL ticks after the last grant
/// under the largest K, at most the smallest K hold.
const AFTER_TTL: u8 = 16;
/// F1: once a writer is queued on a majority, no reader wins until that
/// writer has held or given up.
const OVERTAKE: u8 = 32;
/// S3: more than K' holders (K' one of the K values passed) only while a
/// permit on a slot ≥ K' runs.
const BEYOND: u8 = 64;

/// What is built from the quorum mutex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Design {
    /// Counting semaphore: slot i < K is an ordinary quorum mutex (its own
    /// key on every node); a permit is one slot won on a majority of old
    /// nodes. Each acquire passes one of `ks` (several: K changes).
    Slots { ks: &'static [u8] },
    /// Variant (a), the Redlock semaphore: each node keeps a set of
    /// holders and admits a new one while it has fewer than `k`; a permit
    /// wins on a majority of old nodes. Key i of a node is client i's
    /// membership.
    PermitSets { k: u8 },
    /// Read-write lock over `r` reader slots: a reader wins one slot (a
    /// quorum mutex), a writer wins the slots by `writer`.
    ReadWrite { r: u8, writer: WriterRule },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriterRule {
    /// One script per node takes every slot there or none; the writer wins
    /// when a majority of old nodes gave it every slot (the design).
    AllOrNothing,
    /// Variant (d): slot by slot in a fixed order, stopping at a taken one,
    /// no rollback (a lost attempt leaves its entries until they expire); a
    /// node counts where the writer got every slot.
    OneByOne,
    /// Variant (c): a node counts where the writer got a majority of the
    /// slots (it takes the free ones).
    MajorityOfSlots,
}

/// A design (correct or deliberately broken) and the exploration bounds.
#[derive(Clone, Copy, Debug)]
struct Variant {
    name: &'static str,
    design: Design,
    /// Ticks a node casts no vote after a data loss.
    quarantine: u8,
    /// Holders renew (re-set their keys, heal free ones, extend the
    /// validity on an old majority).
    renewals: bool,
    /// Writer preference: a refused writer leaves a queue entry on the
    /// node; a reader is refused a free slot on a node with a queue entry.
    queue: bool,
    /// A writer keeps its queue place on a node where it took the slots in
    /// an attempt it then lost (false: taking the slots used the place up,
    /// as the mutex's acquire.lua does).
    keep_place: bool,
    /// Invariants checked (bit flags).
    checks: u8,
    /// Bounds: the last tick, data losses per trace (None: unbounded, and
    /// the tick, or the count of losses, is not part of the state).
    max_tick: Option<u8>,
    max_losses: Option<u8>,
}

impl Variant {
    fn old(&self, node: &Node) -> bool {
        node.age >= self.quarantine
    }

    /// Keys in use per node.
    fn keys(&self) -> usize {
        match self.design {
            Design::Slots { .. } => usize::from(self.largest_k()),
            Design::PermitSets { .. } => CLIENTS,
            Design::ReadWrite { r, .. } => usize::from(r),
        }
    }

    fn largest_k(&self) -> u8 {
        match self.design {
            Design::Slots { ks } => ks.iter().copied().max().unwrap_or(0),
            Design::PermitSets { k } => k,
            Design::ReadWrite { r, .. } => r,
        }
    }

    fn smallest_k(&self) -> u8 {
        match self.design {
            Design::Slots { ks } => ks.iter().copied().min().unwrap_or(0),
            _ => self.largest_k(),
        }
    }

    fn checks(&self, flag: u8) -> bool {
        self.checks & flag != 0
    }
}

/// The semaphore as designed: K = 2, quarantine = TTL.
const SEMAPHORE: Variant = Variant {
    name: "semaphore, K = 2",
    design: Design::Slots { ks: &[2] },
    quarantine: TTL,
    renewals: true,
    queue: false,
    keep_place: true,
    checks: HOLDERS | SLOTS,
    max_tick: None,
    max_losses: None,
};

/// The read-write lock as designed: R = 2, writers all-or-nothing.
const RWLOCK: Variant = Variant {
    name: "rwlock, R = 2",
    design: Design::ReadWrite {
        r: 2,
        writer: WriterRule::AllOrNothing,
    },
    quarantine: TTL,
    renewals: true,
    queue: false,
    keep_place: true,
    checks: WRITER | SLOTS,
    max_tick: None,
    max_losses: None,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Lock {
    /// A client.
    owner: u8,
    /// Absolute tick; entries with `expires <= tick` are dropped at once.
    expires: u8,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Node {
    keys: [Option<Lock>; KEYS],
    /// Clients with a writer's queue entry here (bit mask).
    queued: u8,
    /// Ticks since the last data loss, capped at the quarantine (capped:
    /// old, votes).
    age: u8,
    /// Lost its data at least once.
    lost: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Client {
    Idle,
    /// Believes it holds until tick `until` (exclusive).
    Holding {
        until: u8,
        /// The slots it holds (bit mask): one for a permit or a reader,
        /// every slot for a writer; its own key in the permit-set design.
        slots: u8,
        /// The K it was granted under.
        k: u8,
        writer: bool,
    },
    /// A writer that lost an attempt and keeps queue entries (queue runs).
    Waiting {
        /// Was queued on a majority of the nodes at some point.
        majority: bool,
    },
}

/// A transition property broken (kept in the state, sticky).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bad {
    /// K1: a grant under `k` left `holders` holders.
    Overgrant { client: u8, k: u8, holders: u8 },
    /// F1: a reader won while `writer` was queued on a majority.
    Overtaken { reader: u8, writer: u8 },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct State {
    tick: u8,
    losses: u8,
    /// Ticks since the last grant under the largest K, capped at TTL (K2
    /// runs only; None: none yet).
    since_big: Option<u8>,
    bad: Option<Bad>,
    nodes: [Node; NODES],
    clients: [Client; CLIENTS],
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Permit {
        k: u8,
        slot: u8,
    },
    Member {
        k: u8,
    },
    Reader {
        slot: u8,
    },
    /// `every`: takes every slot of a node or none (else: the free ones).
    Writer {
        every: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Event {
    Tick,
    /// A winning attempt, or (queue runs, variant (d)) a losing one that
    /// left something behind.
    Acquire {
        client: u8,
        kind: Kind,
        /// Where it took its key(s) (variant (d): every slot).
        took: u8,
        /// Variant (d): where it took some slots but not all.
        partial: u8,
        /// Where it was refused and queued.
        queued: u8,
        won: bool,
    },
    Renew {
        client: u8,
        answered: u8,
        extended: bool,
    },
    Release {
        client: u8,
    },
    GiveUp {
        client: u8,
    },
    Restart {
        node: u8,
    },
}

/// The nodes (or slots) of a mask.
fn members(mask: u8) -> Members {
    Members(mask)
}

struct Members(u8);

impl Iterator for Members {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}

/// The nonempty subsets of a mask.
fn subsets(mask: u8) -> Subsets {
    Subsets {
        mask,
        next: Some(mask),
    }
}

struct Subsets {
    mask: u8,
    next: Option<u8>,
}

impl Iterator for Subsets {
    type Item = u8;
    fn next(&mut self) -> Option<u8> {
        let sub = self.next.filter(|&sub| sub != 0)?;
        self.next = Some(sub.wrapping_sub(1) & self.mask);
        Some(sub)
    }
}

/// Free, or already ours.
fn open(key: Option<Lock>, c: usize) -> bool {
    key.is_none_or(|l| usize::from(l.owner) == c)
}

fn bit(i: usize) -> u8 {
    1 << i
}

impl Node {
    /// The slots of `slots` that client `c` may take here (free or ours).
    fn open_slots(&self, c: usize, slots: u8) -> u8 {
        let mut open_mask = 0;
        for i in members(slots) {
            if open(self.keys[i], c) {
                open_mask |= bit(i);
            }
        }
        open_mask
    }

    /// Client `c` holds every key of `slots` here.
    fn holds(&self, c: usize, slots: u8) -> bool {
        members(slots).all(|i| self.keys[i].is_some_and(|l| usize::from(l.owner) == c))
    }

    fn entries(&self) -> usize {
        self.keys.iter().filter(|k| k.is_some()).count()
    }
}

impl State {
    fn running(v: &Variant) -> State {
        State {
            tick: 0,
            losses: 0,
            since_big: None,
            bad: None,
            nodes: [Node {
                keys: [None; KEYS],
                queued: 0,
                age: v.quarantine,
                lost: false,
            }; NODES],
            clients: [Client::Idle; CLIENTS],
        }
    }

    /// The nodes that satisfy `f`, as a mask.
    fn mask(&self, f: impl Fn(&Node) -> bool) -> u8 {
        let mut mask = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            if f(node) {
                mask |= bit(i);
            }
        }
        mask
    }

    fn old_votes(&self, v: &Variant, nodes: u8) -> usize {
        members(nodes).filter(|&i| v.old(&self.nodes[i])).count()
    }

    fn holders(&self) -> usize {
        self.clients
            .iter()
            .filter(|c| matches!(c, Client::Holding { .. }))
            .count()
    }

    /// Sets client `c`'s entries on `slots` of `nodes` until `expires`.
    fn set(&mut self, nodes: u8, slots: u8, c: usize, expires: u8) {
        for i in members(nodes) {
            for slot in members(slots) {
                self.nodes[i].keys[slot] = Some(Lock {
                    owner: c as u8,
                    expires,
                });
            }
        }
    }

    /// Deletes client `c`'s entries and queue places everywhere.
    fn forget(&mut self, c: usize) {
        for node in &mut self.nodes {
            for key in &mut node.keys {
                if key.is_some_and(|l| usize::from(l.owner) == c) {
                    *key = None;
                }
            }
            node.queued &= !bit(c);
        }
    }

    /// The client stops believing it holds (release, or its validity
    /// ended): its entries go (see "Lock entries nobody uses").
    fn drop_client(&mut self, c: usize) {
        self.clients[c] = Client::Idle;
        self.forget(c);
    }

    /// Client `c` won: it holds from now on for TTL.
    fn grant(&mut self, v: &Variant, c: usize, k: u8, slots: u8, writer: bool) {
        self.clients[c] = Client::Holding {
            until: self.tick + TTL,
            slots,
            k,
            writer,
        };
        self.forget_places(c);
        if v.checks(NEW_GRANT) && self.bad.is_none() {
            let holders = self.holders();
            if holders > usize::from(k) {
                self.bad = Some(Bad::Overgrant {
                    client: c as u8,
                    k,
                    holders: holders as u8,
                });
            }
        }
        if v.checks(AFTER_TTL) && k == v.largest_k() {
            self.since_big = Some(0);
        }
    }

    fn forget_places(&mut self, c: usize) {
        for node in &mut self.nodes {
            node.queued &= !bit(c);
        }
    }

    fn tick_passes(&self, v: &Variant) -> State {
        let mut t = *self;
        assert!(t.tick < 200, "ticks within u8 (entries are absolute)");
        t.tick += 1;
        for node in &mut t.nodes {
            for key in &mut node.keys {
                if key.is_some_and(|l| l.expires <= t.tick) {
                    *key = None;
                }
            }
            node.age = (node.age + 1).min(v.quarantine);
        }
        for c in 0..CLIENTS {
            if matches!(t.clients[c], Client::Holding { until, .. } if until <= t.tick) {
                t.drop_client(c);
            }
        }
        t.since_big = t.since_big.map(|a| (a + 1).min(TTL));
        t
    }
}

/// Every step the model allows from `s`, with its result.
fn successors(s: &State, v: &Variant) -> Vec<(Event, State)> {
    let mut out = Vec::with_capacity(64);
    if v.max_tick.is_none_or(|last| s.tick < last) {
        out.push((Event::Tick, s.tick_passes(v)));
    }
    for c in 0..CLIENTS {
        match s.clients[c] {
            Client::Idle => acquires(s, v, c, &mut out),
            Client::Waiting { .. } => {
                writer_acquires(s, v, c, &mut out);
                let mut t = *s;
                t.drop_client(c);
                out.push((Event::GiveUp { client: c as u8 }, t));
            }
            Client::Holding { .. } => {
                if v.renewals {
                    renewals(s, v, c, &mut out);
                }
                let mut t = *s;
                t.drop_client(c);
                out.push((Event::Release { client: c as u8 }, t));
            }
        }
    }
    if v.max_losses.is_none_or(|max| s.losses < max) {
        for n in 0..NODES {
            let mut t = *s;
            t.losses = t.losses.saturating_add(1);
            t.nodes[n] = Node {
                keys: [None; KEYS],
                queued: 0,
                age: 0,
                lost: true,
            };
            out.push((Event::Restart { node: n as u8 }, t));
        }
    }
    out.retain(|(_, t)| t != s);
    out
}

/// An idle client's winning attempts (a lost one is rolled back: no
/// change, see "Lock entries nobody uses"); its requests land on any set
/// of nodes, and a request to a taken key changes nothing (the same as one
/// that never arrived), so `took` ranges over the nodes where its key is
/// free.
fn acquires(s: &State, v: &Variant, c: usize, out: &mut Vec<(Event, State)>) {
    let win = |kind: Kind, slot: usize, took: u8, k: u8, out: &mut Vec<(Event, State)>| {
        let mut t = *s;
        t.set(took, bit(slot), c, s.tick + TTL);
        if t.old_votes(v, took) < MAJORITY {
            return;
        }
        t.grant(v, c, k, bit(slot), false);
        if let (Kind::Reader { .. }, true) = (kind, v.checks(OVERTAKE)) {
            let waiting = s
                .clients
                .iter()
                .position(|w| matches!(w, Client::Waiting { majority: true }));
            if let (Some(writer), None) = (waiting, t.bad) {
                t.bad = Some(Bad::Overtaken {
                    reader: c as u8,
                    writer: writer as u8,
                });
            }
        }
        let event = Event::Acquire {
            client: c as u8,
            kind,
            took,
            partial: 0,
            queued: 0,
            won: true,
        };
        out.push((event, t));
    };
    match v.design {
        Design::Slots { ks } => {
            for &k in ks {
                for slot in 0..usize::from(k) {
                    let free = s.mask(|n| open(n.keys[slot], c));
                    for took in subsets(free) {
                        let kind = Kind::Permit {
                            k,
                            slot: slot as u8,
                        };
                        win(kind, slot, took, k, out);
                    }
                }
            }
        }
        Design::PermitSets { k } => {
            // A node admits a new member while its set has room.
            let room = s.mask(|n| n.entries() < usize::from(k));
            for took in subsets(room) {
                win(Kind::Member { k }, c, took, k, out);
            }
        }
        Design::ReadWrite { r, .. } => {
            for slot in 0..usize::from(r) {
                // A queue entry refuses readers (they never queue).
                let free = s.mask(|n| open(n.keys[slot], c) && n.queued == 0);
                for took in subsets(free) {
                    let kind = Kind::Reader { slot: slot as u8 };
                    win(kind, slot, took, r, out);
                }
            }
            writer_acquires(s, v, c, out);
        }
    }
}

/// A writer's attempts (from idle, or waiting in a queue).
fn writer_acquires(s: &State, v: &Variant, c: usize, out: &mut Vec<(Event, State)>) {
    let Design::ReadWrite { r, writer: rule } = v.design else {
        return;
    };
    let every = (1u8 << r) - 1;
    if rule == WriterRule::OneByOne {
        return one_by_one(s, v, c, r, out);
    }
    let need = match rule {
        WriterRule::MajorityOfSlots => r / 2 + 1,
        _ => r,
    };
    // Whether the node's script takes slots for `c` (which: the open ones).
    let takes = |n: &Node| {
        let open_slots = n.open_slots(c, every);
        match rule {
            WriterRule::AllOrNothing => open_slots == every,
            _ => open_slots.count_ones() >= u32::from(need),
        }
    };
    // Without a queue a refused request changes nothing: only nodes that
    // take matter. With one, a refused request leaves a queue entry.
    let reach = if v.queue { ALL_NODES } else { s.mask(takes) };
    for answered in subsets(reach) {
        let mut t = *s;
        let (mut took, mut refused) = (0, 0);
        for i in members(answered) {
            if takes(&s.nodes[i]) {
                let open_slots = s.nodes[i].open_slots(c, every);
                t.set(bit(i), open_slots, c, s.tick + TTL);
                took |= bit(i);
            } else {
                refused |= bit(i);
            }
        }
        let won = t.old_votes(v, took) >= MAJORITY;
        if won {
            t.grant(v, c, r, every, true);
        } else {
            if !v.queue {
                continue; // rolled back: no change
            }
            t.forget(c);
            let mut places = s.mask(|n| n.queued & bit(c) != 0) | refused;
            if !v.keep_place {
                places &= !took; // taking the slots there used the place up
            }
            for i in 0..NODES {
                if places & bit(i) != 0 {
                    t.nodes[i].queued |= bit(c);
                }
            }
            let before = matches!(s.clients[c], Client::Waiting { majority: true });
            t.clients[c] = if places == 0 {
                Client::Idle
            } else {
                Client::Waiting {
                    majority: before || places.count_ones() as usize >= MAJORITY,
                }
            };
        }
        let event = Event::Acquire {
            client: c as u8,
            kind: Kind::Writer {
                every: rule == WriterRule::AllOrNothing,
            },
            took,
            partial: 0,
            queued: refused,
            won,
        };
        out.push((event, t));
    }
}

/// Variant (d): on each node the writer takes the slots one by one in
/// slot order, stopping at one held by another client (or when its
/// requests stop arriving): a prefix of the slots. No rollback: a lost
/// attempt's entries stay until they expire.
fn one_by_one(s: &State, v: &Variant, c: usize, r: u8, out: &mut Vec<(Event, State)>) {
    let every = (1u8 << r) - 1;
    // The longest prefix each node gives.
    let mut longest = [0u8; NODES];
    for (i, node) in s.nodes.iter().enumerate() {
        while longest[i] < r && open(node.keys[usize::from(longest[i])], c) {
            longest[i] += 1;
        }
    }
    let combos: usize = longest.iter().map(|&l| usize::from(l) + 1).product();
    for mut combo in 1..combos {
        let mut t = *s;
        let (mut took, mut partial) = (0, 0);
        for (i, &l) in longest.iter().enumerate() {
            let base = usize::from(l) + 1;
            let prefix = (combo % base) as u8;
            combo /= base;
            if prefix == 0 {
                continue;
            }
            t.set(bit(i), (1u8 << prefix) - 1, c, s.tick + TTL);
            if prefix == r {
                took |= bit(i);
            } else {
                partial |= bit(i);
            }
        }
        let won = t.old_votes(v, took) >= MAJORITY;
        if won {
            t.grant(v, c, r, every, true);
        }
        let event = Event::Acquire {
            client: c as u8,
            kind: Kind::Writer { every: true },
            took,
            partial,
            queued: 0,
            won,
        };
        out.push((event, t));
    }
}

/// A holder re-sets its keys (and takes free ones: heal) on `answered`;
/// the validity is extended to now + TTL when the old nodes among them are
/// a majority.
fn renewals(s: &State, v: &Variant, c: usize, out: &mut Vec<(Event, State)>) {
    let Client::Holding {
        until,
        slots,
        k,
        writer,
    } = s.clients[c]
    else {
        return;
    };
    // The nodes where the renewal writes (it sets the open slots of its
    // own there): where it keeps or may re-take what it won.
    let can = match v.design {
        Design::PermitSets { k } => s.mask(|n| n.keys[c].is_some() || n.entries() < usize::from(k)),
        Design::ReadWrite {
            writer: WriterRule::MajorityOfSlots,
            r,
        } if writer => s.mask(|n| n.open_slots(c, slots).count_ones() > u32::from(r / 2)),
        _ => s.mask(|n| n.open_slots(c, slots) == slots),
    };
    for answered in subsets(can) {
        let extended = s.old_votes(v, answered) >= MAJORITY;
        let until = if extended { s.tick + TTL } else { until };
        let mut t = *s;
        t.clients[c] = Client::Holding {
            until,
            slots,
            k,
            writer,
        };
        for i in members(answered) {
            let set = s.nodes[i].open_slots(c, slots);
            // Beyond the validity an entry is never used: cap it there.
            t.set(bit(i), set, c, until.min(s.tick + TTL));
        }
        let event = Event::Renew {
            client: c as u8,
            answered,
            extended,
        };
        out.push((event, t));
    }
}

/// The invariants (those the variant checks).
fn check(s: &State, v: &Variant) -> Option<String> {
    if let Some(bad) = s.bad {
        return Some(match bad {
            Bad::Overgrant { client, k, holders } => format!(
                "K1 new grant within K: c{client} was granted a permit under K = {k}, \
                 and {holders} hold now"
            ),
            Bad::Overtaken { reader, writer } => format!(
                "F1 writer preference: reader c{reader} won while writer c{writer}, \
                 queued on a majority, still waits"
            ),
        });
    }
    let mut holding = Vec::with_capacity(CLIENTS);
    for (c, client) in s.clients.iter().enumerate() {
        if let Client::Holding {
            slots, k, writer, ..
        } = *client
        {
            holding.push((c, slots, k, writer));
        }
    }
    if v.checks(SLOTS) {
        for (i, &(a, sa, _, wa)) in holding.iter().enumerate() {
            for &(b, sb, _, wb) in &holding[i + 1..] {
                if !wa && !wb && sa & sb != 0 {
                    return Some(format!(
                        "S2 one holder per slot: c{a} and c{b} both hold slot {}",
                        (sa & sb).trailing_zeros()
                    ));
                }
            }
        }
    }
    if v.checks(WRITER)
        && holding.len() >= 2
        && let Some(&(w, ..)) = holding.iter().find(|h| h.3)
    {
        let others: Vec<String> = holding
            .iter()
            .filter(|h| h.0 != w)
            .map(|h| format!("{} c{}", if h.3 { "writer" } else { "reader" }, h.0))
            .collect();
        return Some(format!(
            "W1 writer exclusion: writer c{w} holds with {}",
            others.join(" and ")
        ));
    }
    if v.checks(HOLDERS) {
        let largest = holding.iter().map(|h| h.2).max().unwrap_or(0);
        if holding.len() > usize::from(largest) {
            return Some(format!(
                "S1 at most K holders: {} hold, the largest K any of them was granted under \
                 is {largest}",
                holding.len()
            ));
        }
    }
    if v.checks(BEYOND) {
        for k in 1..v.largest_k() {
            let beyond = holding.iter().any(|h| h.1 >> k != 0);
            if holding.len() > usize::from(k) && !beyond {
                return Some(format!(
                    "S3 beyond K' only with permits on slots ≥ K': {} hold, all on slots < {k}",
                    holding.len()
                ));
            }
        }
    }
    if v.checks(AFTER_TTL)
        && s.since_big.is_some_and(|a| a >= TTL)
        && holding.len() > usize::from(v.smallest_k())
    {
        return Some(format!(
            "K2 old permits end within a TTL: {} hold at t={}, ≥ TTL after the last grant \
             under K = {}",
            holding.len(),
            s.tick,
            v.largest_k()
        ));
    }
    None
}

// ---------------------------------------------------------------------------
// Canonical states: symmetry and packing
// ---------------------------------------------------------------------------

/// The relabelings a variant's states are equal under: clients are
/// interchangeable (each may pass any K, take any role); nodes are
/// interchangeable (sorted); slots are interchangeable when every acquirer
/// may take any of them (one K; the read-write lock), not when K changes
/// (slot 1 is only for K = 2). In the permit-set design key i is client
/// i's: keys follow the clients.
struct Symmetry {
    perms: Vec<([u8; CLIENTS], [u8; KEYS])>,
    /// The bits of the packed state kept: without the tick when time is
    /// unbounded (every other time in the state is relative to it), without
    /// the count of losses when they are.
    keep: u128,
    sort_nodes: bool,
}

const PERMS3: [[u8; 3]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

impl Symmetry {
    fn of(v: &Variant) -> Symmetry {
        // `QUORUMLOCK_MODEL_SLOTS_SYMMETRY=off`: no reduction (to check it).
        let on = std::env::var("QUORUMLOCK_MODEL_SLOTS_SYMMETRY")
            .ok()
            .is_none_or(|x| x != "off");
        let clients = if on { &PERMS3[..] } else { &PERMS3[..1] };
        let slots: Vec<[u8; KEYS]> = match v.design {
            _ if !on => vec![[0, 1, 2]],
            Design::Slots { ks } if ks.len() > 1 => vec![[0, 1, 2]],
            // Slot by slot goes in slot order: slot 0 is not slot 1.
            Design::ReadWrite {
                writer: WriterRule::OneByOne,
                ..
            } => vec![[0, 1, 2]],
            Design::PermitSets { .. } => vec![],
            _ => PERMS3
                .iter()
                .copied()
                .filter(|p| (v.keys()..KEYS).all(|i| usize::from(p[i]) == i))
                .collect(),
        };
        let mut perms = Vec::new();
        for &cp in clients {
            if slots.is_empty() {
                perms.push((cp, cp));
            }
            for &sp in &slots {
                perms.push((cp, sp));
            }
        }
        let mut keep = u128::MAX;
        match v.max_tick {
            Some(last) => assert!(last < 8, "3 bits of tick"),
            None => keep &= !(0b111 << 75),
        }
        match v.max_losses {
            Some(max) => assert!(max < 4, "2 bits of losses"),
            None => keep &= !(0b11 << 78),
        }
        Symmetry {
            perms,
            sort_nodes: on,
            keep,
        }
    }

    fn key(&self, s: &State) -> u128 {
        self.perms
            .iter()
            .map(|(cp, sp)| pack(s, cp, sp, self.sort_nodes) & self.keep)
            .min()
            .expect("identity")
    }
}

fn remap(mask: u8, p: &[u8; 3]) -> u8 {
    let mut out = 0;
    for i in members(mask) {
        out |= bit(usize::from(p[i]));
    }
    out
}

/// A node in 15 bits, clients relabeled by `cp` and slots by `sp`.
fn pack_node(n: &Node, tick: u8, cp: &[u8; CLIENTS], sp: &[u8; KEYS]) -> u128 {
    let mut bits = 0u128;
    for (i, key) in n.keys.iter().enumerate() {
        if let Some(l) = key {
            debug_assert!(l.expires > tick && l.expires <= tick + TTL);
            let code =
                u128::from(cp[usize::from(l.owner)] + 1) | u128::from(l.expires - tick - 1) << 2;
            bits |= code << (3 * sp[i]);
        }
    }
    bits | u128::from(remap(n.queued, cp)) << 9 | u128::from(n.age) << 12 | u128::from(n.lost) << 14
}

/// A client in 10 bits.
fn pack_client(c: &Client, tick: u8, sp: &[u8; KEYS]) -> u128 {
    match *c {
        Client::Idle => 0,
        Client::Holding {
            until,
            slots,
            k,
            writer,
        } => {
            1 | u128::from(until - tick - 1) << 2
                | u128::from(remap(slots, sp)) << 3
                | u128::from(k) << 6
                | u128::from(writer) << 8
        }
        Client::Waiting { majority } => 2 | u128::from(majority) << 2,
    }
}

fn pack(s: &State, cp: &[u8; CLIENTS], sp: &[u8; KEYS], sort_nodes: bool) -> u128 {
    let mut nodes = [0; NODES];
    for (i, n) in s.nodes.iter().enumerate() {
        nodes[i] = pack_node(n, s.tick, cp, sp);
    }
    if sort_nodes {
        nodes.sort_unstable();
    }
    let mut clients = [0; CLIENTS];
    for (i, c) in s.clients.iter().enumerate() {
        clients[usize::from(cp[i])] = pack_client(c, s.tick, sp);
    }
    let global = u128::from(s.tick & 0b111)
        | u128::from(s.losses.min(3)) << 3
        | u128::from(s.since_big.map_or(0, |a| a + 1)) << 5
        | u128::from(s.bad.is_some()) << 7;
    nodes[0]
        | nodes[1] << 15
        | nodes[2] << 30
        | clients[0] << 45
        | clients[1] << 55
        | clients[2] << 65
        | global << 75
}

// ---------------------------------------------------------------------------
// The explorer: breadth first over canonical states
// ---------------------------------------------------------------------------

/// FxHash: std's SipHash is slow in debug builds.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        // Finished with murmur3's fmix64 (Fx leaves the low bits poorly
        // mixed).
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ h >> 33
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
}

#[derive(Clone, Copy, Debug)]
struct Stats {
    states: usize,
    transitions: usize,
    depth: usize,
    elapsed: Duration,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} states, {} transitions, depth {}, in {:.2?}",
            self.states, self.transitions, self.depth, self.elapsed
        )
    }
}

struct Counterexample<S, E> {
    violation: String,
    root: S,
    steps: Vec<(E, S)>,
}

enum Outcome<S, E> {
    Safe(Stats),
    Violated(Stats, Counterexample<S, E>),
}

/// Explores every state reachable from `root`, breadth first, deduplicated
/// on `key` (canonical states; the first state met of each class is kept
/// and expanded); calls `observe(from, event, to, new)` on every
/// transition. Stops at the first state that fails `check`: its trace is a
/// shortest one.
fn explore<S: Copy, E: Copy>(
    root: S,
    successors: impl Fn(&S) -> Vec<(E, S)>,
    key: impl Fn(&S) -> u128,
    check: impl Fn(&S) -> Option<String>,
    mut observe: impl FnMut(&S, &E, &S, bool),
) -> Outcome<S, E> {
    let start = Instant::now();
    let mut seen: HashSet<u128, BuildHasherDefault<Fx>> = HashSet::default();
    let mut states: Vec<S> = vec![root];
    // Parent and the step from it.
    let mut parent: Vec<(u32, Option<E>)> = vec![(u32::MAX, None)];
    let mut depth: Vec<u8> = vec![0];
    seen.insert(key(&root));
    let mut transitions = 0;
    let mut found = check(&root).map(|violation| (0, violation));
    let mut next = 0;
    'search: while found.is_none() && next < states.len() {
        let s = states[next];
        for (event, t) in successors(&s) {
            transitions += 1;
            let new = seen.insert(key(&t));
            if new {
                states.push(t);
                parent.push((next as u32, Some(event)));
                depth.push(depth[next] + 1);
            }
            observe(&s, &event, &t, new);
            if new && let Some(violation) = check(&t) {
                found = Some((states.len() - 1, violation));
                break 'search;
            }
        }
        next += 1;
    }
    let stats = Stats {
        states: states.len(),
        transitions,
        depth: depth.iter().copied().max().unwrap_or(0).into(),
        elapsed: start.elapsed(),
    };
    let Some((bad, violation)) = found else {
        return Outcome::Safe(stats);
    };
    let mut steps = Vec::new();
    let mut at = bad;
    while let (p, Some(event)) = parent[at] {
        steps.push((event, states[at]));
        at = p as usize;
    }
    steps.reverse();
    Outcome::Violated(
        stats,
        Counterexample {
            violation,
            root,
            steps,
        },
    )
}

// ---------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------

struct Nodes(u8);

impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = members(self.0).map(|i| format!("n{i}")).collect();
        write!(f, "{{{}}}", names.join(","))
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Event::Tick => write!(f, "time passes"),
            Event::Acquire {
                client,
                kind,
                took,
                partial,
                queued,
                won,
            } => {
                let outcome = if won { "WINS" } else { "loses" };
                match kind {
                    Kind::Permit { k, slot } => write!(
                        f,
                        "c{client} (K = {k}) takes slot {slot} on {}: {outcome}",
                        Nodes(took)
                    ),
                    Kind::Member { k } => write!(
                        f,
                        "c{client} (K = {k}) joins the permit sets of {}: {outcome}",
                        Nodes(took)
                    ),
                    Kind::Reader { slot } => write!(
                        f,
                        "reader c{client} takes slot {slot} on {}: {outcome}",
                        Nodes(took)
                    ),
                    Kind::Writer { every } => {
                        write!(f, "writer c{client}")?;
                        let mut parts = Vec::new();
                        if took != 0 {
                            let what = if every {
                                "every slot"
                            } else {
                                "the free slots"
                            };
                            parts.push(format!(" takes {what} on {}", Nodes(took)));
                        }
                        if partial != 0 {
                            parts.push(format!(" takes some slots on {}", Nodes(partial)));
                        }
                        if queued != 0 {
                            parts.push(format!(" is refused and queues on {}", Nodes(queued)));
                        }
                        write!(f, "{}: {outcome}", parts.join(","))
                    }
                }
            }
            Event::Renew {
                client,
                answered,
                extended,
            } => write!(
                f,
                "c{client} renews on {}: {}",
                Nodes(answered),
                if extended { "extended" } else { "not extended" }
            ),
            Event::Release { client } => write!(f, "c{client} releases"),
            Event::GiveUp { client } => write!(f, "writer c{client} gives up its queue places"),
            Event::Restart { node } => write!(f, "n{node} restarts empty"),
        }
    }
}

struct Show<'a>(&'a State, &'a Variant);

impl fmt::Display for Show<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Show(s, v) = *self;
        write!(f, "t={} |", s.tick)?;
        for (i, node) in s.nodes.iter().enumerate() {
            write!(f, " n{i}[")?;
            for slot in 0..v.keys() {
                let name = match v.design {
                    Design::PermitSets { .. } => format!("c{slot}"),
                    _ => format!("s{slot}"),
                };
                match node.keys[slot] {
                    Some(l) => write!(f, "{name}:c{}<{} ", l.owner, l.expires)?,
                    None => write!(f, "{name}:- ")?,
                }
            }
            if node.queued != 0 {
                let queued: Vec<String> = members(node.queued).map(|c| format!("c{c}")).collect();
                write!(f, "q:{} ", queued.join(","))?;
            }
            write!(f, "{}]", if v.old(node) { "old" } else { "young" })?;
        }
        write!(f, " |")?;
        for (c, client) in s.clients.iter().enumerate() {
            match *client {
                Client::Idle => write!(f, " c{c} idle")?,
                Client::Holding {
                    until,
                    slots,
                    k,
                    writer,
                } => match v.design {
                    Design::ReadWrite { .. } if writer => write!(f, " c{c} WRITES<{until}")?,
                    Design::ReadWrite { .. } => {
                        write!(f, " c{c} reads s{}<{until}", slots.trailing_zeros())?
                    }
                    Design::PermitSets { .. } => write!(f, " c{c} holds<{until}")?,
                    Design::Slots { .. } => {
                        write!(f, " c{c} holds s{}<{until} (K={k})", slots.trailing_zeros())?
                    }
                },
                Client::Waiting { majority } => write!(
                    f,
                    " c{c} waits{}",
                    if majority {
                        " (queued on a majority)"
                    } else {
                        ""
                    }
                )?,
            }
        }
        Ok(())
    }
}

fn print_trace(v: &Variant, cx: &Counterexample<State, Event>) {
    println!(
        "[{}] shortest counterexample ({} steps): {}",
        v.name,
        cx.steps.len(),
        cx.violation
    );
    println!("   0. start  {}", Show(&cx.root, v));
    for (i, (event, s)) in cx.steps.iter().enumerate() {
        println!("  {:>2}. {event}", i + 1);
        println!("            {}", Show(s, v));
    }
}

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

/// What the search met on its way: evidence that a pass is not vacuous.
#[derive(Debug, Default)]
struct Witnesses {
    /// States with as many holders as the largest K.
    full: usize,
    /// States where every node has lost its data (rolling restarts).
    every_node_lost: usize,
    /// Wins while a node that lost data is still quarantined.
    wins_during_a_quarantine: usize,
    /// Data losses of a node in a holder's bare majority of old nodes.
    bare_majority_losses: usize,
    /// Grants under K that leave more than K holders (K changes).
    overshoots: usize,
    /// States with two readers holding at once.
    overlapping_readers: usize,
    /// Writer wins, and those after some node lost its data.
    writer_wins: usize,
    writer_wins_after_a_loss: usize,
    /// States with a writer queued on a majority while a reader holds.
    queued_behind_a_reader: usize,
    /// States where every node holds an entry of a client that does not
    /// hold (variant (d): lost attempts block everyone until they expire).
    leftovers_on_every_node: usize,
}

impl Witnesses {
    fn observe(&mut self, v: &Variant, from: &State, event: &Event, to: &State, new: bool) {
        if new {
            let holders = to.holders();
            self.full += usize::from(holders == usize::from(v.largest_k()));
            self.every_node_lost += usize::from(to.nodes.iter().all(|n| n.lost));
            let readers = to
                .clients
                .iter()
                .filter(|c| matches!(c, Client::Holding { writer: false, .. }))
                .count();
            self.overlapping_readers +=
                usize::from(matches!(v.design, Design::ReadWrite { .. }) && readers >= 2);
            let queued = to
                .clients
                .iter()
                .any(|c| matches!(c, Client::Waiting { majority: true }));
            self.queued_behind_a_reader += usize::from(queued && readers >= 1);
            let stray = |n: &Node| {
                n.keys
                    .iter()
                    .flatten()
                    .any(|l| !matches!(to.clients[usize::from(l.owner)], Client::Holding { .. }))
            };
            self.leftovers_on_every_node += usize::from(to.nodes.iter().all(stray));
        }
        match *event {
            Event::Acquire {
                won: true, kind, ..
            } => {
                let quarantined = from.nodes.iter().any(|n| n.lost && !v.old(n));
                self.wins_during_a_quarantine += usize::from(quarantined);
                if let Kind::Permit { k, .. } = kind {
                    self.overshoots += usize::from(to.holders() > usize::from(k));
                }
                if let Kind::Writer { .. } = kind {
                    self.writer_wins += 1;
                    self.writer_wins_after_a_loss += usize::from(from.nodes.iter().any(|n| n.lost));
                }
            }
            Event::Restart { node } => {
                for (c, client) in from.clients.iter().enumerate() {
                    let Client::Holding { slots, .. } = *client else {
                        continue;
                    };
                    let at = from.mask(|n| n.holds(c, slots) && v.old(n));
                    let bare = at.count_ones() as usize == MAJORITY && at & bit(node.into()) != 0;
                    self.bare_majority_losses += usize::from(bare);
                }
            }
            _ => {}
        }
    }
}

/// Explores `v` from a running deployment (every node old, empty); prints
/// the numbers and, on a violation, the shortest trace.
fn run(v: &Variant, witnesses: &mut Witnesses) -> (Stats, Option<Counterexample<State, Event>>) {
    let symmetry = Symmetry::of(v);
    let outcome = explore(
        State::running(v),
        |s| successors(s, v),
        |s| symmetry.key(s),
        |s| check(s, v),
        |from, event, to, new| witnesses.observe(v, from, event, to, new),
    );
    let bounds = format!(
        "{}, {}, Q = {}{}",
        v.max_tick
            .map_or("any number of ticks".into(), |t| format!("ticks 0..={t}")),
        v.max_losses
            .map_or("any number of data losses".into(), |l| format!(
                "≤{l} data losses"
            )),
        v.quarantine,
        if v.renewals { "" } else { ", no renewals" }
    );
    match outcome {
        Outcome::Safe(stats) => {
            println!("[{}] ({bounds}) no violation: {stats}", v.name);
            (stats, None)
        }
        Outcome::Violated(stats, cx) => {
            println!("[{}] ({bounds}) violation found: {stats}", v.name);
            print_trace(v, &cx);
            (stats, Some(cx))
        }
    }
}

fn expect_safe(v: &Variant) -> Witnesses {
    let mut w = Witnesses::default();
    let (stats, cx) = run(v, &mut w);
    println!("[{}] {w:?}", v.name);
    assert!(cx.is_none(), "[{}] broke an invariant", v.name);
    assert!(stats.states > 100, "{stats}");
    w
}

fn expect_violation(v: &Variant, kind: &str) -> Counterexample<State, Event> {
    let (_, cx) = run(v, &mut Witnesses::default());
    let cx = cx.unwrap_or_else(|| panic!("[{}] the search found no counterexample", v.name));
    assert!(
        cx.violation.starts_with(kind),
        "[{}] expected {kind}, found: {}",
        v.name,
        cx.violation
    );
    cx
}

fn count(cx: &Counterexample<State, Event>, f: impl Fn(&Event) -> bool) -> usize {
    cx.steps.iter().filter(|(e, _)| f(e)).count()
}

fn is_restart(e: &Event) -> bool {
    matches!(e, Event::Restart { .. })
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// The bounds of the explorations of the correct designs (none by
/// default), overridable with `QUORUMLOCK_MODEL_SLOTS_BOUNDS=ticks,losses`
/// (`-`: unbounded) to see how the state space grows.
fn bounds(v: Variant) -> Variant {
    let Ok(bounds) = std::env::var("QUORUMLOCK_MODEL_SLOTS_BOUNDS") else {
        return v;
    };
    let b: Vec<Option<u8>> = bounds
        .split(',')
        .map(|x| (x.trim() != "-").then(|| x.trim().parse().expect("ticks,losses")))
        .collect();
    assert_eq!(b.len(), 2, "QUORUMLOCK_MODEL_SLOTS_BOUNDS=ticks,losses");
    Variant {
        max_tick: b[0],
        max_losses: b[1],
        ..v
    }
}

#[test]
fn semaphore_slots_hold_at_most_k_permits() {
    let w = expect_safe(&bounds(SEMAPHORE));
    assert!(w.full > 0, "{w:?}");
    assert!(w.every_node_lost > 0, "{w:?}");
    assert!(w.wins_during_a_quarantine > 0, "{w:?}");
    assert!(w.bare_majority_losses > 0, "{w:?}");
}

/// Acquirers pass K = 1 or K = 2, in any order (K lowered, raised, or two
/// configurations at once during a rollout).
#[test]
fn semaphore_with_changing_k_holds_at_most_the_largest_live_k() {
    let v = bounds(Variant {
        name: "semaphore, K = 1 or 2",
        design: Design::Slots { ks: &[1, 2] },
        checks: HOLDERS | SLOTS | BEYOND,
        ..SEMAPHORE
    });
    let w = expect_safe(&v);
    // In the same space a grant under K = 1 leaves two holders: see K1.
    assert!(w.overshoots > 0, "{w:?}");
    assert!(w.every_node_lost > 0 && w.bare_majority_losses > 0, "{w:?}");
}

/// K1: a grant under K' = 1 while a permit on slot 1 (granted under K = 2)
/// runs leaves two holders. The bound is the largest live K, not the K of
/// the newest grant.
#[test]
fn lowering_k_grants_a_permit_beyond_the_new_k() {
    let v = Variant {
        name: "K lowered: a new grant within the new K",
        design: Design::Slots { ks: &[1, 2] },
        checks: HOLDERS | SLOTS | NEW_GRANT,
        ..SEMAPHORE
    };
    let cx = expect_violation(&v, "K1");
    assert_eq!(count(&cx, is_restart), 0);
}

/// K2: a permit granted under the old K runs past a TTL after the last
/// such grant only by renewing; without renewals (and with any data
/// losses) the excess ends within a TTL.
#[test]
fn lowering_k_old_permits_outlive_a_ttl_only_by_renewing() {
    let v = Variant {
        name: "K lowered: old permits end within a TTL",
        design: Design::Slots { ks: &[1, 2] },
        checks: HOLDERS | SLOTS | AFTER_TTL,
        ..SEMAPHORE
    };
    let cx = expect_violation(&v, "K2");
    assert!(count(&cx, |e| matches!(e, Event::Renew { extended: true, .. })) >= 1);
    expect_safe(&bounds(Variant {
        name: "K lowered, no renewals: old permits end within a TTL",
        renewals: false,
        ..v
    }));
}

#[test]
fn rwlock_writer_excludes_readers_and_writers() {
    let w = expect_safe(&bounds(RWLOCK));
    assert!(w.overlapping_readers > 0, "{w:?}");
    assert!(w.writer_wins_after_a_loss > 0, "{w:?}");
    assert!(w.every_node_lost > 0, "{w:?}");
    assert!(w.wins_during_a_quarantine > 0, "{w:?}");
    assert!(w.bare_majority_losses > 0, "{w:?}");
}

/// (d) A writer taking the slots one by one, in slot order, with no
/// rollback: still safe (a node counts only where it got every slot);
/// lost attempts leave entries that block everyone until they expire.
#[test]
fn rwlock_writer_slot_by_slot_without_rollback_is_still_safe() {
    let w = expect_safe(&bounds(Variant {
        name: "(d) rwlock, writer slot by slot, no rollback",
        design: Design::ReadWrite {
            r: 2,
            writer: WriterRule::OneByOne,
        },
        ..RWLOCK
    }));
    assert!(w.writer_wins > 0, "{w:?}");
    assert!(w.leftovers_on_every_node > 0, "{w:?}");
}

/// Writer preference: the queue only refuses, so the safety invariants
/// hold with it (with data losses); and a writer queued on a majority
/// keeps readers out until it holds or gives up, when no node loses its
/// data and a lost attempt keeps its places.
#[test]
fn rwlock_writer_queue_keeps_readers_out() {
    let queued = Variant {
        name: "rwlock with writer queue",
        queue: true,
        ..RWLOCK
    };
    let w = expect_safe(&bounds(queued));
    assert!(w.queued_behind_a_reader > 0, "{w:?}");
    let w = expect_safe(&Variant {
        name: "rwlock with writer queue, F1, no data loss",
        checks: WRITER | SLOTS | OVERTAKE,
        max_losses: Some(0),
        ..queued
    });
    assert!(w.queued_behind_a_reader > 0, "{w:?}");
}

/// F1 broken: a lost attempt that took a node's slots used its place
/// there up (the mutex's acquire.lua dequeues on taking), and a reader
/// takes that node.
#[test]
fn rwlock_writer_queue_place_used_up_by_a_lost_attempt_lets_a_reader_in() {
    let v = Variant {
        name: "writer queue, place used up by a lost attempt",
        queue: true,
        keep_place: false,
        checks: WRITER | SLOTS | OVERTAKE,
        max_losses: Some(0),
        ..RWLOCK
    };
    let cx = expect_violation(&v, "F1");
    assert_eq!(count(&cx, is_restart), 0);
}

/// F1 broken by a data loss: the queue is lost with the node, which votes
/// again after its quarantine.
#[test]
fn rwlock_writer_queue_lost_with_a_node_lets_a_reader_in() {
    let v = Variant {
        name: "writer queue, a node loses its data",
        queue: true,
        checks: WRITER | SLOTS | OVERTAKE,
        max_losses: Some(1),
        ..RWLOCK
    };
    let cx = expect_violation(&v, "F1");
    assert_eq!(count(&cx, is_restart), 1);
}

/// (a) Per-node permit sets with a majority quorum (the Redlock semaphore):
/// three pairwise-overlapping majorities, each node with room for K = 2,
/// admit a third holder. No failure needed.
#[test]
fn permit_sets_with_a_majority_quorum_admit_k_plus_one() {
    let v = Variant {
        name: "(a) per-node permit sets, K = 2",
        design: Design::PermitSets { k: 2 },
        ..SEMAPHORE
    };
    let cx = expect_violation(&v, "S1");
    assert_eq!(cx.steps.len(), 3);
    assert_eq!(count(&cx, is_restart), 0);
}

/// (b) Slots without quarantine (and with one shorter than the TTL): a
/// restarted node re-votes a slot; with K = 2, a third holder.
#[test]
fn slots_without_quarantine_admit_k_plus_one() {
    for quarantine in [0, TTL - 1] {
        let name = if quarantine == 0 {
            "(b) quarantine off"
        } else {
            "(b') quarantine < TTL"
        };
        let v = Variant {
            name,
            quarantine,
            checks: HOLDERS,
            ..SEMAPHORE
        };
        let cx = expect_violation(&v, "S1");
        assert!(count(&cx, is_restart) >= 1);
        // Shorter: the slot itself gets two holders.
        let v = Variant {
            checks: HOLDERS | SLOTS,
            ..v
        };
        let cx = expect_violation(&v, "S2");
        assert_eq!(count(&cx, is_restart), 1);
    }
}

/// (c) A writer that needs only a majority of the reader slots on a node
/// (R = 3: two of three; with R = 2 a majority is all) overlaps a reader
/// of the third slot.
#[test]
fn writer_with_a_majority_of_slots_overlaps_a_reader() {
    let v = Variant {
        name: "(c) writer needs a majority of the slots, R = 3",
        design: Design::ReadWrite {
            r: 3,
            writer: WriterRule::MajorityOfSlots,
        },
        ..RWLOCK
    };
    let cx = expect_violation(&v, "W1");
    assert_eq!(count(&cx, is_restart), 0);
}
