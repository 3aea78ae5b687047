//! The slots of a semaphore and of a read-write lock, named by the library
//! (`MultiSemaphore::slot_name`, `MultiRwLock::slot_name`): slot `i` of
//! the semaphore `name` is the ordinary lock name
//! `quorumlock:permit:<name>:<i>`, reader slot `i` of the read-write lock
//! `name` is `quorumlock:rw:<name>:<i>`. Each is a lock key of its own, in
//! either form `lock_key` reads, with its fencing counter
//! `quorumlock:fence:<slot name>`.

use quorumlock::{MultiRwLock, MultiSemaphore};

/// Which primitive a slot belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Primitive {
    /// `run --permits K`: `quorumlock:permit:<name>:<i>`, i < K.
    Semaphore,
    /// `run --shared` / `--exclusive`: `quorumlock:rw:<name>:<i>`, i < 32.
    ReadWrite,
}

impl Primitive {
    pub const ALL: [Primitive; 2] = [Primitive::Semaphore, Primitive::ReadWrite];

    fn prefix(self) -> &'static str {
        match self {
            Primitive::Semaphore => "quorumlock:permit:",
            Primitive::ReadWrite => "quorumlock:rw:",
        }
    }

    /// How many slots a name can have: a semaphore's largest K, or the
    /// read-write lock's fixed number of reader slots.
    pub fn slots(self) -> u32 {
        match self {
            Primitive::Semaphore => MultiSemaphore::MAX_PERMITS,
            Primitive::ReadWrite => MultiRwLock::READER_SLOTS,
        }
    }

    /// Slot `slot` of `name`: its lock name, which is its lock key, as the
    /// library names it.
    pub fn key(self, name: &str, slot: u32) -> String {
        match self {
            Primitive::Semaphore => MultiSemaphore::slot_name(name, slot),
            Primitive::ReadWrite => MultiRwLock::slot_name(name, slot),
        }
    }

    /// The keys of slots `0..count` of `name`.
    pub fn keys(self, name: &str, count: u32) -> Vec<String> {
        (0..count).map(|slot| self.key(name, slot)).collect()
    }
}

/// The primitive, user's name and slot of a slot key; `None` for any
/// other key. The name may hold `:`; the slot is the digits after the
/// last one.
pub fn parse(key: &str) -> Option<(Primitive, &str, u32)> {
    Primitive::ALL.into_iter().find_map(|primitive| {
        let rest = key.strip_prefix(primitive.prefix())?;
        let (name, slot) = rest.rsplit_once(':')?;
        if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let slot: u32 = slot.parse().ok()?;
        (slot < primitive.slots()).then_some((primitive, name, slot))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_read_back() {
        for (primitive, name, slot) in [
            (Primitive::Semaphore, "exports", 3),
            (Primitive::ReadWrite, "a:b:7", 31),
            (Primitive::Semaphore, "", 1023),
        ] {
            assert_eq!(
                parse(&primitive.key(name, slot)),
                Some((primitive, name, slot))
            );
        }
        for other in [
            "exports",
            "quorumlock:permit:x",
            "quorumlock:permit:x:",
            "quorumlock:permit:x:1a",
            "quorumlock:permit:x:1024",
            "quorumlock:rw:x:32",
            "quorumlock:fence:quorumlock:rw:x:0",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }
}
