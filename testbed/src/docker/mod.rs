//! The docker testbed: `testbed/docker-compose.yml` as a deployment the
//! demo and the chaos suite run on. Five independent lock nodes, a
//! Sentinel-managed group and a resource server, each container with its
//! own address on a private network.
//!
//! - [`compose`]: the compose project (up, healthy, down, containers).
//! - [`container`]: one container and its faults (kill, start, pause,
//!   disconnect, a wiped volume).
//! - [`netns`]: packet drops inside a container's network namespace.
//! - [`group`]: the Sentinel group and its failover.
//!
//! The clients of the testbed reach each container at its own address
//! (on Linux the host routes to a bridge network), so a partition is real:
//! packets go nowhere. [`Deployment::open`] checks that every address is
//! on the deployment's own bridge before anything connects.
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock_testbed::docker::{Compose, Deployment, LOCAL_IMAGE};
//!
//! let compose = Compose::testbed()?;
//! let deployment = Deployment::up(compose, LOCAL_IMAGE, Duration::from_secs(120))?;
//! let node = &deployment.nodes[2];
//! node.container.kill()?;
//! node.container.start()?; // back empty: node3 keeps nothing
//! deployment.down()?; // only if `up` started it
//! # Ok::<(), quorumlock_testbed::TestbedError>(())
//! ```

use std::net::Ipv4Addr;
use std::time::Duration;

mod cli;
pub mod compose;
pub mod container;
pub mod group;
pub mod netns;

pub use compose::{Compose, IMAGE_ENV, LOCAL_IMAGE, PROJECT};
pub use container::Container;
pub use group::Group;
pub use netns::{Drops, Rule};

use crate::{Persistence, TestbedError};

/// The lock nodes' services, in lock-node order.
pub const NODE_SERVICES: [&str; 5] = ["node1", "node2", "node3", "node4", "node5"];
/// The group's two servers.
pub const GROUP_SERVICES: [&str; 2] = ["group-master", "group-replica"];
/// The sentinels.
pub const SENTINEL_SERVICES: [&str; 3] = ["sentinel1", "sentinel2", "sentinel3"];
/// The resource server.
pub const RESOURCE_SERVICE: &str = "resource";

/// One independent lock node: its container and how it persists.
#[derive(Clone, Debug)]
pub struct LockNode {
    /// The container.
    pub container: Container,
    /// `AofAlways` or `None`, read from the running server.
    pub persistence: Persistence,
}

/// The running compose deployment.
#[derive(Debug)]
pub struct Deployment {
    compose: Compose,
    /// The independent lock nodes (`node1`…`node5`).
    pub nodes: Vec<LockNode>,
    /// The Sentinel group.
    pub group: Group,
    /// The resource server.
    pub resource: Container,
    /// Whether [`Deployment::up`] started it (then [`Deployment::down`]
    /// takes it down).
    started_here: bool,
}

impl Deployment {
    /// The deployment as it runs, left as it is: uses it when every
    /// service is ready, else brings it up with `image` (unless
    /// `QUORUMLOCK_REDIS_IMAGE` names another) and waits up to `limit`
    /// for the health checks.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] from compose or the health checks, and
    /// those of [`Deployment::open`].
    pub fn up(compose: Compose, image: &str, limit: Duration) -> Result<Deployment, TestbedError> {
        let services: Vec<&str> = all_services().collect();
        let started_here = !compose.all_ready(&services)?;
        if started_here {
            compose.up(image, limit)?;
        }
        let mut deployment = Deployment::open(compose)?;
        deployment.started_here = started_here;
        Ok(deployment)
    }

    /// The deployment as it runs now: its containers, addresses and the
    /// lock nodes' persistence. Checks that every address is on the
    /// deployment's own bridge.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] for a missing container or an address off
    /// the bridge; [`TestbedError::Redis`] when a node does not answer.
    pub fn open(compose: Compose) -> Result<Deployment, TestbedError> {
        let ids = compose.containers()?;
        let find = |service: &str, port: u16| -> Result<Container, TestbedError> {
            let id = ids.get(service).ok_or_else(|| TestbedError::Docker {
                command: format!("{} ps", compose.shown()),
                status: "not deployed".into(),
                stderr: format!("no container for service {service}"),
            })?;
            Container::inspect(service, id, port)
        };
        let nodes = NODE_SERVICES
            .iter()
            .map(|s| {
                let container = find(s, 6379)?;
                let persistence = persistence(&container)?;
                Ok(LockNode {
                    container,
                    persistence,
                })
            })
            .collect::<Result<Vec<_>, TestbedError>>()?;
        let group = Group {
            servers: [
                find(GROUP_SERVICES[0], 6379)?,
                find(GROUP_SERVICES[1], 6379)?,
            ],
            sentinels: SENTINEL_SERVICES
                .iter()
                .map(|s| find(s, 26379))
                .collect::<Result<_, _>>()?,
        };
        let resource = find(RESOURCE_SERVICE, 6379)?;
        let deployment = Deployment {
            compose,
            nodes,
            group,
            resource,
            started_here: false,
        };
        deployment.check_bridge()?;
        Ok(deployment)
    }

    /// The compose project.
    pub fn compose(&self) -> &Compose {
        &self.compose
    }

    /// Whether [`Deployment::up`] started it.
    pub fn started_here(&self) -> bool {
        self.started_here
    }

    /// Every container.
    pub fn containers(&self) -> impl Iterator<Item = &Container> {
        self.nodes
            .iter()
            .map(|n| &n.container)
            .chain(&self.group.servers)
            .chain(&self.group.sentinels)
            .chain(std::iter::once(&self.resource))
    }

    /// Takes the deployment down if [`Deployment::up`] started it; leaves
    /// a deployment someone else started running.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] from compose.
    pub fn down(self) -> Result<(), TestbedError> {
        if self.started_here {
            self.compose.down()?;
        }
        Ok(())
    }

    /// Every address must be on a bridge of this host that the network's
    /// subnet names: the testbed's clients send traffic to these addresses
    /// only while the deployment's own bridge carries them.
    fn check_bridge(&self) -> Result<(), TestbedError> {
        let network = &self.resource.network;
        let format = "{{index .Options \"com.docker.network.bridge.name\"}}|{{range .IPAM.Config}}{{.Subnet}}{{end}}";
        let out = cli::docker(&["network", "inspect", "--format", format, network])?;
        let (bridge, subnet) = out.trim().split_once('|').unwrap_or_default();
        let off = |why: String| TestbedError::Docker {
            command: format!("docker network inspect {network}"),
            status: "not the testbed's bridge".into(),
            stderr: why,
        };
        let (base, bits) = parse_subnet(subnet).ok_or_else(|| off(format!("subnet {subnet:?}")))?;
        if bridge.is_empty() || !std::path::Path::new("/sys/class/net").join(bridge).exists() {
            return Err(off(format!(
                "bridge {bridge:?} is not an interface of this host (the docker testbed needs a \
                 local Linux engine, whose host routes to the containers' addresses)"
            )));
        }
        for c in self.containers() {
            if c.network != *network || !in_subnet(c.ip, base, bits) {
                return Err(off(format!("{} at {} on {}", c.service, c.ip, c.network)));
            }
        }
        Ok(())
    }
}

/// Every service of the compose file.
pub fn all_services() -> impl Iterator<Item = &'static str> {
    NODE_SERVICES
        .into_iter()
        .chain(GROUP_SERVICES)
        .chain(SENTINEL_SERVICES)
        .chain(std::iter::once(RESOURCE_SERVICE))
}

/// How a running node persists: an AOF with `appendfsync always`, or
/// nothing (anything else is neither, and named).
fn persistence(container: &Container) -> Result<Persistence, TestbedError> {
    let config: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("append*")
        .query(&mut container.connection()?)?;
    let value = |name: &str| -> Option<&str> {
        let at = config.iter().position(|s| s == name)?;
        config.get(at + 1).map(String::as_str)
    };
    match (value("appendonly"), value("appendfsync")) {
        (Some("yes"), Some("always")) => Ok(Persistence::AofAlways),
        (Some("no"), _) => Ok(Persistence::None),
        (aof, fsync) => Err(TestbedError::Docker {
            command: format!("CONFIG GET append* on {}", container.service),
            status: "neither an AOF with appendfsync always nor no persistence".into(),
            stderr: format!("appendonly {aof:?}, appendfsync {fsync:?}"),
        }),
    }
}

fn parse_subnet(subnet: &str) -> Option<(Ipv4Addr, u32)> {
    let (base, bits) = subnet.split_once('/')?;
    let bits: u32 = bits.parse().ok()?;
    (bits <= 32).then_some(())?;
    Some((base.parse().ok()?, bits))
}

fn in_subnet(ip: Ipv4Addr, base: Ipv4Addr, bits: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    u32::from(ip) & mask == u32::from(base) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_checked_against_the_subnet() {
        let (base, bits) = parse_subnet("10.231.31.0/24").unwrap();
        assert!(in_subnet(Ipv4Addr::new(10, 231, 31, 13), base, bits));
        assert!(!in_subnet(Ipv4Addr::new(10, 231, 32, 13), base, bits));
        assert!(parse_subnet("10.0.0.0/33").is_none());
        assert!(parse_subnet("nonsense").is_none());
        let (base, bits) = parse_subnet("0.0.0.0/0").unwrap();
        assert!(in_subnet(Ipv4Addr::new(1, 2, 3, 4), base, bits));
    }
}
