//! The nodes and lock settings: from the flags and the environment, else
//! from the TOML file of `--config`; errors name the source and the value,
//! and exit with the code of that source (64 for flags and
//! `QUORUMLOCK_NODES`, 78 for the file).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quorumlock::redis::{Client, IntoConnectionInfo, TlsCertificates};
use quorumlock::{ConfigError, LockConfig, LockConfigBuilder};
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

/// A duration in the `--config` file: `"30s"`, `"30"` or `30`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileDuration {
    Text(String),
    Seconds(f64),
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    nodes: Vec<String>,
    ttl: Option<FileDuration>,
    quarantine: Option<FileDuration>,
    node_timeout: Option<FileDuration>,
    /// A PEM file of the CA that signed the `rediss://` nodes'
    /// certificates (relative to the config file's directory).
    tls_ca: Option<PathBuf>,
}

/// Which settings were flags on the command line (not the environment):
/// a bad one is the user's, and a password there shows in `ps`.
#[derive(Clone, Copy, Debug)]
pub struct CommandLine {
    pub nodes: bool,
    pub node_timeout: bool,
}

/// Where a setting came from: a bad value exits with that source's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A flag on the command line (`--nodes` there is visible in the
    /// process list).
    CommandLine,
    /// `QUORUMLOCK_NODES`.
    Environment,
    /// The `--config` file.
    File,
}

impl Source {
    fn exit_code(self) -> u8 {
        match self {
            Source::CommandLine | Source::Environment => exit::USAGE,
            Source::File => exit::CONFIG,
        }
    }
}

/// What the subcommands need to build a lock.
#[derive(Debug)]
pub struct Settings {
    pub nodes: Vec<String>,
    pub nodes_from: Source,
    pub ttl: Option<Duration>,
    pub quarantine: Option<Duration>,
    /// The node timeout and where it came from (`--node-timeout` or
    /// `QUORUMLOCK_NODE_TIMEOUT` before the file's `node_timeout`).
    pub node_timeout: Option<(Duration, Source)>,
    /// The CA the `rediss://` nodes are checked against (PEM), instead of
    /// the webpki roots.
    tls_ca: Option<Vec<u8>>,
}

impl Settings {
    /// The nodes from `--nodes` (or `QUORUMLOCK_NODES`), else from the
    /// config file; the TTL and quarantine from the file, if given.
    /// `from_command_line`: whether `--nodes` (or `--node-timeout`) was on
    /// the command line rather than in the environment.
    pub fn resolve(args: &NodeArgs, from_command_line: CommandLine) -> Result<Settings, Failure> {
        let mut file = match &args.config {
            Some(path) => read_file(path)?,
            None => File::default(),
        };
        let tls_ca = match (&args.tls_ca, file.tls_ca.take(), &args.config) {
            (Some(flag), _, _) => Some(read_ca(flag, Source::CommandLine)?),
            (None, Some(in_file), Some(config)) => {
                let dir = config.parent().unwrap_or(Path::new("."));
                Some(read_ca(&dir.join(in_file), Source::File)?)
            }
            _ => None,
        };
        let from_flags: Vec<String> = args
            .nodes
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        let flag_source = |on_command_line: bool| {
            if on_command_line {
                Source::CommandLine
            } else {
                Source::Environment
            }
        };
        let (nodes, nodes_from) = if !from_flags.is_empty() {
            (from_flags, flag_source(from_command_line.nodes))
        } else {
            (file.nodes, Source::File)
        };
        if nodes.is_empty() {
            return Err(Failure::new(
                exit::USAGE,
                "no nodes: give --nodes URL,URL,… or QUORUMLOCK_NODES, or `nodes` in a --config file",
            ));
        }
        let parse =
            |field: &str, value: Option<FileDuration>| -> Result<Option<Duration>, Failure> {
                let parsed = match value {
                    None => return Ok(None),
                    Some(FileDuration::Text(text)) => duration(&text),
                    Some(FileDuration::Seconds(secs)) => Duration::try_from_secs_f64(secs)
                        .map_err(|_| format!("invalid duration {secs}: not a number of seconds")),
                };
                parsed
                    .map(Some)
                    .map_err(|e| Failure::new(exit::CONFIG, format!("--config: `{field}`: {e}")))
            };
        Ok(Settings {
            nodes,
            nodes_from,
            ttl: parse("ttl", file.ttl)?,
            quarantine: parse("quarantine", file.quarantine)?,
            node_timeout: match args.node_timeout {
                Some(flag) => Some((flag, flag_source(from_command_line.node_timeout))),
                None => parse("node_timeout", file.node_timeout)?.map(|t| (t, Source::File)),
            },
            tls_ca,
        })
    }

    /// A client for `url`: with the `--tls-ca` CA for a `rediss://` node.
    pub fn client(&self, url: &str) -> Result<Client, String> {
        match &self.tls_ca {
            Some(ca) if url.starts_with("rediss://") => {
                let info = url.into_connection_info().map_err(|e| e.to_string())?;
                let certificates = TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                };
                Client::build_with_tls(info, certificates).map_err(|e| e.to_string())
            }
            _ => Client::open(url).map_err(|e| e.to_string()),
        }
    }

    /// The nodes as shown: each URL with its password replaced.
    pub fn shown_urls(&self) -> Result<Vec<String>, Failure> {
        let builder = Builder {
            inner: LockConfig::builder().nodes(self.nodes.iter().cloned()),
            nodes_from: self.nodes_from,
            ttl_from: Source::File,
            timeout_from: Source::File,
        };
        Ok(builder.build()?.node_urls().map(str::to_owned).collect())
    }

    /// A builder with the nodes and the file's settings; `ttl` (a flag)
    /// overrides the file's.
    pub fn builder(&self, ttl: Option<Duration>) -> Result<Builder, Failure> {
        // Bad URLs are reported here, each shown without its password.
        let shown = self.shown_urls()?;
        let mut inner = LockConfig::builder();
        for (url, shown) in self.nodes.iter().zip(&shown) {
            inner = match &self.tls_ca {
                // A client with the CA: what a URL cannot say.
                Some(_) if url.starts_with("rediss://") => {
                    let client = self.client(url).map_err(|e| {
                        Failure::new(
                            self.nodes_from.exit_code(),
                            format!("configuration: `nodes`: {shown}: {e}"),
                        )
                    })?;
                    inner.node_client(client)
                }
                _ => inner.node(url.clone()),
            };
        }
        let ttl_from = if ttl.is_some() {
            Source::CommandLine
        } else {
            Source::File
        };
        if let Some(ttl) = ttl.or(self.ttl) {
            inner = inner.ttl(ttl);
        }
        if let Some(quarantine) = self.quarantine {
            inner = inner.quarantine(quarantine);
        }
        let mut timeout_from = ttl_from;
        if let Some((node_timeout, from)) = self.node_timeout {
            inner = inner.node_timeout(node_timeout);
            timeout_from = from;
        }
        Ok(Builder {
            inner,
            nodes_from: self.nodes_from,
            ttl_from,
            timeout_from,
        })
    }

    /// The configuration with the nodes and the file's settings.
    pub fn config(&self) -> Result<LockConfig, Failure> {
        self.builder(None)?.build()
    }
}

/// A lock configuration under construction, knowing where its nodes and
/// TTL came from.
pub struct Builder {
    inner: LockConfigBuilder,
    nodes_from: Source,
    ttl_from: Source,
    timeout_from: Source,
}

impl Builder {
    pub fn map(self, f: impl FnOnce(LockConfigBuilder) -> LockConfigBuilder) -> Builder {
        Builder {
            inner: f(self.inner),
            ..self
        }
    }

    /// The configuration, or a failure naming the bad value, with the exit
    /// code of the value's source.
    pub fn build(self) -> Result<LockConfig, Failure> {
        self.inner.build().map_err(|e| {
            let source = match &e {
                ConfigError::InvalidNodeUrl { .. }
                | ConfigError::DuplicateNode { .. }
                | ConfigError::TlsNotEnabled { .. }
                | ConfigError::NoSentinels { .. }
                | ConfigError::NoNodes => Some(self.nodes_from),
                ConfigError::NodeTimeoutOutOfRange { .. } => Some(self.timeout_from),
                ConfigError::TtlOutOfRange { .. }
                | ConfigError::NoValidityLeft { .. }
                | ConfigError::LossMarginOutOfRange { .. }
                | ConfigError::RenewIntervalOutOfRange { .. } => Some(self.ttl_from),
                ConfigError::QuarantineOutOfRange { .. } => Some(Source::File),
                _ => None,
            };
            let code = source.map_or(exit::CONFIG, Source::exit_code);
            let prefix = if source == Some(Source::File) {
                "--config: "
            } else {
                ""
            };
            Failure::new(code, format!("{prefix}configuration: {e}"))
        })
    }
}

/// A warning when `--nodes` on the command line carries a password: every
/// user of the host can read it (`ps`, `/proc/PID/cmdline`).
pub fn warn_if_password_in_argv(settings: &Settings) {
    if settings.nodes_from != Source::CommandLine {
        return;
    }
    // The library shows each URL with its password replaced: a URL that
    // changes when shown carries one.
    let Ok(shown) = settings.shown_urls() else {
        return; // the command reports the bad value itself
    };
    let has_password = shown
        .iter()
        .zip(&settings.nodes)
        .any(|(shown, given)| shown != given);
    if has_password {
        eprintln!(
            "quorumlock: warning: --nodes carries a password, which every user of this host \
             can read in the process list; set QUORUMLOCK_NODES or use a --config file only \
             you can read instead"
        );
    }
}

/// Reads the `--tls-ca` PEM file.
fn read_ca(path: &Path, from: Source) -> Result<Vec<u8>, Failure> {
    let what = match from {
        Source::File => "--config: `tls_ca`",
        _ => "--tls-ca",
    };
    let pem = std::fs::read(path).map_err(|e| {
        Failure::new(
            from.exit_code(),
            format!("{what}: cannot read {}: {e}", path.display()),
        )
    })?;
    if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(Failure::new(
            from.exit_code(),
            format!("{what}: {} holds no PEM certificate", path.display()),
        ));
    }
    Ok(pem)
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
