//! Stepping aside: after a release that told a waiter of another process,
//! this lock service leaves the name to that waiter for a moment instead
//! of taking it straight back (see [`super::Wake::step_aside`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::keys::KeySet;

/// Entries kept before the lapsed ones are swept out (a service that
/// releases many distinct names with waiters).
const SWEEP_AT: usize = 64;

/// Names this lock service stays away from, each until its instant.
#[derive(Default)]
pub(super) struct Aside {
    until: Mutex<HashMap<Arc<str>, Instant>>,
}

impl Aside {
    /// Stays away from every name of `keys` for `pause` from now.
    pub(super) fn step_aside(&self, keys: &KeySet, pause: Duration) {
        let now = Instant::now();
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        if until.len() >= SWEEP_AT {
            until.retain(|_, end| *end > now);
        }
        for name in keys.names() {
            until.insert(Arc::clone(name), now + pause);
        }
    }

    /// How long this lock service still stays away from `keys` (the
    /// longest of their names'); `None` when it does not.
    pub(super) fn left(&self, keys: &KeySet) -> Option<Duration> {
        let now = Instant::now();
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        if until.is_empty() {
            return None;
        }
        let mut longest = None;
        for name in keys.names() {
            match until.get(name) {
                Some(end) if *end > now => {
                    longest = longest.max(Some(*end - now));
                }
                Some(_) => {
                    until.remove(name);
                }
                None => {}
            }
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn keys(name: &str) -> Arc<KeySet> {
        KeySet::new(&[name]).expect("a valid name")
    }

    #[test]
    fn a_name_is_left_alone_for_the_pause_and_then_forgotten() {
        let aside = Aside::default();
        assert_eq!(aside.left(&keys("job")), None);
        aside.step_aside(&keys("job"), HOUR);
        let left = aside.left(&keys("job")).expect("stepping aside");
        assert!(
            left <= HOUR && left > HOUR - Duration::from_secs(60),
            "{left:?}"
        );
        assert_eq!(aside.left(&keys("other")), None, "only the released name");

        aside.step_aside(&keys("job"), Duration::ZERO);
        assert_eq!(aside.left(&keys("job")), None, "the pause is over");
        assert!(aside.until.lock().unwrap().is_empty(), "and the entry gone");
    }

    #[test]
    fn lapsed_entries_are_swept_as_names_pile_up() {
        let aside = Aside::default();
        for i in 0..SWEEP_AT {
            aside.step_aside(&keys(&format!("name-{i}")), Duration::ZERO);
        }
        aside.step_aside(&keys("last"), HOUR);
        assert_eq!(aside.until.lock().unwrap().len(), 1);
    }
}
