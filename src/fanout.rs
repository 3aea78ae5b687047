//! Send one operation to every node at once and stop listening as soon as the
//! caller has its answer.
//!
//! The per-node futures are polled in place (no task per node): their first
//! poll, which queues each command on its node's connection, happens before
//! [`fan_out`] first yields. When the caller decides, or the shared deadline
//! passes, the futures still in flight are dropped. Commands already queued
//! still run on their node; nothing new is sent for them afterwards.

use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use crate::error::NodeError;

/// How a fan-out ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// `on_reply` said the outcome is decided.
    Decided,
    /// Every node answered without a decision.
    AllAnswered,
    /// The deadline passed; unanswered nodes timed out.
    DeadlinePassed,
}

/// Calls `call(i)` for every node index `i < n` concurrently and hands each
/// result to `on_reply` as it arrives. Returns when `on_reply` returns
/// `true`, when every node answered, or at `deadline`.
pub(crate) async fn fan_out<T, Fut>(
    n: usize,
    deadline: Instant,
    mut call: impl FnMut(usize) -> Fut,
    mut on_reply: impl FnMut(usize, Result<T, NodeError>) -> bool,
) -> End
where
    Fut: Future<Output = Result<T, NodeError>>,
{
    let mut in_flight: FuturesUnordered<_> = (0..n)
        .map(|i| {
            let fut = call(i);
            async move { (i, fut.await) }
        })
        .collect();
    let timer = tokio::time::sleep_until(deadline);
    tokio::pin!(timer);
    loop {
        tokio::select! {
            // Replies first: one that is ready at the deadline still counts.
            biased;
            reply = in_flight.next() => match reply {
                Some((i, result)) => {
                    if on_reply(i, result) {
                        return End::Decided;
                    }
                }
                None => return End::AllAnswered,
            },
            () = &mut timer => return End::DeadlinePassed,
        }
    }
}
