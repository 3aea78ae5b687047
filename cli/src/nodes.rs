//! The nodes and lock settings: from the flags and the environment, else
//! from the TOML file of `--config`; errors name the source and the value.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use quorumlock::{LockConfig, LockConfigBuilder};
use serde::Deserialize;

use crate::args::{NodeArgs, duration, exit};

/// A failure that ends the command, with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    nodes: Vec<String>,
    ttl: Option<String>,
    quarantine: Option<String>,
}

/// What the subcommands need to build a lock.
#[derive(Debug)]
pub struct Settings {
    pub nodes: Vec<String>,
    pub ttl: Option<Duration>,
    pub quarantine: Option<Duration>,
}

impl Settings {
    /// The nodes from `--nodes` (or `QUORUMLOCK_NODES`), else from the
    /// config file; the TTL and quarantine from the file, if given.
    pub fn resolve(args: &NodeArgs) -> Result<Settings, Failure> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => File::default(),
        };
        let from_flags: Vec<String> = args
            .nodes
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        let nodes = if from_flags.is_empty() {
            file.nodes
        } else {
            from_flags
        };
        if nodes.is_empty() {
            return Err(Failure::new(
                exit::USAGE,
                "no nodes: give --nodes URL,URL,… or QUORUMLOCK_NODES, or `nodes` in a --config file",
            ));
        }
        let parse = |field: &str, value: Option<String>| -> Result<Option<Duration>, Failure> {
            value
                .map(|v| duration(&v))
                .transpose()
                .map_err(|e| Failure::new(exit::CONFIG, format!("--config: `{field}`: {e}")))
        };
        Ok(Settings {
            nodes,
            ttl: parse("ttl", file.ttl)?,
            quarantine: parse("quarantine", file.quarantine)?,
        })
    }

    /// A builder with the nodes and the file's settings; `ttl` overrides
    /// the file's.
    pub fn builder(&self, ttl: Option<Duration>) -> LockConfigBuilder {
        let mut builder = LockConfig::builder().nodes(self.nodes.iter().cloned());
        if let Some(ttl) = ttl.or(self.ttl) {
            builder = builder.ttl(ttl);
        }
        if let Some(quarantine) = self.quarantine {
            builder = builder.quarantine(quarantine);
        }
        builder
    }

    /// The configuration, or a failure naming the bad value.
    pub fn config(&self, builder: LockConfigBuilder) -> Result<LockConfig, Failure> {
        builder
            .build()
            .map_err(|e| Failure::new(exit::CONFIG, format!("configuration: {e}")))
    }
}

fn read_file(path: &Path) -> Result<File, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!("--config: cannot read {}: {e}", path.display()),
        )
    })?;
    toml::from_str(&text).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!("--config: {}: {}", path.display(), e.message()),
        )
    })
}
