//! The demo's lock nodes: five local `redis-server` processes (the
//! default), or the five lock nodes of the docker testbed (`--docker`),
//! killed and started the same way. A node the demo restarts comes back
//! empty in both: a local node keeps nothing, and a container's `/data`
//! volume (node1, node2 and node5 keep an AOF) is emptied while it is down.

use quorumlock_testbed::docker::{Container, Deployment};
use quorumlock_testbed::{Testbed, TestbedError};

/// The lock nodes of one demo run.
pub(crate) enum LockNodes {
    /// Local processes on free loopback ports.
    Local(Testbed),
    /// The docker testbed's `node1`…`node5`, with whether each runs (the
    /// demo alone kills and starts them).
    Docker(Vec<(Container, bool)>),
}

impl LockNodes {
    /// The docker deployment's lock nodes.
    pub(crate) fn docker(deployment: &Deployment) -> LockNodes {
        LockNodes::Docker(
            deployment
                .nodes
                .iter()
                .map(|n| (n.container.clone(), true))
                .collect(),
        )
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            LockNodes::Local(testbed) => testbed.len(),
            LockNodes::Docker(nodes) => nodes.len(),
        }
    }

    pub(crate) fn url(&self, i: usize) -> String {
        match self {
            LockNodes::Local(testbed) => testbed.node(i).url(),
            LockNodes::Docker(nodes) => nodes[i].0.url(),
        }
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }

    /// `node 2 (port 41234)`, or `node 2 (container node3)`.
    pub(crate) fn label(&self, i: usize) -> String {
        match self {
            LockNodes::Local(testbed) => format!("node {i} (port {})", testbed.node(i).port()),
            LockNodes::Docker(nodes) => format!("node {i} (container {})", nodes[i].0.service),
        }
    }

    /// How a node is shown in the list at the start.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            LockNodes::Local(_) => "local redis-server processes, no persistence",
            LockNodes::Docker(_) => {
                "containers of testbed/docker-compose.yml; restarted ones come back empty"
            }
        }
    }

    pub(crate) fn is_running(&self, i: usize) -> bool {
        match self {
            LockNodes::Local(testbed) => testbed.node(i).is_running(),
            LockNodes::Docker(nodes) => nodes[i].1,
        }
    }

    /// SIGKILL (`docker kill`).
    pub(crate) fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        match self {
            LockNodes::Local(testbed) => testbed.node_mut(i).kill(),
            LockNodes::Docker(nodes) => {
                nodes[i].0.kill()?;
                nodes[i].1 = false;
                Ok(())
            }
        }
    }

    /// Starts a killed node again, empty; returns once it answers `PING`.
    pub(crate) fn start_empty(&mut self, i: usize) -> Result<(), TestbedError> {
        match self {
            LockNodes::Local(testbed) => testbed.node_mut(i).start(),
            LockNodes::Docker(nodes) => {
                nodes[i].0.wipe_data()?;
                nodes[i].0.start()?;
                nodes[i].1 = true;
                Ok(())
            }
        }
    }
}
