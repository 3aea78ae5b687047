//! One server, one vote: which configured nodes turned out to reach the
//! same Redis server.
//!
//! Comparing URLs catches only the same spelling. `localhost` next to
//! `127.0.0.1`, `127.1`, `[::1]`, a unix socket or a proxy of the same
//! server, and `/0` next to `/1` (two databases of one server: they crash,
//! restart and fail over together) all reach one server through URLs that
//! differ. So every new connection reads its server's `run_id` (from
//! `INFO server`, which it reads anyway for the epoch check) before it
//! votes, and records it here. The first node to reach a server votes for
//! it; every other node that reaches the same server casts no vote
//! ([`NodeErrorKind::SameServer`](crate::NodeErrorKind::SameServer) names
//! the node that votes for it), though it still takes writes like any node.

use std::sync::{Arc, Mutex, PoisonError};

/// The servers the nodes of one lock service reach, by node index.
pub(crate) struct ServerIds {
    nodes: Mutex<Vec<Seen>>,
}

#[derive(Clone, Default)]
struct Seen {
    /// The `run_id` of the server the node's current connection reaches.
    run_id: Option<String>,
    name: Option<Arc<str>>,
    /// The node that votes for that server, when it is another one.
    same_as: Option<usize>,
}

impl ServerIds {
    /// Nothing known yet about `n` nodes.
    pub(crate) fn new(n: usize) -> Arc<ServerIds> {
        Arc::new(ServerIds {
            nodes: Mutex::new(vec![Seen::default(); n]),
        })
    }

    /// Records that node `i` (shown as `name`) now reaches the server
    /// `run_id`. Returns the name of the node that already votes for that
    /// server, if another one does: then `i` casts no vote.
    pub(crate) fn identify(&self, i: usize, name: &Arc<str>, run_id: &str) -> Option<Arc<str>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes[i].run_id = Some(run_id.to_owned());
        nodes[i].name = Some(Arc::clone(name));
        // The first node that reached this server keeps its vote: a node
        // never loses its vote to a later one (its votes may be in a round
        // that is still counting).
        let voter = (0..nodes.len()).find(|&j| {
            j != i && nodes[j].same_as.is_none() && nodes[j].run_id.as_deref() == Some(run_id)
        });
        nodes[i].same_as = voter;
        // Nodes refused as the same server as `i` whose server `i` no
        // longer reaches (it moved: a restart gives a new run_id) are
        // judged again when they reconnect; until then they vote for their
        // own server, which no other node reaches now.
        for k in 0..nodes.len() {
            if nodes[k].same_as == Some(i) && nodes[k].run_id != nodes[i].run_id {
                nodes[k].same_as = None;
            }
        }
        voter.and_then(|j| nodes[j].name.clone())
    }

    /// The node that votes for node `i`'s server, if not `i` itself.
    pub(crate) fn same_as(&self, i: usize) -> Option<Arc<str>> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let j = nodes.get(i)?.same_as?;
        nodes[j].name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn the_first_node_to_reach_a_server_votes_for_it() {
        let ids = ServerIds::new(3);
        let (a, b, c) = (name("a"), name("b"), name("c"));
        assert_eq!(ids.identify(1, &b, "s1"), None);
        assert_eq!(ids.identify(0, &a, "s1").as_deref(), Some("b"));
        assert_eq!(ids.identify(2, &c, "s2"), None);
        assert_eq!(ids.same_as(0).as_deref(), Some("b"));
        assert_eq!(ids.same_as(1), None);
        assert_eq!(ids.same_as(2), None);
        // Reconnecting to the same server changes nothing.
        assert_eq!(ids.identify(1, &b, "s1"), None);
        assert_eq!(ids.same_as(0).as_deref(), Some("b"));
    }

    #[test]
    fn a_restart_is_judged_again_at_the_next_connection() {
        let ids = ServerIds::new(2);
        let (a, b) = (name("a"), name("b"));
        ids.identify(0, &a, "s1");
        ids.identify(1, &b, "s1");
        assert_eq!(ids.same_as(1).as_deref(), Some("a"));
        // The server restarts (new run_id); node 0 reconnects first.
        assert_eq!(ids.identify(0, &a, "s2"), None);
        assert_eq!(ids.same_as(1), None, "its old server has no other node");
        // Node 1 reconnects: the same server as node 0 again.
        assert_eq!(ids.identify(1, &b, "s2").as_deref(), Some("a"));
        assert_eq!(ids.same_as(0), None);
    }
}
