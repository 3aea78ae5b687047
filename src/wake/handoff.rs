//! A sleeping waiter's offer to take the name from a release of this
//! lock service in the same script call.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Handoff, HandoffEvent, Wake, Woken};
use crate::keys::Entry;

/// A sleeping waiter's standing offer of a handoff, and where its answers
/// arrive.
pub(super) struct Offer {
    pub(super) name: Arc<str>,
    pub(super) entry: Entry,
    pub(super) answers: mpsc::UnboundedReceiver<HandoffEvent>,
}

impl Offer {
    /// Offers the name of `entry` to a release by this lock service.
    pub(super) fn make(wake: &Wake, entry: Entry) -> Offer {
        let (events, answers) = mpsc::unbounded_channel();
        let name = Arc::clone(entry.keys.first());
        wake.offer(
            &name,
            Handoff {
                entry: entry.clone(),
                events,
            },
        );
        Offer {
            name,
            entry,
            answers,
        }
    }

    /// The wait's end once a release took the offer.
    pub(super) fn handed_over(self, first: Option<HandoffEvent>) -> Woken {
        Woken::HandedOver {
            entry: self.entry,
            first,
            rest: self.answers,
        }
    }
}
