//! The guarantees of the primitives built on slots: a read-write lock
//! ([`Mode::Read`], [`Mode::Write`]) and a semaphore ([`Mode::Permit`]).
//! Their holds' intervals are built as a mutex's are (see the [module
//! documentation](super)): from the win to the earliest of the release,
//! the latest validity deadline and the worker's kill, every stamp on the
//! one `CLOCK_MONOTONIC` of the machine. Two intervals overlap when one
//! starts before the other ends (`[start, end)`, as for
//! [`ViolationKind::Overlap`]: no tolerance, the stamps are nanoseconds of
//! one clock).
//!
//! * [`ViolationKind::WriterOverlap`]: a write hold of a name overlaps no
//!   other hold of it, read or write.
//! * [`ViolationKind::MoreThanKHolders`]: at no instant do more permit holds
//!   of a name overlap than the largest K among them (each holder logs the
//!   K it took its permit with; a K lowered while permits of the old one
//!   still run leaves them running, and the old K bounds them until they
//!   end). Each hold whose start makes one too many is one violation.
//!
//! Each slot is an ordinary lock name, so the mutex's guarantees hold per
//! slot as well, and are checked under the mutex's kinds:
//! [`ViolationKind::Overlap`] for two readers or two permits of one slot,
//! and [`ViolationKind::TokenRegression`] for the tokens, in won order,
//! per slot (a writer has every slot: its token is above every token won
//! before it on the name, and below every later one).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::holds::{Hold, secs};
use super::rules::{self, Found, ViolationKind, describe};
use crate::chaos::history::{Mode, Nanos};
use crate::table::clip;

/// What the checks saw of one name's holds, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Peak {
    /// The most holds of the name at one instant (readers for a
    /// read-write lock, permits for a semaphore).
    pub(super) at_once: u64,
    /// For a semaphore: the largest K its holders took permits with.
    pub(super) permits: u32,
}

/// The read-write lock's guarantee over `holds` (one name, sorted by
/// start): every write hold that overlaps another hold, read or write.
/// Returns the most readers at one instant.
pub(super) fn check_writers(holds: &[Hold], found: &mut Found) -> Peak {
    let kind = ViolationKind::WriterOverlap;
    let mut open: BTreeSet<(Nanos, usize)> = BTreeSet::new();
    let mut writers: BTreeSet<(Nanos, usize)> = BTreeSet::new();
    let mut peak = Peak::default();
    for (i, b) in holds.iter().enumerate() {
        close_before(&mut open, b.start);
        close_before(&mut writers, b.start);
        if b.end <= b.start {
            continue; // An empty interval overlaps nothing.
        }
        let writes = b.mode == Some(Mode::Write);
        // A writer overlaps every open hold; a reader, the open writers.
        let against = if writes { &open } else { &writers };
        // Every overlap found here starts at `b.start`: once one is not
        // kept, none of the rest would be.
        for (n, &(_, j)) in against.iter().enumerate() {
            if !found.wants(kind, b.start) {
                found.count(kind, (against.len() - n) as u64);
                break;
            }
            let a = &holds[j];
            let (start, end) = (b.start, a.end.min(b.end));
            let (writer, other) = if writes { (b, a) } else { (a, b) };
            let detail = format!(
                "{} wrote {} while {} {} it, for {:.1} ms: {} and {}",
                writer.id,
                b.key,
                other.id,
                if other.mode == Some(Mode::Write) {
                    "wrote"
                } else {
                    "read"
                },
                (end - start) as f64 / 1e6,
                describe(a, found.t0()),
                describe(b, found.t0())
            );
            found.push(
                kind,
                &b.key,
                (start, end),
                vec![a.id.clone(), b.id.clone()],
                detail,
            );
        }
        open.insert((b.end, i));
        if writes {
            writers.insert((b.end, i));
        }
        peak.at_once = peak.at_once.max((open.len() - writers.len()) as u64);
    }
    peak
}

/// The semaphore's guarantee over `holds` (one name, sorted by start): at
/// no instant more permits than the largest K of the holds open then.
/// Returns the most permits at one instant and the largest K.
pub(super) fn check_permits(holds: &[Hold], found: &mut Found) -> Peak {
    let kind = ViolationKind::MoreThanKHolders;
    let mut open: BTreeSet<(Nanos, usize)> = BTreeSet::new();
    // The K of each open hold, counted.
    let mut ks: BTreeMap<u32, usize> = BTreeMap::new();
    let k_of = |h: &Hold| match h.mode {
        Some(Mode::Permit { permits, .. }) => permits,
        _ => 1,
    };
    let mut peak = Peak::default();
    for (i, b) in holds.iter().enumerate() {
        while let Some(&(end, j)) = open.first() {
            if end > b.start {
                break;
            }
            open.pop_first();
            let k = k_of(&holds[j]);
            if let Some(n) = ks.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    ks.remove(&k);
                }
            }
        }
        if b.end <= b.start {
            continue;
        }
        open.insert((b.end, i));
        *ks.entry(k_of(b)).or_default() += 1;
        peak.at_once = peak.at_once.max(open.len() as u64);
        peak.permits = peak.permits.max(k_of(b));
        let k = ks.last_key_value().map_or(0, |(k, _)| *k);
        if open.len() as u64 <= u64::from(k) {
            continue;
        }
        if !found.wants(kind, b.start) {
            found.count(kind, 1);
            continue;
        }
        // The instant: `b.start`, until the first of them ends.
        let end = open.first().map_or(b.end, |&(end, _)| end);
        let mut ids: Vec<String> = open.iter().map(|&(_, j)| holds[j].id.clone()).collect();
        ids.sort();
        let others: Vec<String> = open
            .iter()
            .filter(|&&(_, j)| j != i)
            .map(|&(_, j)| describe(&holds[j], found.t0()))
            .collect();
        let detail = format!(
            "{} permits of {} held at once at {:.3} s (K {k}) when {} won: {}; already holding: {}",
            open.len(),
            b.key,
            secs(b.start, found.t0()),
            b.id,
            describe(b, found.t0()),
            clip(&others.join(", "), 600)
        );
        found.push(kind, &b.key, (b.start, end), ids, detail);
    }
    peak
}

/// The mutex's overlap check, slot by slot, over the holds of `holds` (one
/// name, sorted by start) that have one slot (readers, permits). A
/// violation names the slot's lock name, `<prefix><name>:<slot>`.
pub(super) fn check_slot_overlaps(holds: &[Hold], prefix: &str, found: &mut Found) {
    let mut by_slot: BTreeMap<u32, Vec<Hold>> = BTreeMap::new();
    for h in holds {
        if let Some(slot) = h.mode.and_then(Mode::slot) {
            let mut h = h.clone();
            h.key = format!("{prefix}{}:{slot}", h.key);
            by_slot.entry(slot).or_default().push(h);
        }
    }
    for slot_holds in by_slot.values() {
        rules::check_overlaps(slot_holds, found);
    }
}

/// Fencing tokens, slot by slot, in won order over `holds` (one name,
/// sorted by start): a hold of one slot gets a token above every earlier
/// one of its slot and every earlier writer's; a writer (every slot), one
/// above every earlier token of the name.
pub(super) fn check_slot_tokens(holds: &[Hold], found: &mut Found) {
    let mut all: Max<'_> = None;
    let mut writers: Max<'_> = None;
    let mut slots: HashMap<u32, (u64, &Hold)> = HashMap::new();
    for b in holds {
        let Some(token) = b.token else { continue };
        let slot = b.mode.and_then(Mode::slot);
        let bound = match slot {
            None => all,
            Some(s) => larger(writers, slots.get(&s).copied()),
        };
        if let Some((m, a)) = bound
            && token <= m
        {
            rules::token_regression((a, m), (b, token), found);
        }
        raise(&mut all, token, b);
        match slot {
            None => raise(&mut writers, token, b),
            Some(s) => {
                let mut own = slots.get(&s).copied();
                raise(&mut own, token, b);
                if let Some(own) = own {
                    slots.insert(s, own);
                }
            }
        }
    }
}

/// The largest token so far, and whose.
type Max<'a> = Option<(u64, &'a Hold)>;

fn larger<'a>(a: Max<'a>, b: Max<'a>) -> Max<'a> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 > x.0 { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

fn raise<'a>(max: &mut Max<'a>, token: u64, b: &'a Hold) {
    if max.is_none_or(|(m, _)| token > m) {
        *max = Some((token, b));
    }
}

/// Removes from `open` (keyed by end) every interval that ends by `t`.
fn close_before(open: &mut BTreeSet<(Nanos, usize)>, t: Nanos) {
    while let Some(&(end, _)) = open.first() {
        if end > t {
            break;
        }
        open.pop_first();
    }
}
