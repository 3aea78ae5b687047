//! Work a lock service goes on with after its caller stopped waiting: a
//! release or rollback still on its way to a slow node, one sent again
//! until a down node answers, a guard dropped unreleased (DESIGN rule 12).
//!
//! Such work runs in tasks of the caller's Tokio runtime, and a runtime
//! that shuts down cancels them: a short program that returns from `main`
//! right after `release()` would leave its key on a node that answered a
//! little late, until the key's TTL. [`Background`] counts that work so
//! that [`MultiLock::settle`](crate::MultiLock::settle) can wait for it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How much undo work of one lock service is still running.
#[derive(Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// One piece of work counted in a [`Background`] for as long as it lives.
pub(crate) struct Tracked(Arc<Background>);

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Counts one piece of work until the returned [`Tracked`] drops.
    pub(crate) fn track(self: &Arc<Self>) -> Tracked {
        self.running.fetch_add(1, Ordering::AcqRel);
        Tracked(Arc::clone(self))
    }

    /// How many pieces of work are running now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Runs `work` in a task of the current runtime, counted until it ends
    /// (or the runtime drops it). Returns `false`, running nothing, when
    /// there is no runtime.
    pub(crate) fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let tracked = self.track();
        runtime.spawn(async move {
            let _tracked = tracked;
            work.await;
        });
        true
    }

    /// Waits until nothing is running or `within` has passed; returns how
    /// much was still running then.
    pub(crate) async fn settle(&self, within: Duration) -> usize {
        let waited = async {
            loop {
                // Registered before the count is read, so a last piece
                // that ends in between still wakes us.
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.running() == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(within, waited).await;
        self.running()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settle_returns_once_the_last_piece_ends() {
        let background = Arc::new(Background::default());
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        assert!(background.spawn(async move {
            let _ = wait.await;
        }));
        assert_eq!(background.running(), 1);
        assert_eq!(background.settle(Duration::from_millis(1)).await, 1);
        go.send(()).expect("the task waits");
        assert_eq!(background.settle(Duration::from_secs(60)).await, 0);
    }

    #[test]
    fn nothing_runs_without_a_runtime() {
        let background = Arc::new(Background::default());
        assert!(!background.spawn(async {}));
        assert_eq!(background.running(), 0);
    }

    #[tokio::test]
    async fn a_tracked_value_counts_until_it_drops() {
        let background = Arc::new(Background::default());
        let tracked = background.track();
        assert_eq!(background.running(), 1);
        drop(tracked);
        assert_eq!(background.settle(Duration::ZERO).await, 0);
    }
}
