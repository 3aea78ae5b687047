//! The compose project of `testbed/docker-compose.yml`: up, healthy, down,
//! and its containers by service name.
//!
//! Works with the Compose plugin (`docker compose`) and with the older
//! stand-alone `docker-compose`; neither is asked to wait for health
//! (`docker-compose` 1.x has no `--wait`), the testbed polls the health
//! checks itself, bounded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::cli::{self, COMMAND_LIMIT};
use crate::TestbedError;

/// The project name the testbed uses (containers, network and volumes
/// carry it).
pub const PROJECT: &str = "quorumlock-testbed";
/// The variable the compose file takes its image from.
pub const IMAGE_ENV: &str = "QUORUMLOCK_REDIS_IMAGE";
/// The image `testbed/run docker-image` builds from the machine's redis.
pub const LOCAL_IMAGE: &str = "quorumlock-redis:local";
/// How long `up` (creating a dozen containers) may take.
const UP_LIMIT: Duration = Duration::from_secs(300);
/// The label compose puts on each container, naming its service.
const SERVICE_LABEL: &str = "com.docker.compose.service";

/// The compose file shipped with the testbed.
pub fn default_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docker-compose.yml")
}

/// One compose project: a file, a project name and the compose program.
#[derive(Clone, Debug)]
pub struct Compose {
    file: PathBuf,
    project: String,
    program: Vec<String>,
}

/// How one container stands, from `docker inspect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerState {
    /// Its service.
    pub service: String,
    /// `running`, `paused`, `exited`, …
    pub status: String,
    /// `healthy`, `starting`, `unhealthy`, or `none` without a check.
    pub health: String,
}

impl ContainerState {
    /// Running and healthy (or running without a health check).
    pub fn ready(&self) -> bool {
        self.status == "running" && (self.health == "healthy" || self.health == "none")
    }
}

impl Compose {
    /// The project `project` of `file`, driven by `docker compose` when the
    /// plugin is there, else by `docker-compose`.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when neither answers `version`.
    pub fn new(
        file: impl Into<PathBuf>,
        project: impl Into<String>,
    ) -> Result<Compose, TestbedError> {
        let program = if cli::docker(&["compose", "version"]).is_ok() {
            vec!["docker".to_string(), "compose".to_string()]
        } else {
            cli::run("docker-compose", &["version"], COMMAND_LIMIT).map_err(|e| {
                TestbedError::Docker {
                    command: "docker compose version; docker-compose version".into(),
                    status: "neither is installed".into(),
                    stderr: format!("the docker testbed needs Docker Compose: {e}"),
                }
            })?;
            vec!["docker-compose".to_string()]
        };
        Ok(Compose {
            file: file.into(),
            project: project.into(),
            program,
        })
    }

    /// The testbed's own file and project ([`PROJECT`]).
    ///
    /// # Errors
    ///
    /// See [`Compose::new`].
    pub fn testbed() -> Result<Compose, TestbedError> {
        Compose::new(default_file(), PROJECT)
    }

    /// The project name.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The compose command line, shown to people: `docker compose -p … -f …`.
    pub fn shown(&self) -> String {
        format!(
            "{} -p {} -f {}",
            self.program.join(" "),
            self.project,
            self.file.display()
        )
    }

    fn compose(
        &self,
        args: &[&str],
        envs: &[(&str, &str)],
        limit: Duration,
    ) -> Result<String, TestbedError> {
        let file = self.file.display().to_string();
        let mut all: Vec<&str> = self.program[1..].iter().map(String::as_str).collect();
        all.extend(["-p", self.project.as_str(), "-f", file.as_str()]);
        all.extend(args);
        cli::run_with(&self.program[0], &all, envs, limit)
    }

    /// `up -d` with `image` (unless the caller's environment names one),
    /// then waits until every service is healthy.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] naming compose's complaint, or the services
    /// not healthy after `limit`.
    pub fn up(&self, image: &str, limit: Duration) -> Result<(), TestbedError> {
        let envs = match std::env::var(IMAGE_ENV) {
            Ok(_) => Vec::new(),
            Err(_) => vec![(IMAGE_ENV, image)],
        };
        self.compose(&["up", "-d", "--remove-orphans"], &envs, UP_LIMIT)?;
        self.wait_ready(limit)
    }

    /// `down -v --remove-orphans`: every container, the network and the
    /// volumes of the project.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when compose fails.
    pub fn down(&self) -> Result<(), TestbedError> {
        self.compose(
            &["down", "-v", "--remove-orphans", "--timeout", "1"],
            &[],
            UP_LIMIT,
        )
        .map(drop)
    }

    /// The project's containers by service (stopped ones included).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer.
    pub fn containers(&self) -> Result<BTreeMap<String, String>, TestbedError> {
        let filter = format!("label=com.docker.compose.project={}", self.project);
        let format = format!("{{{{.ID}}}} {{{{.Label \"{SERVICE_LABEL}\"}}}}");
        let out = cli::docker(&["ps", "-a", "--filter", &filter, "--format", &format])?;
        Ok(out
            .lines()
            .filter_map(|line| {
                let (id, service) = line.trim().split_once(' ')?;
                Some((service.to_string(), id.to_string()))
            })
            .collect())
    }

    /// Every container's state.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer.
    pub fn states(&self) -> Result<Vec<ContainerState>, TestbedError> {
        let ids: Vec<String> = self.containers()?.into_values().collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let format = format!(
            "{{{{index .Config.Labels \"{SERVICE_LABEL}\"}}}}|{{{{.State.Status}}}}|{{{{if .State.Health}}}}{{{{.State.Health.Status}}}}{{{{else}}}}none{{{{end}}}}"
        );
        let mut args = vec!["inspect", "--format", format.as_str()];
        args.extend(ids.iter().map(String::as_str));
        let out = cli::docker(&args)?;
        Ok(out
            .lines()
            .filter_map(|line| {
                let mut parts = line.trim().splitn(3, '|');
                Some(ContainerState {
                    service: parts.next()?.to_string(),
                    status: parts.next()?.to_string(),
                    health: parts.next()?.to_string(),
                })
            })
            .collect())
    }

    /// Whether every service of `services` has a ready container.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer.
    pub fn all_ready(&self, services: &[&str]) -> Result<bool, TestbedError> {
        let states = self.states()?;
        Ok(services
            .iter()
            .all(|s| states.iter().any(|c| c.service == *s && c.ready())))
    }

    /// Waits (bounded by `limit`) until every container is ready.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] listing the containers that are not.
    pub fn wait_ready(&self, limit: Duration) -> Result<(), TestbedError> {
        let end = Instant::now() + limit;
        loop {
            let states = self.states()?;
            let waiting: Vec<String> = states
                .iter()
                .filter(|c| !c.ready())
                .map(|c| format!("{} {}/{}", c.service, c.status, c.health))
                .collect();
            if !states.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(TestbedError::Docker {
                    command: format!("{} up -d", self.shown()),
                    status: format!("not healthy after {limit:?}"),
                    stderr: if states.is_empty() {
                        "no containers".into()
                    } else {
                        waiting.join(", ")
                    },
                });
            }
            thread::sleep(Duration::from_millis(250));
        }
    }
}
