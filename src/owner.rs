//! [`Owner`]: who holds a lock, made explicit. Async Rust has no thread
//! identity to key re-entry on, so a lock library must be told who is
//! asking: holds taken with the same owner re-enter, holds of different
//! owners exclude each other.

use std::fmt;
use std::sync::Arc;

use crate::error::Error;

/// The identity of a lock holder: the owner token stored on the nodes
/// (a UUID v4 from the OS's random source: 122 random bits, as 32
/// lowercase hex digits).
///
/// Every plain [`acquire`](crate::MultiLock::acquire) makes a fresh owner,
/// so two acquires never re-enter each other. To re-enter, either take the
/// lock again through the hold you have
/// ([`HeldLock::reenter`](crate::HeldLock::reenter), also on a guard), or
/// pass the owner along, to other tasks or, as its [`token`](Self::token),
/// to other processes, and acquire with
/// [`MultiLock::acquire_as`](crate::MultiLock::acquire_as).
///
/// The token is the authority to re-enter a held lock: hand it only to code
/// that acts for the same holder.
///
/// ```
/// use quorumlock::Owner;
///
/// let owner = Owner::new();
/// // Sent to another process as text and rebuilt there.
/// let same = Owner::from_token(owner.token())?;
/// assert_eq!(owner, same);
/// assert!(Owner::from_token("worker-1").is_err(), "too guessable to be an owner");
/// # Ok::<(), quorumlock::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    token: Arc<str>,
}

impl Owner {
    /// A new owner: a UUID v4 (122 random bits from the OS).
    ///
    /// ```
    /// let owner = quorumlock::Owner::new();
    /// assert_ne!(owner, quorumlock::Owner::new(), "every owner is new");
    /// ```
    pub fn new() -> Owner {
        let mut buf = uuid::Uuid::encode_buffer();
        Owner {
            token: Arc::from(&*uuid::Uuid::new_v4().simple().encode_lower(&mut buf)),
        }
    }

    /// The owner whose [`token`](Self::token) this is, e.g. received from
    /// another process. Accepts exactly what `token` gives: 32 lowercase
    /// hex digits. Anything else is [`Error::InvalidOwner`]: a token chosen
    /// by hand could be shared by accident, and two holders sharing a token
    /// would not exclude each other.
    ///
    /// ```
    /// use quorumlock::Owner;
    /// let owner = Owner::new();
    /// assert_eq!(Owner::from_token(owner.token())?, owner);
    /// assert!(Owner::from_token("not-a-token").is_err());
    /// # Ok::<(), quorumlock::Error>(())
    /// ```
    pub fn from_token(token: &str) -> Result<Owner, Error> {
        let hex = token.len() == 32
            && token
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex {
            return Err(Error::InvalidOwner {
                token: token.to_string(),
                reason: "expected the 32 lowercase hex digits of `Owner::token`",
            });
        }
        Ok(Owner {
            token: Arc::from(token),
        })
    }

    /// The owner token as stored on the nodes.
    ///
    /// ```
    /// let owner = quorumlock::Owner::new();
    /// assert_eq!(owner.token().len(), 32);
    /// assert!(owner.token().chars().all(|c| c.is_ascii_hexdigit()));
    /// ```
    pub fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn shared_token(&self) -> &Arc<str> {
        &self.token
    }

    pub(crate) fn from_shared(token: Arc<str>) -> Owner {
        Owner { token }
    }
}

impl Default for Owner {
    fn default() -> Self {
        Owner::new()
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&self.token).finish()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_named() {
        let owner = Owner::new();
        assert_eq!(owner.token().len(), 32);
        assert_eq!(Owner::from_token(owner.token()).ok(), Some(owner.clone()));
        assert_ne!(Owner::new(), owner);
        for bad in [
            "",
            "worker-1",
            "0123456789ABCDEF0123456789abcdef",
            &owner.token()[1..],
        ] {
            match Owner::from_token(bad) {
                Err(Error::InvalidOwner { token, .. }) => assert_eq!(token, bad),
                other => panic!("{bad:?} accepted: {other:?}"),
            }
        }
    }
}
