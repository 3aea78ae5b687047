//! An exhaustive model of the lock and fencing protocol: pure state
//! machines for 3 nodes and 2 clients, explored breadth first (every
//! reachable state within the bounds, each once) and checked for
//!
//! * **I1, mutual exclusion**: never two clients that both believe they hold
//!   the lock within their validity;
//! * **I2, fencing**: every token handed out is larger than every token
//!   handed out before it, to any client.
//!
//! The described protocol must pass; deliberately broken variants must fail,
//! and the search prints the shortest counterexample of each (run with
//! `cargo test --test model -- --nocapture`). No Redis, no library code.
//!
//! # What is modelled
//!
//! Time is discrete ticks; TTL = 2, quarantine Q = TTL. A node has a lock
//! entry (client, expiry), a fencing counter (value, current: written in the
//! node's present epoch), the counter's previous value (what a replica one
//! write behind holds), its epoch's age (capped at Q: old = votes), `origin`
//! (the epoch is the node's whole history) and whether it ever lost data.
//! The steps, each atomic at its tick, in any interleaving:
//!
//! * **tick**: keys expire (expiry ≤ now), validities end (until ≤ now);
//! * **acquire** by an idle client: its requests land on any set of nodes,
//!   lock the free ones; it wins when the locked old nodes are a majority
//!   (validity now + TTL, drift 0), else it rolls back;
//! * **renew** by a holder, on any set of its own or free keys (free: heal):
//!   re-sets them, and extends the validity to now + TTL when the old nodes
//!   among them are a majority;
//! * **release**;
//! * **fencing read** (once per hold, the library caches its token; retried
//!   after a failed raise): from any nonempty set of nodes (at least a
//!   majority, the shipped rule, in the "longer" and "shipped" runs and in
//!   variants (b), (c), (e)), p = 1 + max of every value read; fewer than a
//!   majority of current readings (absent on an origin node = a current 0):
//!   p = max(p, time floor);
//! * **fencing raise**, a separate step (anything may happen in between): on
//!   any set of nodes where the holder still has its key or the key is free
//!   (re-taken first, until the validity ends, as a renewal heals), counter =
//!   (max(value if current else 0, p), current); the token is handed out if
//!   a majority confirmed, young nodes included, while it holds;
//! * **restart** (lock and counter gone) or **failover** to a replica one
//!   write behind (lock gone, counter back to its previous value): a new
//!   epoch, young, not origin; at most 3 (or 2) per trace, any nodes, so
//!   rolling restarts of every node are in;
//! * **adoption** of an empty node (no lock, no counter) by an operator: old
//!   at once, origin. Allowed only if the node never lost data (see the
//!   findings).
//!
//! Two starts: a running deployment (every node old and origin) and a new
//! one (brand-new servers, young, not origin, until adopted or aged).
//!
//! # What is abstracted away
//!
//! * **Clock drift and skew**: none; a lease holds while now < acquired +
//!   TTL. The time floor reads a clock of K = 1000 units per tick that moves
//!   on by one unit at every fencing read (a real clock in µs moves on
//!   between two round trips); tick t reads (t + 1)·K, so honest counters
//!   stay far below it. Variant (e) shows what a clock that does not move on
//!   does.
//! * **Network delays**: none within a step; a request reaches any subset
//!   of the nodes. A write whose reply is lost is not modelled apart from
//!   "did not arrive", nor are requests delivered after their step.
//! * **Partial results**: any subset answers; for acquire and raise only
//!   nodes where the request has an effect matter (a request to a taken
//!   key, or a raise where the key is not ours, writes nothing: the same
//!   as no answer).
//! * **Lock entries nobody uses**: a lost acquire whose rollback misses a
//!   node, a release that misses one, and entries past their holder's
//!   validity leave entries that only block others until they expire. The
//!   model deletes them at once: a blocked request is the same as one that
//!   did not arrive (always allowed), so this only adds behaviours, and the
//!   states reached are also reached with every rollback and release
//!   delivered. For the same reason a renewed entry's expiry is capped at
//!   the holder's validity.
//! * **Failover** restores no lock entry and only the counter's previous
//!   value (one write behind); one lock name; one token per hold.
//!
//! # Bounds and reductions
//!
//! Ticks 0..=T, at most L data losses per trace, at most R fencing reads
//! per tick (see each test). Canonical states: nodes are sorted and the two
//! clients swapped (symmetry); counter values are renumbered keeping their
//! order, 0 and each difference up to (reads left + 1) (values are only
//! compared, maxed and raised by one, so the renumbered state behaves the
//! same); the failover history is dropped once no loss is left; the result
//! is packed in a u128. Checked by hand while writing: without the
//! renumbering the verdicts and the shortest counterexamples' lengths are
//! the same.
//!
//! Measured (debug build, `cargo test -- --test-threads 1`, one test at a
//! time on an idle 2-core machine; all tests in parallel take about 12 s
//! for the file):
//!
//! | run | T, L, R | states | transitions | time |
//! |---|---|---|---|---|
//! | correct, running deployment | 2, 3, 1 | 161,746 | 1,388,319 | 3.0 s |
//! | correct, new deployment | 2, 3, 1 | 258,982 | 2,250,903 | 5.8 s |
//! | correct, longer (majority reads) | 3, 2, 1 | 221,369 | 1,971,080 | 4.7 s |
//! | correct, two fences per tick | 1, 3, 2 | 314,368 | 2,981,084 | 8.1 s |
//! | shipped scripts | 2, 3, 1 | 124,965 | 1,046,541 | 2.5 s |
//!
//! The raise's heal (re-taking a free key) adds transitions but no state:
//! it is what a renewal on those nodes alone, one at a time (never an old
//! majority, so never extending), followed by the raise, reaches anyway.
//!
//! The broken variants stop at their first violation: 67 to 29,557 states,
//! under 0.4 s each.
//!
//! `QUORUMLOCK_MODEL_BOUNDS=T,L,R` overrides the bounds of the correct runs
//! (e.g. 3,3,1: 775,403 states, 18 s; 2,3,2: 4.7 M states, 160 s).
//!
//! # Findings
//!
//! * The protocol passes every run, with rolling restarts of every node,
//!   losses of a node of a holder's bare majority, wins during a
//!   quarantine, failovers, floor tokens and tokens that needed a young
//!   node's confirmation in the explored space
//!   ([`correct_protocol_space_holds_the_hard_cases`]): a young node's
//!   confirmation may count for the raise.
//! * Broken variants, shortest counterexamples: (a) Q = 0: 3 steps (a bare
//!   majority {n1, n2}, n1 restarts, the other client wins {n0, n1}); Q =
//!   TTL − 1: 4 steps; (b) counters not stamped: 8 steps, one restart of a
//!   node of the raise majority and a read of it and of the node the raise
//!   missed repeat the token; (c) no time floor: the same 8 steps (with
//!   reads from any subset, no loss is needed: a read of one never-raised
//!   node gives 1 again); (e) a clock that does not move on between two
//!   floor tokens: 9 steps, the floor token repeats.
//! * Reads from any subset, even one node, are safe here only because a
//!   clock that moves on puts every floor above every earlier token. A
//!   clock that reads the same for two holders (coarse, or skewed back by
//!   the time between them) repeats a floor token even with majority reads
//!   (e): the floor rests on the clocks, as src/fence.rs says. (Modelling
//!   the node clock as the bare tick, as first planned, is such a clock.)
//! * **The adoption guard "no lock and no counter" is not enough**: a node
//!   that restarted empty passes it. Adopted at once it votes for a second
//!   holder (I1, 4 steps); adopted after its quarantine it calls its lost
//!   counter "never written", a current 0 (I2, 10 steps). Adoption is safe
//!   only for a node that never lost data, which the node cannot check:
//!   it is the operator's word, and a server replacing a failed one is not
//!   brand-new in that sense.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

const NODES: usize = 3;
const CLIENTS: usize = 2;
const MAJORITY: usize = 2;
/// Every subset of the nodes, as a bit mask.
const ALL: u8 = (1 << NODES) - 1;
/// Lease length in ticks.
const TTL: u8 = 2;
/// Clock units per tick ("µs per tick"): honest counters stay far below it.
const K: u16 = 1000;

/// A protocol (correct or deliberately broken) and the exploration bounds.
#[derive(Clone, Copy, Debug)]
struct Variant {
    name: &'static str,
    /// Ticks a node casts no vote after its epoch starts.
    quarantine: u8,
    /// Counters carry the epoch they were written in (false: every present
    /// counter is current, an absent one is a current 0 on any node).
    epoch_stamps: bool,
    /// Fewer than a majority of current readings: p is raised above the
    /// clock.
    time_floor: bool,
    /// The clock moves on between two operations within a tick (the tick
    /// is coarse, the real clock is in µs): false reads `tick × K` only.
    fine_clock: bool,
    /// A young node's confirmation of a raise counts toward the majority.
    young_raise_counts: bool,
    /// The raise keeps a stale (other epoch) counter's value if it is
    /// larger (the shipped fence.lua); false: stale counts as 0 (the brief).
    raise_keeps_stale: bool,
    /// Nodes that must answer a fencing read (1: any nonempty set, as the
    /// brief; the shipped client needs a majority for the time floor).
    min_read: usize,
    /// Which empty nodes (no lock entry, no counter) may be adopted.
    adopt: AdoptGuard,
    /// Bounds: the last tick, data-loss events per trace, fencing reads per
    /// tick.
    max_tick: u8,
    max_losses: u8,
    max_reads_per_tick: u8,
}

impl Variant {
    fn old(&self, node: &Node) -> bool {
        node.age >= self.quarantine
    }
}

/// Which empty nodes an operator may adopt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AdoptGuard {
    /// Only a node that never lost data (a brand-new server of a new
    /// deployment): what "brand-new" must mean.
    NeverLostData,
    /// Any empty node: all the node itself can check (the brief's guard).
    Empty,
    /// Any empty node past its quarantine.
    EmptyAndOld,
}

/// The protocol as described (a raise treats a stale counter as 0).
const CORRECT: Variant = Variant {
    name: "correct",
    quarantine: TTL,
    epoch_stamps: true,
    time_floor: true,
    fine_clock: true,
    young_raise_counts: true,
    raise_keeps_stale: false,
    adopt: AdoptGuard::NeverLostData,
    min_read: 1,
    max_tick: 2,
    max_losses: 3,
    max_reads_per_tick: 1,
};

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Lock {
    /// A client.
    owner: u8,
    /// Absolute tick; entries with `expires <= tick` are dropped at once.
    expires: u8,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Counter {
    value: u16,
    /// Written in the node's present epoch. Epoch ids only ever meet the
    /// id of their own node, so "same epoch as the node" is all that
    /// matters: a data loss makes every counter of the node non-current.
    current: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Node {
    lock: Option<Lock>,
    counter: Option<Counter>,
    /// The counter's value before its last change: what a replica one
    /// write behind holds (a failover restores it, non-current).
    prev: Option<u16>,
    /// Ticks since the epoch started, capped at the quarantine (capped:
    /// old; an adopted node is old at once).
    age: u8,
    /// The epoch is the node's whole history (absent counter = never
    /// written = a current 0).
    origin: bool,
    /// The node has lost data at least once (restart or failover).
    lost: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
enum Client {
    Idle,
    /// Believes it holds the lock until tick `until` (exclusive).
    Holding {
        until: u8,
        /// Was handed a token in this hold (the library caches it).
        fenced: bool,
        /// Read done, raise not yet: the token it picked.
        pending: Option<u16>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct State {
    tick: u8,
    /// Fencing reads so far in this tick (bounded per tick).
    reads: u8,
    /// The time floor a read would pick now: the clock (in K units per
    /// tick) + 1. With a fine clock each read moves it on by one.
    clock: u16,
    losses: u8,
    /// The largest token handed out so far (0: none yet).
    max_token: u16,
    /// I2 broken: (token handed out, larger-or-equal earlier token).
    bad_token: Option<(u16, u16)>,
    nodes: [Node; NODES],
    clients: [Client; CLIENTS],
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Event {
    Tick,
    /// A winning attempt (a losing one changes nothing).
    Acquire {
        client: u8,
        locked: u8,
    },
    Renew {
        client: u8,
        answered: u8,
        extended: bool,
    },
    Release {
        client: u8,
    },
    FenceRead {
        client: u8,
        answered: u8,
        current: u8,
        floor: bool,
        picked: u16,
    },
    FenceRaise {
        client: u8,
        answered: u8,
        confirmed: u8,
        old_confirmed: u8,
        token: Option<u16>,
    },
    Restart {
        node: u8,
    },
    Failover {
        node: u8,
        value: u16,
    },
    Adopt {
        node: u8,
    },
}

/// The nodes of a mask (plain loops: this runs in debug builds).
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

/// The subsets of a mask, the empty one last (or left out).
fn subsets(mask: u8, with_empty: bool) -> Subsets {
    Subsets {
        mask,
        next: Some(mask),
        with_empty,
    }
}

struct Subsets {
    mask: u8,
    next: Option<u8>,
    with_empty: bool,
}

impl Iterator for Subsets {
    type Item = u8;
    fn next(&mut self) -> Option<u8> {
        let sub = self.next?;
        self.next = (sub != 0).then(|| sub.wrapping_sub(1) & self.mask);
        if sub == 0 && !self.with_empty {
            return None;
        }
        Some(sub)
    }
}

impl State {
    /// A deployment that has been running (every node old, whole history).
    fn running(v: &Variant) -> State {
        State::with_nodes(Node {
            lock: None,
            counter: None,
            prev: None,
            age: v.quarantine,
            origin: true,
            lost: false,
        })
    }

    /// A new deployment of servers just started, not adopted: young, with
    /// no record of their history.
    fn new_deployment(_: &Variant) -> State {
        State::with_nodes(Node {
            lock: None,
            counter: None,
            prev: None,
            age: 0,
            origin: false,
            lost: false,
        })
    }

    fn with_nodes(node: Node) -> State {
        State {
            tick: 0,
            reads: 0,
            clock: K + 1,
            losses: 0,
            max_token: 0,
            bad_token: None,
            nodes: [node; NODES],
            clients: [Client::Idle; CLIENTS],
        }
    }

    /// The nodes that satisfy `f`, as a mask.
    fn mask(&self, f: impl Fn(&Node) -> bool) -> u8 {
        let mut mask = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            if f(node) {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// The nodes where client `c` holds the key or it is free (renewals
    /// and raises write there; they re-take a free key).
    fn ours_or_free(&self, c: usize) -> u8 {
        self.mask(|n| n.lock.is_none_or(|l| l.owner == c as u8))
    }

    /// Every counter-like value in the state (0 included: absent / none),
    /// sorted, without repeats; `len` of the array are used.
    fn values(&self) -> ([u16; 16], usize) {
        let mut values = [0; 16];
        let mut len = 0;
        let mut push = |x| {
            values[len] = x;
            len += 1;
        };
        push(0);
        push(self.clock);
        push(self.max_token);
        for node in &self.nodes {
            if let Some(c) = node.counter {
                push(c.value);
            }
            if let Some(p) = node.prev {
                push(p);
            }
        }
        for client in &self.clients {
            if let Client::Holding {
                pending: Some(p), ..
            } = client
            {
                push(*p);
            }
        }
        if let Some((a, b)) = self.bad_token {
            push(a);
            push(b);
        }
        values[..len].sort_unstable();
        let mut distinct = 1;
        for i in 1..len {
            if values[i] != values[distinct - 1] {
                values[distinct] = values[i];
                distinct += 1;
            }
        }
        (values, distinct)
    }

    /// Renumbers the values, keeping their order, 0, and every difference
    /// up to `cap` (a larger one becomes `cap`). Values are only compared,
    /// maxed and raised by one (at most `cap - 1` more times within the
    /// bounds), and the next tick's clock is above them all: the renumbered
    /// state behaves exactly as the original one.
    fn renumber(&mut self, cap: u16) {
        let (values, len) = self.values();
        let values = &values[..len];
        let mut renamed = [0; 16];
        for i in 1..len {
            renamed[i] = renamed[i - 1] + (values[i] - values[i - 1]).min(cap);
        }
        let new = |x: &mut u16| {
            let mut i = 0;
            while values[i] != *x {
                i += 1;
            }
            *x = renamed[i];
        };
        new(&mut self.clock);
        new(&mut self.max_token);
        for node in &mut self.nodes {
            if let Some(c) = &mut node.counter {
                new(&mut c.value);
            }
            if let Some(p) = &mut node.prev {
                new(p);
            }
        }
        for client in &mut self.clients {
            if let Client::Holding {
                pending: Some(p), ..
            } = client
            {
                new(p);
            }
        }
        if let Some((a, b)) = &mut self.bad_token {
            new(a);
            new(b);
        }
    }

    /// The client stops believing it holds; its entries go (see "Lock
    /// entries nobody uses" in the module docs).
    fn drop_client(&mut self, c: usize) {
        self.clients[c] = Client::Idle;
        for node in &mut self.nodes {
            if node.lock.is_some_and(|l| l.owner == c as u8) {
                node.lock = None;
            }
        }
    }

    fn tick_passes(&self, v: &Variant) -> State {
        let mut t = *self;
        t.tick += 1;
        t.reads = 0;
        // Above every value, by far (values stay below the next tick's
        // clock, and canonical states keep values small).
        t.clock = (u16::from(t.tick) + 1) * K + 1;
        debug_assert!(self.values().0.iter().all(|&x| x < t.clock));
        for node in &mut t.nodes {
            if node.lock.is_some_and(|l| l.expires <= t.tick) {
                node.lock = None;
            }
            node.age = node.age.saturating_add(1).min(v.quarantine);
        }
        for c in 0..CLIENTS {
            if matches!(t.clients[c], Client::Holding { until, .. } if until <= t.tick) {
                t.drop_client(c);
            }
        }
        t
    }
}

/// Every step the model allows from `s`, with its result.
fn successors(s: &State, v: &Variant) -> Vec<(Event, State)> {
    let mut out = Vec::with_capacity(96);
    if s.tick < v.max_tick {
        out.push((Event::Tick, s.tick_passes(v)));
    }
    for (c, client) in s.clients.iter().enumerate() {
        match *client {
            Client::Idle => acquires(s, v, c, &mut out),
            Client::Holding {
                until,
                fenced,
                pending,
            } => {
                renewals(s, v, c, &mut out);
                releases(s, c, &mut out);
                if let Some(p) = pending {
                    raises(s, v, c, until, p, &mut out);
                } else if !fenced && s.reads < v.max_reads_per_tick {
                    reads(s, v, c, until, &mut out);
                }
            }
        }
    }
    for n in 0..NODES {
        data_losses(s, v, n, &mut out);
        adoption(s, v, n, &mut out);
    }
    out.retain(|(_, t)| t != s);
    out
}

/// The client's requests land on some nodes and lock the free ones among
/// them (`locked`: a request to a taken key changes nothing, as one that
/// never arrived); it wins with a majority of old nodes among them. A lost
/// attempt is rolled back: no change (see "Lock entries nobody uses").
fn acquires(s: &State, v: &Variant, c: usize, out: &mut Vec<(Event, State)>) {
    // Requests landing on a taken key change nothing: answered ⊆ free.
    let free = s.mask(|n| n.lock.is_none());
    for locked in subsets(free, false) {
        let mut t = *s;
        for i in members(locked) {
            t.nodes[i].lock = Some(Lock {
                owner: c as u8,
                expires: s.tick + TTL,
            });
        }
        let mut votes = 0;
        for i in members(locked) {
            votes += usize::from(v.old(&t.nodes[i]));
        }
        if votes >= MAJORITY {
            t.clients[c] = Client::Holding {
                until: s.tick + TTL,
                fenced: false,
                pending: None,
            };
            let event = Event::Acquire {
                client: c as u8,
                locked,
            };
            out.push((event, t));
        }
    }
}

/// Re-sets its entries (and takes free keys: heal) on `answered`; extends
/// its validity when old nodes where it now holds are a majority.
fn renewals(s: &State, v: &Variant, c: usize, out: &mut Vec<(Event, State)>) {
    let Client::Holding { until, .. } = s.clients[c] else {
        return;
    };
    for answered in subsets(s.ours_or_free(c), false) {
        let mut votes = 0;
        for i in members(answered) {
            votes += usize::from(v.old(&s.nodes[i]));
        }
        let extended = votes >= MAJORITY;
        let until = if extended { s.tick + TTL } else { until };
        let mut t = *s;
        if let Client::Holding { until: u, .. } = &mut t.clients[c] {
            *u = until;
        }
        for i in members(answered) {
            // Beyond the validity an entry is never used (see "Lock
            // entries nobody uses"): cap it there.
            t.nodes[i].lock = Some(Lock {
                owner: c as u8,
                expires: until.min(s.tick + TTL),
            });
        }
        let event = Event::Renew {
            client: c as u8,
            answered,
            extended,
        };
        out.push((event, t));
    }
}

/// Deletes its entries; stops believing it holds.
fn releases(s: &State, c: usize, out: &mut Vec<(Event, State)>) {
    let mut t = *s;
    t.drop_client(c);
    out.push((Event::Release { client: c as u8 }, t));
}

/// Fencing step 1 and 2: read `answered`, pick p.
fn reads(s: &State, v: &Variant, c: usize, until: u8, out: &mut Vec<(Event, State)>) {
    let mut seen = Vec::with_capacity(8);
    for answered in 1..=ALL {
        if (answered.count_ones() as usize) < v.min_read {
            continue; // too few answers: no token from this read
        }
        let mut max = 0;
        let mut current = 0;
        for i in members(answered) {
            let node = &s.nodes[i];
            let (value, is_current) = match node.counter {
                Some(counter) => (counter.value, counter.current || !v.epoch_stamps),
                None => (0, node.origin || !v.epoch_stamps),
            };
            max = max.max(value);
            current += usize::from(is_current);
        }
        let mut picked = max + 1;
        let floor = v.time_floor && current < MAJORITY;
        if floor {
            picked = picked.max(s.clock);
        }
        if seen.contains(&picked) {
            continue; // the same result as another answered set
        }
        seen.push(picked);
        let mut t = *s;
        t.reads += 1;
        if v.fine_clock {
            t.clock += 1;
        }
        t.clients[c] = Client::Holding {
            until,
            fenced: false,
            pending: Some(picked),
        };
        let event = Event::FenceRead {
            client: c as u8,
            answered,
            current: current as u8,
            floor,
            picked,
        };
        out.push((event, t));
    }
}

/// Fencing step 3: raise p on `answered`, nodes where it still holds the
/// key or the key is free (re-taken first, for the validity left, as a
/// renewal heals; where another client holds it the script writes nothing:
/// the same as no answer); hand p out when a majority confirmed (it still
/// holds: it is Holding).
fn raises(s: &State, v: &Variant, c: usize, until: u8, p: u16, out: &mut Vec<(Event, State)>) {
    for answered in subsets(s.ours_or_free(c), true) {
        let mut t = *s;
        let (mut confirmed, mut old_confirmed) = (0, 0);
        for i in members(answered) {
            let node = &mut t.nodes[i];
            if node.lock.is_none() {
                node.lock = Some(Lock {
                    owner: c as u8,
                    expires: until.min(s.tick + TTL),
                });
            }
            let base = match node.counter {
                Some(counter) if counter.current || !v.epoch_stamps || v.raise_keeps_stale => {
                    counter.value
                }
                _ => 0,
            };
            let value = base.max(p);
            if let Some(counter) = node.counter
                && counter.value != value
            {
                node.prev = Some(counter.value);
            }
            node.counter = Some(Counter {
                value,
                current: true,
            });
            if v.old(node) {
                old_confirmed += 1;
            } else if v.young_raise_counts {
                confirmed += 1;
            }
        }
        confirmed += old_confirmed;
        let token = (confirmed >= MAJORITY).then_some(p);
        if token.is_some() {
            if p <= t.max_token {
                t.bad_token = Some((p, t.max_token));
            }
            t.max_token = t.max_token.max(p);
        }
        t.clients[c] = Client::Holding {
            until,
            fenced: token.is_some(),
            pending: None,
        };
        let event = Event::FenceRaise {
            client: c as u8,
            answered,
            confirmed: confirmed as u8,
            old_confirmed: old_confirmed as u8,
            token,
        };
        out.push((event, t));
    }
}

/// A restart with no data, or a failover to a replica one write behind:
/// the lock entry is gone, the counter gone or rolled back, a new epoch.
fn data_losses(s: &State, v: &Variant, n: usize, out: &mut Vec<(Event, State)>) {
    if s.losses >= v.max_losses {
        return;
    }
    let mut t = *s;
    t.losses += 1;
    let prev = t.nodes[n].prev;
    t.nodes[n] = Node {
        lock: None,
        counter: None,
        prev: None,
        age: 0,
        origin: false,
        lost: true,
    };
    out.push((Event::Restart { node: n as u8 }, t));
    if let Some(value) = prev {
        t.nodes[n].counter = Some(Counter {
            value,
            current: false,
        });
        let event = Event::Failover {
            node: n as u8,
            value,
        };
        out.push((event, t));
    }
}

/// An operator adopts an empty node: old at once, its epoch its whole
/// history.
fn adoption(s: &State, v: &Variant, n: usize, out: &mut Vec<(Event, State)>) {
    let node = &s.nodes[n];
    let allowed = match v.adopt {
        AdoptGuard::NeverLostData => !node.lost,
        AdoptGuard::Empty => true,
        AdoptGuard::EmptyAndOld => v.old(node),
    };
    if !allowed || node.lock.is_some() || node.counter.is_some() {
        return;
    }
    let mut t = *s;
    t.nodes[n].age = v.quarantine;
    t.nodes[n].origin = true;
    out.push((Event::Adopt { node: n as u8 }, t));
}

/// The invariants: I1 (one believer at a time: a client is Holding only
/// within its validity) and I2 (a token handed out is above every earlier
/// one; the history is kept as `max_token` in the state).
fn check(s: &State) -> Option<String> {
    if s.clients
        .iter()
        .all(|c| matches!(c, Client::Holding { .. }))
    {
        return Some("I1 mutual exclusion: c0 and c1 both hold the lock".into());
    }
    let (token, earlier) = s.bad_token?;
    Some(format!(
        "I2 fencing: token {} handed out after token {}",
        Value(token),
        Value(earlier)
    ))
}

/// The canonical form of a state, packed in 116 bits. Clients and nodes
/// are interchangeable: the nodes are sorted, and the smaller of the two
/// client labelings is taken. Values are renumbered (see
/// [`State::renumber`]); the failover history is dropped once no more data
/// loss may happen.
fn canonical(s: &State, v: &Variant) -> u128 {
    let mut s = *s;
    let reads_left = u16::from(v.max_reads_per_tick) * u16::from(v.max_tick - s.tick)
        + u16::from(v.max_reads_per_tick.saturating_sub(s.reads));
    s.renumber(reads_left + 1);
    if s.losses >= v.max_losses {
        for node in &mut s.nodes {
            node.prev = None;
        }
    }
    pack(&s)
}

/// 7-bit value field (the canonical values are small).
fn value_bits(value: u16) -> u128 {
    assert!(value < 128, "value {value} too large to pack");
    u128::from(value)
}

/// 8 bits: present, then 7 bits of value.
fn optional_value_bits(value: Option<u16>) -> u128 {
    match value {
        Some(x) => 1 | value_bits(x) << 1,
        None => 0,
    }
}

/// A node in 24 bits; its lock owner (clients as 1 and 2) in bits 0..2.
fn pack_node(n: &Node, tick: u8) -> u32 {
    let lock = match n.lock {
        Some(l) => u128::from(l.owner + 1) | u128::from(l.expires - tick - 1) << 2,
        None => 0,
    };
    let counter = match n.counter {
        Some(c) => (1 + u128::from(c.current)) | value_bits(c.value) << 2,
        None => 0,
    };
    let bits = lock
        | counter << 3
        | optional_value_bits(n.prev) << 12
        | u128::from(n.age) << 20
        | u128::from(n.origin) << 22
        | u128::from(n.lost) << 23;
    bits as u32
}

/// A client in 11 bits.
fn pack_client(c: &Client, tick: u8) -> u128 {
    match *c {
        Client::Idle => 0,
        Client::Holding {
            until,
            fenced,
            pending,
        } => {
            1 | u128::from(until - tick - 1) << 1
                | u128::from(fenced) << 2
                | optional_value_bits(pending) << 3
        }
    }
}

/// Packs the state twice (the clients as they are, and swapped), each time
/// with its nodes sorted, and keeps the smaller.
fn pack(s: &State) -> u128 {
    let mut nodes = [0; NODES];
    let mut swapped = [0; NODES];
    for i in 0..NODES {
        nodes[i] = pack_node(&s.nodes[i], s.tick);
        // Owners 1 and 2 (the clients) trade places.
        swapped[i] = if nodes[i] & 3 == 0 {
            nodes[i]
        } else {
            nodes[i] ^ 3
        };
    }
    nodes.sort_unstable();
    swapped.sort_unstable();
    let global = u128::from(s.tick)
        | u128::from(s.reads) << 3
        | value_bits(s.clock) << 5
        | u128::from(s.losses) << 12
        | value_bits(s.max_token) << 14
        | u128::from(s.bad_token.is_some()) << 21;
    let key = |nodes: [u32; NODES], first: &Client, second: &Client| {
        u128::from(nodes[0])
            | u128::from(nodes[1]) << 24
            | u128::from(nodes[2]) << 48
            | pack_client(first, s.tick) << 72
            | pack_client(second, s.tick) << 83
            | global << 94
    };
    let [c0, c1] = &s.clients;
    key(nodes, c0, c1).min(key(swapped, c1, c0))
}

/// Bits `at..at + width` of `key`.
fn field(key: u128, at: u32, width: u32) -> u16 {
    ((key >> at) & ((1 << width) - 1)) as u16
}

fn unpack_value(key: u128, at: u32) -> Option<u16> {
    (field(key, at, 1) == 1).then(|| field(key, at + 1, 7))
}

/// A state with the canonical form `key` (the inverse of [`pack`]).
fn unpack(key: &u128) -> State {
    let key = *key;
    let tick = field(key, 94, 3) as u8;
    let node = |at: u32| Node {
        lock: (field(key, at, 2) as u8).checked_sub(1).map(|owner| Lock {
            owner,
            expires: tick + field(key, at + 2, 1) as u8 + 1,
        }),
        counter: (field(key, at + 3, 2) > 0).then(|| Counter {
            value: field(key, at + 5, 7),
            current: field(key, at + 3, 2) == 2,
        }),
        prev: unpack_value(key, at + 12),
        age: field(key, at + 20, 2) as u8,
        origin: field(key, at + 22, 1) == 1,
        lost: field(key, at + 23, 1) == 1,
    };
    let client = |at: u32| {
        if field(key, at, 1) == 0 {
            return Client::Idle;
        }
        Client::Holding {
            until: tick + field(key, at + 1, 1) as u8 + 1,
            fenced: field(key, at + 2, 1) == 1,
            pending: unpack_value(key, at + 3),
        }
    };
    State {
        tick,
        reads: field(key, 97, 2) as u8,
        clock: field(key, 99, 7),
        losses: field(key, 106, 2) as u8,
        max_token: field(key, 108, 7),
        bad_token: (field(key, 115, 1) == 1).then_some((0, 0)),
        nodes: [node(0), node(24), node(48)],
        clients: [client(72), client(83)],
    }
}

// ---------------------------------------------------------------------------
// The explorer: breadth-first over canonical states
// ---------------------------------------------------------------------------

/// FxHash: std's SipHash is slow in debug builds.
#[derive(Default)]
struct Fx(u64);

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        // Fx leaves the low bits (the bucket index) poorly mixed: finish
        // with murmur3's fmix64.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ h >> 33
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn write_isize(&mut self, i: isize) {
        self.add(i as u64);
    }
    fn write_u128(&mut self, i: u128) {
        self.add(i as u64);
        self.add((i >> 64) as u64);
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

/// Explores every state reachable from `roots`, breadth first, deduplicated
/// on `canonical` states; calls `observe(from, event, to, new)` on every
/// transition. Stops at the first state that fails `check`: its trace (by
/// replaying real, non-canonical steps from a root) is a shortest one.
fn explore<S, C, E>(
    roots: &[S],
    successors: impl Fn(&S) -> Vec<(E, S)>,
    canonical: impl Fn(&S) -> C,
    expand: impl Fn(&C) -> S,
    check: impl Fn(&S) -> Option<String>,
    mut observe: impl FnMut(&S, &E, &S, bool),
) -> Outcome<S, E>
where
    S: Copy,
    C: Copy + Eq + Hash,
{
    let start = Instant::now();
    let mut index: HashMap<C, u32, BuildHasherDefault<Fx>> = HashMap::default();
    let mut states: Vec<C> = Vec::new();
    let mut parent: Vec<u32> = Vec::new();
    let mut depth: Vec<u8> = Vec::new();
    let mut transitions = 0;
    let mut found = None;
    for root in roots {
        let key = canonical(root);
        if let Entry::Vacant(slot) = index.entry(key) {
            slot.insert(states.len() as u32);
            states.push(key);
            parent.push(u32::MAX);
            depth.push(0);
            if let Some(violation) = check(root) {
                found = Some((states.len() - 1, violation));
                break;
            }
        }
    }
    let mut next = 0;
    'search: while found.is_none() && next < states.len() {
        let s = expand(&states[next]);
        for (event, t) in successors(&s) {
            transitions += 1;
            let key = canonical(&t);
            let entry = index.entry(key);
            let new = matches!(entry, Entry::Vacant(_));
            if let Entry::Vacant(slot) = entry {
                slot.insert(states.len() as u32);
                states.push(key);
                parent.push(next as u32);
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
    // The canonical path, root first.
    let mut path = vec![bad];
    while parent[*path.last().unwrap()] != u32::MAX {
        path.push(parent[*path.last().unwrap()] as usize);
    }
    path.reverse();
    let root = *roots
        .iter()
        .find(|r| canonical(r) == states[path[0]])
        .expect("a root");
    let mut steps = Vec::new();
    let mut at = root;
    for &i in &path[1..] {
        let (event, t) = successors(&at)
            .into_iter()
            .find(|(_, t)| canonical(t) == states[i])
            .expect("the path replays");
        steps.push((event, t));
        at = t;
    }
    // Told again on the real (not renumbered) values.
    let violation = check(&at).unwrap_or(violation);
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

/// A counter value or token: `tK+r` when above a time floor.
struct Value(u16);

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > K {
            write!(f, "{}K+{}", self.0 / K, self.0 % K)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

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
            Event::Acquire { client, locked } => {
                write!(f, "c{client} acquires: locks {}, WINS", Nodes(locked))
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
            Event::FenceRead {
                client,
                answered,
                current,
                floor,
                picked,
            } => write!(
                f,
                "c{client} fence-reads {}: {current} current{}, picks p={}",
                Nodes(answered),
                if floor { ", time floor" } else { "" },
                Value(picked)
            ),
            Event::FenceRaise {
                client,
                answered,
                confirmed,
                old_confirmed,
                token,
            } => {
                write!(
                    f,
                    "c{client} raises p on {}: {confirmed} confirm ({} young), ",
                    Nodes(answered),
                    confirmed - old_confirmed
                )?;
                match token {
                    Some(p) => write!(f, "TOKEN {} handed out", Value(p)),
                    None => write!(f, "no token"),
                }
            }
            Event::Restart { node } => write!(f, "n{node} restarts empty (new epoch)"),
            Event::Failover { node, value } => write!(
                f,
                "n{node} fails over to a replica with counter {} (new epoch)",
                Value(value)
            ),
            Event::Adopt { node } => write!(f, "operator adopts n{node}"),
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
            match node.lock {
                Some(l) => write!(f, "c{}<{} ", l.owner, l.expires)?,
                None => write!(f, "free ")?,
            }
            match node.counter {
                Some(c) => write!(
                    f,
                    "ctr {}{} ",
                    Value(c.value),
                    if c.current { "" } else { "(stale)" }
                )?,
                None => write!(f, "ctr - ")?,
            }
            let age = if v.old(node) { "old" } else { "young" };
            write!(f, "{age}{}]", if node.origin { " origin" } else { "" })?;
        }
        write!(f, " |")?;
        for (c, client) in s.clients.iter().enumerate() {
            match client {
                Client::Idle => write!(f, " c{c} idle")?,
                Client::Holding {
                    until,
                    fenced,
                    pending,
                } => {
                    write!(f, " c{c} holds<{until}")?;
                    if *fenced {
                        write!(f, " (has its token)")?;
                    }
                    if let Some(p) = pending {
                        write!(f, " (p={})", Value(*p))?;
                    }
                }
            }
        }
        write!(f, " | max token {}", Value(s.max_token))
    }
}

fn print_trace(v: &Variant, cx: &Counterexample<State, Event>) {
    println!(
        "[{}] shortest counterexample ({} steps): {}",
        v.name,
        cx.steps.len(),
        cx.violation
    );
    println!("   0. start                {}", Show(&cx.root, v));
    for (i, (event, s)) in cx.steps.iter().enumerate() {
        println!("  {:>2}. {event}", i + 1);
        println!("                          {}", Show(s, v));
    }
}

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

/// What the search met on its way: evidence that the pass is not vacuous.
#[derive(Debug, Default)]
struct Witnesses {
    /// States where every node has lost its data (rolling restarts).
    every_node_lost: usize,
    /// Tokens handed out in such states.
    tokens_after_every_node_lost: usize,
    /// Tokens handed out (transitions).
    tokens: usize,
    /// Reads that fell back on the time floor.
    floor_reads: usize,
    /// Tokens whose raise reached a majority only with a young node.
    tokens_needing_a_young_node: usize,
    /// Data losses of a node in a holder's bare majority of old nodes.
    bare_majority_losses: usize,
    /// Wins while a node that lost data is still quarantined.
    wins_during_a_quarantine: usize,
    /// Failovers to a replica one write behind.
    failovers: usize,
    /// Adoptions.
    adoptions: usize,
}

impl Witnesses {
    fn observe(&mut self, v: &Variant, from: &State, event: &Event, to: &State, new: bool) {
        let every_node_lost = to.nodes.iter().all(|n| n.lost);
        if new && every_node_lost {
            self.every_node_lost += 1;
        }
        match *event {
            Event::FenceRaise {
                token: Some(_),
                old_confirmed,
                ..
            } => {
                self.tokens += 1;
                self.tokens_after_every_node_lost += usize::from(every_node_lost);
                self.tokens_needing_a_young_node += usize::from(old_confirmed < MAJORITY as u8);
            }
            Event::FenceRead { floor: true, .. } => self.floor_reads += 1,
            Event::Restart { node } | Event::Failover { node, .. } => {
                self.failovers += usize::from(matches!(event, Event::Failover { .. }));
                if let Some(lock) = from.nodes[usize::from(node)].lock {
                    let old_held = from
                        .nodes
                        .iter()
                        .filter(|n| n.lock.is_some_and(|l| l.owner == lock.owner) && v.old(n))
                        .count();
                    self.bare_majority_losses += usize::from(old_held == MAJORITY);
                }
            }
            Event::Acquire { .. } => {
                let quarantined = from.nodes.iter().any(|n| n.lost && !v.old(n));
                self.wins_during_a_quarantine += usize::from(quarantined);
            }
            Event::Adopt { .. } => self.adoptions += 1,
            _ => {}
        }
    }
}

/// The bounds of the explorations of the correct protocol, overridable
/// with `QUORUMLOCK_MODEL_BOUNDS=ticks,losses,reads` to explore further
/// (best in a release build).
fn bounds(v: Variant) -> Variant {
    let Ok(bounds) = std::env::var("QUORUMLOCK_MODEL_BOUNDS") else {
        return v;
    };
    let b: Vec<u8> = bounds
        .split(',')
        .map(|x| x.trim().parse().expect("ticks,losses,reads"))
        .collect();
    assert_eq!(b.len(), 3, "QUORUMLOCK_MODEL_BOUNDS=ticks,losses,reads");
    Variant {
        max_tick: b[0],
        max_losses: b[1],
        max_reads_per_tick: b[2],
        ..v
    }
}

/// Explores `v` from `roots`; prints the numbers and, on a violation, the
/// shortest trace.
fn run(
    v: &Variant,
    roots: &[fn(&Variant) -> State],
    witnesses: &mut Witnesses,
) -> (Stats, Option<Counterexample<State, Event>>) {
    let roots: Vec<State> = roots.iter().map(|root| root(v)).collect();
    let outcome = explore(
        &roots,
        |s| successors(s, v),
        |s| canonical(s, v),
        unpack,
        check,
        |from, event, to, new| witnesses.observe(v, from, event, to, new),
    );
    let bounds = format!(
        "ticks 0..={}, ≤{} data losses, ≤{} fencing reads per tick",
        v.max_tick, v.max_losses, v.max_reads_per_tick
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

fn expect_violation(v: &Variant, kind: &str) -> Counterexample<State, Event> {
    let (_, cx) = run(v, &[State::running], &mut Witnesses::default());
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

fn is_loss(e: &Event) -> bool {
    matches!(e, Event::Restart { .. } | Event::Failover { .. })
}

/// The correct protocol from a running deployment, explored once for the
/// two tests that need it.
fn correct_run() -> &'static (Stats, Witnesses) {
    static RUN: OnceLock<(Stats, Witnesses)> = OnceLock::new();
    RUN.get_or_init(|| {
        let mut witnesses = Witnesses::default();
        let (stats, cx) = run(&bounds(CORRECT), &[State::running], &mut witnesses);
        assert!(cx.is_none(), "the protocol as described broke an invariant");
        println!("[correct] {witnesses:?}");
        (stats, witnesses)
    })
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn correct_protocol_keeps_both_invariants() {
    let (stats, _) = correct_run();
    assert!(stats.states > 10_000, "{stats}");
}

/// A longer horizon (a node that lost data at tick 0 or 1 votes again
/// within it), two data losses, reads from a majority (the shipped rule).
#[test]
fn correct_protocol_keeps_both_invariants_over_longer_time() {
    let v = bounds(Variant {
        name: "correct, longer",
        min_read: MAJORITY,
        max_tick: 3,
        max_losses: 2,
        ..CORRECT
    });
    let (_, cx) = run(&v, &[State::running], &mut Witnesses::default());
    assert!(cx.is_none(), "the protocol as described broke an invariant");
}

/// Two fencing reads in one tick: successive holders may both fall back
/// on the time floor within one tick (the clock moves on in between).
#[test]
fn correct_protocol_keeps_both_invariants_with_two_fences_per_tick() {
    let v = bounds(Variant {
        name: "correct, two fences per tick",
        max_tick: 1,
        max_reads_per_tick: 2,
        ..CORRECT
    });
    let mut w = Witnesses::default();
    let (_, cx) = run(&v, &[State::running], &mut w);
    assert!(cx.is_none(), "the protocol as described broke an invariant");
    assert!(w.tokens_after_every_node_lost > 0, "{w:?}");
}

/// The pass is not vacuous: the explored space holds rolling restarts of
/// every node, losses of a node in a holder's bare majority, wins during a
/// quarantine, tokens from the time floor and tokens that needed a young
/// node's confirmation.
#[test]
fn correct_protocol_space_holds_the_hard_cases() {
    let (_, w) = correct_run();
    assert!(w.every_node_lost > 0, "{w:?}");
    assert!(w.tokens_after_every_node_lost > 0, "{w:?}");
    assert!(w.floor_reads > 0, "{w:?}");
    assert!(w.tokens_needing_a_young_node > 0, "{w:?}");
    assert!(w.bare_majority_losses > 0, "{w:?}");
    assert!(w.wins_during_a_quarantine > 0, "{w:?}");
    assert!(w.failovers > 0, "{w:?}");
}

/// A new deployment: brand-new servers, young and with no record of their
/// history until the operator adopts them (or the quarantine passes).
#[test]
fn correct_protocol_is_safe_from_a_new_deployment() {
    let v = bounds(Variant {
        name: "correct, new deployment",
        ..CORRECT
    });
    let mut w = Witnesses::default();
    let (_, cx) = run(&v, &[State::new_deployment], &mut w);
    println!("[{}] {w:?}", v.name);
    assert!(cx.is_none(), "the protocol as described broke an invariant");
    assert!(w.adoptions > 0 && w.tokens > 0, "{w:?}");
}

/// The scheme as src/fence.rs and fence.lua ship it: a read needs a
/// majority of answers, and the raise keeps a stale counter's value when
/// larger (the brief: stale counts as 0).
#[test]
fn shipped_raise_keeps_both_invariants() {
    let v = bounds(Variant {
        name: "shipped scripts (majority reads, raise keeps stale values)",
        raise_keeps_stale: true,
        min_read: MAJORITY,
        ..CORRECT
    });
    let (_, cx) = run(&v, &[State::running], &mut Witnesses::default());
    assert!(cx.is_none(), "broke an invariant");
}

/// (a) No quarantine (and a quarantine shorter than the TTL): a restarted
/// node in a holder's bare majority votes for a second holder at once.
#[test]
fn no_quarantine_breaks_mutual_exclusion() {
    for quarantine in [0, TTL - 1] {
        let name = if quarantine == 0 {
            "(a) quarantine off"
        } else {
            "(a') quarantine < TTL"
        };
        let v = Variant {
            name,
            quarantine,
            ..CORRECT
        };
        let cx = expect_violation(&v, "I1");
        assert_eq!(count(&cx, is_loss), 1);
    }
}

/// (b) Counters without epoch stamps: a counter that went back or away
/// still counts as current, and a later token repeats.
#[test]
fn unstamped_counters_break_fencing() {
    let v = Variant {
        name: "(b) counters not epoch-stamped",
        min_read: MAJORITY,
        max_reads_per_tick: 2,
        epoch_stamps: false,
        ..CORRECT
    };
    let cx = expect_violation(&v, "I2");
    assert!(count(&cx, is_loss) >= 1);
}

/// (c) No time floor: when too few current counters are read, one more
/// than the stale ones repeats a token.
#[test]
fn no_time_floor_breaks_fencing() {
    let v = Variant {
        name: "(c) no time floor",
        min_read: MAJORITY,
        max_reads_per_tick: 2,
        time_floor: false,
        ..CORRECT
    };
    let cx = expect_violation(&v, "I2");
    assert!(count(&cx, is_loss) >= 1);
}

/// (d) Adoption guarded only by "no lock entry, no counter" (all that the
/// node can check): a node that lost its data passes it, votes at once and
/// calls its missing counters "never written".
#[test]
fn adopting_a_node_that_lost_data_breaks_mutual_exclusion() {
    let v = Variant {
        name: "(d) adoption of any empty node",
        adopt: AdoptGuard::Empty,
        ..CORRECT
    };
    let cx = expect_violation(&v, "I1");
    assert_eq!(count(&cx, |e| matches!(e, Event::Adopt { .. })), 1);
}

/// (d') Waiting out the quarantine before adopting saves mutual exclusion
/// but not fencing: the adopted node calls its lost counter "never
/// written", a current 0.
#[test]
fn adopting_a_node_that_lost_data_after_its_quarantine_breaks_fencing() {
    let v = Variant {
        name: "(d') adoption of any empty node past its quarantine",
        adopt: AdoptGuard::EmptyAndOld,
        min_read: MAJORITY,
        ..CORRECT
    };
    let cx = expect_violation(&v, "I2");
    assert_eq!(count(&cx, |e| matches!(e, Event::Adopt { .. })), 1);
}

/// (e) The time floor needs a clock that has moved on since the last floor
/// token: with a clock that reads the same for two holders (coarse, or
/// behind by that much), a floor token repeats.
#[test]
fn a_clock_that_does_not_move_on_repeats_floor_tokens() {
    let v = Variant {
        name: "(e) coarse clock",
        min_read: MAJORITY,
        max_reads_per_tick: 2,
        fine_clock: false,
        ..CORRECT
    };
    let cx = expect_violation(&v, "I2");
    assert!(count(&cx, |e| matches!(e, Event::FenceRead { floor: true, .. })) >= 2);
}
