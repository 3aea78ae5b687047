//! The lock names one guard holds, in the fixed order every script sees
//! them, and the keys derived from each name (its fencing counter and its
//! release channel).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::Error;

/// Prefix of every key and channel quorumlock derives from a lock name.
/// Lock names that start with it are rejected, so a derived key can never
/// collide with a lock key.
pub(crate) const RESERVED_PREFIX: &str = "quorumlock:";

/// The fencing counter of a lock name (a plain integer key, no TTL: it must
/// outlive every holder).
pub(crate) fn fence_key(name: &str) -> String {
    format!("{RESERVED_PREFIX}fence:{name}")
}

/// The marker an operator's release leaves on a node (`quorumlock:forced:`
/// and the name): no renewal or fencing raise re-takes the name there
/// while it lives (`scripts/force_release.lua`).
pub(crate) fn forced_key(name: &str) -> String {
    format!("{RESERVED_PREFIX}forced:{name}")
}

/// Every node's epoch marker (`scripts/epoch.lua`).
pub(crate) const EPOCH_KEY: &str = "quorumlock:epoch";

/// The waiter queue of `name` (a sorted set, see `scripts/queue.lua`).
pub(crate) fn queue_key(name: &str) -> String {
    format!("{RESERVED_PREFIX}queue:{name}")
}

/// When each place in the waiter queue of `name` lapses (a hash).
pub(crate) fn queue_leases_key(name: &str) -> String {
    format!("{RESERVED_PREFIX}leases:{name}")
}

/// The channel a node publishes on when the lock name becomes free there.
/// The release script builds the same name (`scripts/release.lua`).
pub(crate) fn release_channel(name: &str) -> String {
    format!("{RESERVED_PREFIX}released:{name}")
}

/// The channel on which a node tells lock service `service` that the name
/// in the message is free and its waiter is first in line
/// (`scripts/queue.lua`, `quorumlock_announce`). It is under the release
/// channels' prefix, so the documented ACL (`&quorumlock:released:*`)
/// covers it, and it is no name's release channel: names never start with
/// the reserved prefix.
pub(crate) fn turn_channel(service: &str) -> String {
    format!("{RESERVED_PREFIX}released:{RESERVED_PREFIX}turn:{service}")
}

/// Prefix of a semaphore's slot names: slot `i` of semaphore `name` is the
/// lock name `quorumlock:permit:<name>:<i>` ([`slot_name`]).
pub(crate) const PERMIT_PREFIX: &str = "quorumlock:permit:";

/// Prefix of a read-write lock's reader slot names (`quorumlock:rw:<name>:<i>`).
pub(crate) const RW_PREFIX: &str = "quorumlock:rw:";

/// Slot `slot` of the primitive `prefix` ([`PERMIT_PREFIX`] or
/// [`RW_PREFIX`]) over the user's name `name`: an ordinary lock name, so a
/// slot is taken, renewed, fenced and released exactly as a mutex is.
pub(crate) fn slot_name(prefix: &str, name: &str, slot: u32) -> String {
    format!("{prefix}{name}:{slot}")
}

/// Whether `name` is a slot name ([`slot_name`]) of a name that is itself
/// allowed: the one part of the reserved namespace that is a lock name.
fn is_slot_name(name: &str) -> bool {
    let Some(rest) = [PERMIT_PREFIX, RW_PREFIX]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
    else {
        return false;
    };
    match rest.rsplit_once(':') {
        Some((user, slot)) => {
            !slot.is_empty()
                && slot.bytes().all(|b| b.is_ascii_digit())
                && !user.starts_with(RESERVED_PREFIX)
        }
        None => false,
    }
}

/// Refuses a name in the reserved `quorumlock:` namespace: as a lock name
/// it could collide with a derived key, and released by force it would
/// delete one (`quorumlock:epoch` takes every node's vote away for the
/// quarantine). The slots of semaphores and read-write locks
/// ([`slot_name`]) are the exception: lock names derived from a user's
/// name, so that an operator can release a stuck permit by force.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.starts_with(RESERVED_PREFIX) && !is_slot_name(name) {
        return Err(Error::InvalidKey {
            key: name.to_owned(),
            reason: "names starting with `quorumlock:` are reserved for the keys quorumlock derives (epoch markers, fencing counters, release channels)",
        });
    }
    Ok(())
}

/// Refuses a semaphore's or read-write lock's own name (`what` says which)
/// if it is empty or anywhere in the reserved namespace: its slots' names
/// are derived from it, and a slot of a slot would be refused only later,
/// under a name the caller never gave.
pub(crate) fn check_primitive_name(name: &str, what: &'static str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::InvalidKey {
            key: String::new(),
            reason: what,
        });
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(Error::InvalidKey {
            key: name.to_owned(),
            reason: "names starting with `quorumlock:` are reserved for the keys quorumlock derives (slots, epoch markers, fencing counters, release channels)",
        });
    }
    Ok(())
}

/// One guard's lock names: sorted, without duplicates, never empty. Every
/// node gets them in this order, in one script call.
pub(crate) struct KeySet {
    names: Box<[Arc<str>]>,
    /// The keys beside the names, each list made on first use: the
    /// acquire and release scripts name them themselves (`layout.lua`),
    /// so an acquire and its release never pay for them. Each name's
    /// fencing counter (read and raised by the fencing scripts, taken
    /// over by a handoff):
    fences: OnceLock<Box<[String]>>,
    /// each name's waiter queue, then each queue's leases (a handoff):
    queues: OnceLock<Box<[String]>>,
    /// each name's force-release marker (renewals and fencing raises).
    forced: OnceLock<Box<[String]>>,
}

/// The most names one lock may take at once (see [`KeySet::new`]).
pub(crate) const MAX_NAMES: usize = 1024;

impl KeySet {
    /// Checks and orders the names. Rejects an empty list, names in the
    /// reserved `quorumlock:` namespace and more than [`MAX_NAMES`] distinct
    /// names.
    pub(crate) fn new<S: AsRef<str>>(names: &[S]) -> Result<Arc<KeySet>, Error> {
        let mut names: Vec<Arc<str>> = names.iter().map(|n| Arc::from(n.as_ref())).collect();
        if names.is_empty() {
            return Err(Error::InvalidKey {
                key: String::new(),
                reason: "a lock needs at least one name",
            });
        }
        if let Some(bad) = names.iter().find(|n| n.starts_with(RESERVED_PREFIX)) {
            check_name(bad)?;
        }
        names.sort_unstable();
        names.dedup();
        if names.len() > MAX_NAMES {
            return Err(Error::InvalidKey {
                key: format!("{} names", names.len()),
                reason: "at most 1,024 names per lock: each node takes every name in one \
                         script call (about 10 µs of server time per name), which must fit \
                         the node timeout; lock larger sets in parts, in a fixed order",
            });
        }
        Ok(Arc::new(KeySet {
            names: names.into_boxed_slice(),
            fences: OnceLock::new(),
            queues: OnceLock::new(),
            forced: OnceLock::new(),
        }))
    }

    /// The lock names, sorted.
    pub(crate) fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// The first name: the lock's name when it has one.
    pub(crate) fn first(&self) -> &Arc<str> {
        &self.names[0]
    }

    /// The fencing counter key of each name, in the same order.
    pub(crate) fn fences(&self) -> &[String] {
        self.fences
            .get_or_init(|| self.names.iter().map(|n| fence_key(n)).collect())
    }

    /// Each name's force-release marker ([`forced_key`]), in the same order.
    pub(crate) fn forced(&self) -> &[String] {
        self.forced
            .get_or_init(|| self.names.iter().map(|n| forced_key(n)).collect())
    }

    /// Each name's waiter queue, then each queue's leases.
    pub(crate) fn queues(&self) -> &[String] {
        self.queues.get_or_init(|| {
            let queues = self.names.iter().map(|n| queue_key(n));
            queues
                .chain(self.names.iter().map(|n| queue_leases_key(n)))
                .collect()
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

impl fmt::Display for KeySet {
    /// `a` for one name, `a+b+c` for several.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.names.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names.iter()).finish()
    }
}

/// One hold's record on the nodes: the names it covers, the owner token
/// stored under them, and this hold's own id among the owner's holds (the
/// re-entry count on a node is the set of such ids).
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) keys: Arc<KeySet>,
    pub(crate) token: Arc<str>,
    pub(crate) id: Arc<str>,
    /// `"<token> <id>"`: the value of a lock key with this one hold, and
    /// what the acquire and release scripts take (written once, not per
    /// call).
    pub(crate) hold: Arc<str>,
    /// The place in the names' waiter queues of the acquire call that
    /// made this entry, if it waits for release notices.
    pub(crate) ticket: Option<Ticket>,
    /// The nodes a write of this entry was handed to (see [`Reached`]).
    pub(crate) reached: Arc<Reached>,
}

impl Entry {
    /// A fresh entry of `token` on `keys`, for a lock service of `nodes`
    /// nodes: a late rollback of one attempt can never remove another
    /// attempt's hold.
    pub(crate) fn new(keys: Arc<KeySet>, token: Arc<str>, nodes: usize) -> Entry {
        Entry::reaching(keys, token, Arc::new(Reached::new(nodes)))
    }

    /// [`Entry::new`], recording the nodes it reaches in `reached` (which
    /// the attempts of a call that may be granted the name share with its
    /// grant hold).
    pub(crate) fn reaching(keys: Arc<KeySet>, token: Arc<str>, reached: Arc<Reached>) -> Entry {
        let id = format!("{:016x}", rand::random::<u64>());
        Entry {
            keys,
            hold: Arc::from(format!("{token} {id}")),
            token,
            id: Arc::from(id),
            ticket: None,
            reached,
        }
    }

    /// An entry that holds nothing: only its `ticket`'s places in the
    /// waiter queues of `keys` (an acquire call that stops waiting gives
    /// them up with it). Its hold, `" "`, is no lock key's value.
    pub(crate) fn places_only(keys: Arc<KeySet>, ticket: Ticket) -> Entry {
        if let Some(grant) = ticket.grant() {
            // A grant a release made to the call goes with its places.
            return Entry::of_grant(keys, grant, ticket.clone());
        }
        Entry {
            keys,
            token: Arc::from(""),
            id: Arc::from(""),
            hold: Arc::from(" "),
            ticket: Some(ticket),
            reached: Arc::new(Reached::new(0)),
        }
    }

    /// The entry of a call's grant hold (`ticket`'s).
    pub(crate) fn of_grant(keys: Arc<KeySet>, grant: &GrantHold, ticket: Ticket) -> Entry {
        Entry {
            keys,
            token: Arc::clone(&grant.token),
            id: Arc::clone(&grant.id),
            hold: Arc::clone(&grant.hold),
            ticket: Some(ticket),
            reached: Arc::clone(&grant.reached),
        }
    }

    /// The grant hold its ticket also gives back on release, when it is
    /// not this entry's own hold ('' when none: `release.lua`).
    pub(crate) fn other_grant_hold(&self) -> &str {
        match self.ticket.as_ref().and_then(Ticket::grant) {
            Some(grant) if grant.hold != self.hold => &grant.hold,
            _ => "",
        }
    }
}

/// The nodes a write of one entry (an acquire, a renewal or fencing raise
/// that may re-take a key, an extend, a handoff to it) has been handed to
/// the connection of: the nodes that may carry the entry, so the ones its
/// release or rollback must reach however long they take. A node never
/// marked never got anything of the entry that writes, so nothing there
/// needs undoing: a release does not wait for, queue behind or retry on
/// such a node unless it is healthy.
///
/// A mark is set before its call checks its round's cutoff, and a rollback
/// reads the marks after passing the cutoff, both sequentially consistent:
/// a call that goes out after all is always marked (see
/// [`crate::node::Cutoff`]).
#[derive(Debug)]
pub(crate) struct Reached {
    nodes: usize,
    words: Box<[AtomicU64]>,
}

impl Reached {
    pub(crate) fn new(nodes: usize) -> Reached {
        Reached {
            nodes,
            words: (0..nodes.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records that a write of the entry is handed to node `i`.
    pub(crate) fn mark(&self, i: usize) {
        if i < self.nodes {
            self.words[i / 64].fetch_or(1 << (i % 64), Ordering::SeqCst);
        }
    }

    /// Whether a write of the entry was ever handed to node `i`.
    pub(crate) fn has(&self, i: usize) -> bool {
        i < self.nodes && self.words[i / 64].load(Ordering::SeqCst) & (1 << (i % 64)) != 0
    }
}

/// A waiting acquire call's place in the waiter queues of its names
/// (`scripts/queue.lua`): the same on every node, so that every node
/// orders the waiters alike. Not a secret: a release notice names the
/// queue's first waiter by its id.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    /// `<lock service>.<acquire call>`, both random: the waiters of one
    /// lock service take turns among themselves, and the scripts let any
    /// of them take a name one of them is first in line for. A place that
    /// refuses nobody (a waiter of a lock service that is not fair) ends
    /// in [`REFUSES_NOBODY`].
    pub(crate) id: Arc<str>,
    /// When the call began: µs since the Unix epoch by this process's
    /// clock (earlier tickets go first); for a place that refuses nobody,
    /// plus [`NOT_FAIR_AFTER`], so that it queues behind every fair one.
    pub(crate) score: u64,
    /// The hold a release may take the name for, for this call (a call on
    /// one name: `scripts/release.lua`), made by the
    /// first attempt that carries the ticket.
    pub(crate) grant: Option<Arc<GrantSlot>>,
}

impl Ticket {
    /// The call's grant hold, once an attempt made it.
    pub(crate) fn grant(&self) -> Option<&GrantHold> {
        self.grant.as_ref().and_then(|slot| slot.get())
    }
}

/// Where a call's [`GrantHold`] goes once its first attempt that carries
/// the ticket makes it: an acquire that finds the name free (the common
/// case) makes none, and pays no owner token for it.
#[derive(Default)]
pub(crate) struct GrantSlot(OnceLock<GrantHold>);

impl GrantSlot {
    /// The grant hold, if an attempt made it.
    pub(crate) fn get(&self) -> Option<&GrantHold> {
        self.0.get()
    }

    /// The grant hold, made now for owner `token()` if there is none yet.
    pub(crate) fn get_or_make(&self, token: impl FnOnce() -> Arc<str>, nodes: usize) -> &GrantHold {
        self.0.get_or_init(|| GrantHold::new(token(), nodes))
    }
}

impl fmt::Debug for GrantSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0.get(), f)
    }
}

/// The one hold of an acquire call that a release may take its name for
/// while the call waits (a grant, `scripts/release.lua`): the call's owner
/// token, which every attempt of the call shares, and an entry id of its
/// own. No attempt writes it, so no attempt's rollback removes it; the
/// call gives it back when it ends without winning by it (its places'
/// leave), and the guard it wins gives it back on release (`release.lua`,
/// `handoff.lua`).
pub(crate) struct GrantHold {
    pub(crate) token: Arc<str>,
    pub(crate) id: Arc<str>,
    /// `"<token> <id>"`.
    pub(crate) hold: Arc<str>,
    /// The nodes any attempt of the call was handed to: the attempts'
    /// entries share it, so the grant's guard and every leave reach each
    /// node that may hold a grant request.
    pub(crate) reached: Arc<Reached>,
}

impl GrantHold {
    /// A grant hold of owner `token` for a lock service of `nodes` nodes.
    pub(crate) fn new(token: Arc<str>, nodes: usize) -> GrantHold {
        let id = format!("{:016x}", rand::random::<u64>());
        GrantHold {
            hold: Arc::from(format!("{token} {id}")),
            token,
            id: Arc::from(id),
            reached: Arc::new(Reached::new(nodes)),
        }
    }
}

/// The owner token is a secret: only the entry id shows.
impl fmt::Debug for GrantHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrantHold")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The end of the queue id of a place that refuses nobody
/// (`scripts/queue.lua`: `quorumlock_refuses`). A random call id is hex,
/// so no fair place ends in it.
pub(crate) const REFUSES_NOBODY: &str = ".n";

/// What the score of a place that refuses nobody adds to its call's start:
/// about 127 years of µs, so that it sorts after every fair place while a
/// score stays below 2^53, which the nodes' scores (doubles) keep exact.
pub(crate) const NOT_FAIR_AFTER: u64 = 4_000_000_000_000_000;

impl Ticket {
    /// A ticket for an acquire call of lock service `service` beginning
    /// now. `fair`: its places refuse the name to the waiters behind it;
    /// otherwise they only ask for the release notice, and queue behind
    /// every fair place.
    pub(crate) fn now(service: &str, fair: bool) -> Ticket {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let call = rand::random::<u64>();
        if fair {
            Ticket {
                id: Arc::from(format!("{service}.{call:016x}")),
                score: micros,
                grant: None,
            }
        } else {
            Ticket {
                id: Arc::from(format!("{service}.{call:016x}{REFUSES_NOBODY}")),
                score: micros.saturating_add(NOT_FAIR_AFTER),
                grant: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A place that refuses nobody sorts after every fair place, its score
    /// stays exact as the nodes' double, and only its id ends in
    /// [`REFUSES_NOBODY`].
    #[test]
    fn places_that_refuse_nobody_queue_behind_every_fair_place() {
        let fair = Ticket::now("s", true);
        let not_fair = Ticket::now("s", false);
        assert!(!fair.id.ends_with(REFUSES_NOBODY));
        assert!(not_fair.id.ends_with(REFUSES_NOBODY));
        assert!(not_fair.id.starts_with("s."));
        // A fair call begun a century later still goes first.
        let century = 100 * 365 * 24 * 3_600 * 1_000_000_u64;
        assert!(fair.score + century < not_fair.score);
        assert!(not_fair.score < 1 << 53);
        assert_eq!(not_fair.score as f64 as u64, not_fair.score);
    }

    #[test]
    fn at_most_max_names_distinct_names() {
        let names: Vec<String> = (0..MAX_NAMES).map(|i| format!("n{i}")).collect();
        assert!(KeySet::new(&names).is_ok());
        let mut repeated = names.clone();
        repeated.extend(names.iter().cloned());
        assert!(KeySet::new(&repeated).is_ok(), "duplicates do not count");
        let mut more = names;
        more.push("one more".into());
        match KeySet::new(&more) {
            Err(Error::InvalidKey { key, .. }) => assert_eq!(key, "1025 names"),
            other => panic!("expected InvalidKey, got {:?}", other.map(|k| k.len())),
        }
    }

    #[test]
    fn reached_marks_each_node_apart() {
        let reached = Reached::new(130);
        for i in [0, 63, 64, 129] {
            assert!(!reached.has(i));
            reached.mark(i);
            assert!(reached.has(i));
        }
        assert!(!reached.has(1) && !reached.has(128));
        // Out of range: never marked, never a panic.
        reached.mark(130);
        assert!(!reached.has(130));
    }

    #[test]
    fn names_are_sorted_and_deduplicated() {
        let set = KeySet::new(&["b", "a", "c", "a"]).expect("valid");
        let names: Vec<&str> = set.names().iter().map(|n| &**n).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(set.fences()[1], "quorumlock:fence:b");
        assert_eq!(set.to_string(), "a+b+c");
    }

    #[test]
    fn empty_and_reserved_names_are_rejected() {
        let none: [&str; 0] = [];
        assert!(matches!(KeySet::new(&none), Err(Error::InvalidKey { .. })));
        match KeySet::new(&["ok", "quorumlock:fence:x"]) {
            Err(Error::InvalidKey { key, .. }) => assert_eq!(key, "quorumlock:fence:x"),
            other => panic!("expected InvalidKey, got {other:?}"),
        }
        for reserved in ["quorumlock:epoch", "quorumlock:forced:x", "quorumlock:"] {
            match check_name(reserved) {
                Err(Error::InvalidKey { key, .. }) => assert_eq!(key, reserved),
                other => panic!("expected InvalidKey, got {other:?}"),
            }
        }
        assert!(check_name("").is_ok() && check_name("quorumlock").is_ok());
    }

    #[test]
    fn slot_names_are_the_one_reserved_exception() {
        for slot in [
            slot_name(PERMIT_PREFIX, "exports", 3),
            slot_name(RW_PREFIX, "config", 0),
            slot_name(PERMIT_PREFIX, "a:b", 12),
        ] {
            assert!(check_name(&slot).is_ok(), "{slot}");
        }
        for bad in [
            "quorumlock:permit:x",
            "quorumlock:permit:x:",
            "quorumlock:permit:x:1a",
            "quorumlock:rw:quorumlock:epoch:1",
            "quorumlock:permits:x:1",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
