//! A group of independent local Redis masters.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::thread;

use tempfile::TempDir;

use crate::leftovers::{self, Declared};
use crate::{NodeOptions, RedisNode, TestbedError, redis_server_binary};

/// `n` independent `redis-server` masters on `127.0.0.1`, each in its own
/// subdirectory of one temporary directory.
///
/// Dropping the testbed kills and reaps every server (also while a test
/// panics), then deletes the temporary directory. Before that, unless the
/// test is panicking already, it checks the lock's invariant: no lock key
/// and no waiter entry is left on any running, unpaused node, unless the
/// test declared it ([`Testbed::expect_left`]); a leftover fails the test
/// (see the `leftovers` module docs in the source for what counts).
#[derive(Debug)]
pub struct Testbed {
    nodes: Vec<RedisNode>,
    root: TempDir,
    declared: Mutex<Declared>,
}

impl Testbed {
    /// Starts `n` servers with default options (no persistence).
    ///
    /// # Errors
    ///
    /// See [`Testbed::start_with`].
    pub fn start(n: usize) -> Result<Self, TestbedError> {
        Self::start_with(n, NodeOptions::default())
    }

    /// Starts `n` servers that quorumlock meets with no history: they are
    /// not adopted ([`NodeOptions::skip_adoption`]), so the quarantine
    /// applies to them.
    ///
    /// # Errors
    ///
    /// See [`Testbed::start_with`].
    pub fn start_unadopted(n: usize) -> Result<Self, TestbedError> {
        Self::start_with(
            n,
            NodeOptions {
                skip_adoption: true,
                ..NodeOptions::default()
            },
        )
    }

    /// Starts `n` servers with `options`, using the binary found by
    /// [`redis_server_binary`]. Returns once every server answers `PING`.
    ///
    /// # Errors
    ///
    /// - [`TestbedError::RedisServerNotFound`] if there is no `redis-server`.
    /// - [`TestbedError::StartFailed`] if a server does not come up (the
    ///   others are killed again).
    /// - [`TestbedError::Io`] if the temporary directory cannot be created.
    pub fn start_with(n: usize, options: NodeOptions) -> Result<Self, TestbedError> {
        let binary = redis_server_binary()?;
        Self::start_with_binary(n, options, binary)
    }

    /// Like [`Testbed::start_with`], but with an explicit server binary
    /// instead of the `QUORUMLOCK_REDIS_SERVER`/`PATH` lookup.
    ///
    /// # Errors
    ///
    /// See [`Testbed::start_with`]; a binary that cannot be executed gives
    /// [`TestbedError::Io`].
    pub fn start_with_binary(
        n: usize,
        options: NodeOptions,
        binary: impl Into<PathBuf>,
    ) -> Result<Self, TestbedError> {
        let binary = binary.into();
        let root = tempfile::Builder::new()
            .prefix("quorumlock-testbed-")
            .tempdir()
            .map_err(TestbedError::io("creating the testbed temporary directory"))?;
        let mut nodes = (0..n)
            .map(|i| {
                RedisNode::new(
                    root.path().join(format!("node-{i}")),
                    binary.clone(),
                    options.clone(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Start all nodes concurrently; each one waits for its own PING.
        let results: Vec<Result<(), TestbedError>> = thread::scope(|scope| {
            let handles: Vec<_> = nodes
                .iter_mut()
                .map(|node| scope.spawn(move || node.start()))
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        // On error, `nodes` is dropped here (killing the started servers)
        // before `root` removes the directory.
        results.into_iter().collect::<Result<(), _>>()?;
        Ok(Self {
            nodes,
            root,
            declared: Mutex::default(),
        })
    }

    /// Declares that the test leaves lock `name` (its key or its waiter
    /// queue) on some node on purpose: a holder that crashed, a key planted
    /// by hand, a node restarted from a file that still has it. The check
    /// when the testbed is dropped does not count it.
    pub fn expect_left(&self, name: impl Into<String>) {
        self.declared().names.push(name.into());
    }

    /// Turns the leftover check off for this testbed: for programs that
    /// are not tests (the demo, benches, the chaos suite's own nodes),
    /// which judge what they leave themselves.
    pub fn skip_leftover_check(&self) {
        self.declared().off = true;
    }

    fn declared(&self) -> std::sync::MutexGuard<'_, Declared> {
        self.declared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the testbed has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The URL (`redis://127.0.0.1:PORT`) of every node, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }

    /// Node `i`.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()` (this is a test helper).
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// Node `i`, mutably (for kill/start/restart/pause/resume).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()` (this is a test helper).
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// All nodes.
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// All nodes, mutably.
    pub fn nodes_mut(&mut self) -> &mut [RedisNode] {
        &mut self.nodes
    }

    /// The temporary directory holding the node directories.
    pub fn root(&self) -> &Path {
        self.root.path()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if !thread::panicking() {
            let declared = std::mem::take(&mut *self.declared());
            // A failed check panics after the servers are killed (the
            // panic unwinds through the node drops).
            let nodes = &self.nodes;
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                leftovers::check(nodes, &declared)
            })) {
                self.nodes.clear();
                std::panic::resume_unwind(panic);
            }
        }
        // Kill and reap every server before the TempDir field removes the
        // directory they write into.
        self.nodes.clear();
    }
}
