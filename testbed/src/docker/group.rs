//! The deployment's Sentinel-managed group: two servers (either may be the
//! master) and the sentinels that watch them, and a failover to a replica
//! whose replication link was cut first.

use std::thread;
use std::time::{Duration, Instant};

use super::container::Container;
use super::netns::{Drops, Rule};
use crate::TestbedError;

/// The group's name in `sentinel monitor`.
pub const SERVICE: &str = "group";
/// The servers' `min-replicas-max-lag` (in the compose file): how long a
/// master cut off from its replica still takes writes.
pub const REPLICA_LAG: Duration = Duration::from_secs(2);

/// A master, its replica and the sentinels.
#[derive(Clone, Debug)]
pub struct Group {
    /// The two servers, in compose order (`group-master`, `group-replica`);
    /// which one is the master now is [`Group::master`]'s business.
    pub servers: [Container; 2],
    /// The sentinels.
    pub sentinels: Vec<Container>,
}

impl Group {
    /// `redis://<ip>:26379` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Container::url).collect()
    }

    /// The server the sentinels name as the master, asked in order.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`] when no sentinel answers, or
    /// [`TestbedError::Docker`] when they name an address that is neither
    /// server.
    pub fn master(&self) -> Result<&Container, TestbedError> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match self.named_by(sentinel) {
                Ok(server) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestbedError::Docker {
            command: "SENTINEL GET-MASTER-ADDR-BY-NAME".into(),
            status: "no sentinels".into(),
            stderr: String::new(),
        }))
    }

    /// The server that is not [`master`](Self::master).
    ///
    /// # Errors
    ///
    /// See [`Group::master`].
    pub fn replica(&self) -> Result<&Container, TestbedError> {
        let master = self.master()?;
        Ok(self.other(master))
    }

    fn other(&self, server: &Container) -> &Container {
        if server.id == self.servers[0].id {
            &self.servers[1]
        } else {
            &self.servers[0]
        }
    }

    fn named_by(&self, sentinel: &Container) -> Result<&Container, TestbedError> {
        let (host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(SERVICE)
            .query(&mut sentinel.connection()?)?;
        self.servers
            .iter()
            .find(|s| s.ip.to_string() == host && s.port == port)
            .ok_or_else(|| TestbedError::Docker {
                command: format!(
                    "SENTINEL GET-MASTER-ADDR-BY-NAME {SERVICE} on {}",
                    sentinel.service
                ),
                status: "an unknown master".into(),
                stderr: format!("{host}:{port} is neither server of the group"),
            })
    }

    /// Waits (bounded) until the replica's link is up and it has every
    /// byte the master wrote.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] naming the last state seen after `limit`.
    pub fn wait_in_sync(&self, limit: Duration) -> Result<(), TestbedError> {
        let end = Instant::now() + limit;
        let mut seen = String::new();
        while Instant::now() < end {
            match self.sync_state() {
                Ok((true, _)) => return Ok(()),
                Ok((false, state)) => seen = state,
                Err(e) => seen = e.to_string(),
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(TestbedError::Docker {
            command: "INFO replication".into(),
            status: format!("the group's replica not in sync after {limit:?}"),
            stderr: seen,
        })
    }

    /// Waits (bounded) until the replica is in sync and the first sentinel
    /// sees it as a replica with its link up: what `SENTINEL FAILOVER`
    /// needs to find a replica it may promote.
    ///
    /// # Errors
    ///
    /// See [`Group::wait_in_sync`]; a sentinel that does not see the
    /// replica after `limit` is [`TestbedError::Docker`].
    pub fn wait_ready_for_failover(&self, limit: Duration) -> Result<(), TestbedError> {
        let end = Instant::now() + limit;
        self.wait_in_sync(limit)?;
        let replica = self.replica()?;
        let mut seen = String::new();
        while Instant::now() < end {
            match self.sentinel_sees(replica) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    seen = format!("no sentinel sees {} as a good replica", replica.service)
                }
                Err(e) => seen = e.to_string(),
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(TestbedError::Docker {
            command: format!("SENTINEL REPLICAS {SERVICE}"),
            status: format!("the replica not seen after {limit:?}"),
            stderr: seen,
        })
    }

    /// Whether the first sentinel lists `replica` as a replica, not down,
    /// with its master link up.
    fn sentinel_sees(&self, replica: &Container) -> Result<bool, TestbedError> {
        let Some(sentinel) = self.sentinels.first() else {
            return Ok(false);
        };
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(SERVICE)
            .query(&mut sentinel.connection()?)?;
        let ip = replica.ip.to_string();
        Ok(replicas.iter().any(|fields| {
            let get = |name: &str| {
                let at = fields.iter().position(|f| f == name)?;
                fields.get(at + 1).map(String::as_str)
            };
            get("ip") == Some(ip.as_str())
                && get("flags") == Some("slave")
                && get("master-link-status") == Some("ok")
        }))
    }

    /// Whether the replica is in sync, and what was seen.
    fn sync_state(&self) -> Result<(bool, String), TestbedError> {
        let master = self.master()?;
        let replica = self.other(master);
        let field = |info: &str, name: &str| -> Option<String> {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let info = |c: &Container| -> Result<String, TestbedError> {
            Ok(redis::cmd("INFO")
                .arg("replication")
                .query(&mut c.connection()?)?)
        };
        let (m, r) = (info(master)?, info(replica)?);
        let master_offset = field(&m, "master_repl_offset");
        let replica_offset = field(&r, "slave_repl_offset");
        let link = field(&r, "master_link_status");
        let following = field(&r, "master_host") == Some(master.ip.to_string());
        let state = format!(
            "{} master, {} link {link:?} following it {following}, offsets {master_offset:?} / {replica_offset:?}",
            master.service, replica.service
        );
        let synced = following && link.as_deref() == Some("up") && master_offset == replica_offset;
        Ok((synced, state))
    }

    /// Cuts the replication link (in the replica's namespace: nothing
    /// passes between the two servers, both ways), so that the master's
    /// next writes never reach the replica. The sentinels still see both.
    ///
    /// # Errors
    ///
    /// See [`Drops::install`].
    pub fn cut_link(&self) -> Result<Drops, TestbedError> {
        let master = self.master()?;
        let replica = self.other(master);
        Drops::install(replica, vec![Rule::from(master.ip), Rule::to(master.ip)])
    }

    /// `SENTINEL FAILOVER` (asked of the sentinels in order until one
    /// takes it), then waits until every sentinel names the other server
    /// and it says it is a master. Returns the new master.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`] when no sentinel takes the failover,
    /// [`TestbedError::Docker`] when it does not finish within `limit`.
    pub fn fail_over(&self, limit: Duration) -> Result<&Container, TestbedError> {
        let old = self.master()?;
        let new = self.other(old);
        let mut asked = Err(TestbedError::Docker {
            command: "SENTINEL FAILOVER".into(),
            status: "no sentinels".into(),
            stderr: String::new(),
        });
        for sentinel in &self.sentinels {
            asked = sentinel.connection().and_then(|mut c| {
                Ok(redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(SERVICE)
                    .query::<()>(&mut c)?)
            });
            if asked.is_ok() {
                break;
            }
        }
        asked?;
        let end = Instant::now() + limit;
        loop {
            let named = self
                .sentinels
                .iter()
                .all(|s| self.named_by(s).is_ok_and(|m| m.id == new.id));
            if named && role(new).is_ok_and(|r| r == "master") {
                return Ok(new);
            }
            if Instant::now() >= end {
                return Err(TestbedError::Docker {
                    command: format!("SENTINEL FAILOVER {SERVICE}"),
                    status: format!("not done after {limit:?}"),
                    stderr: format!("{} is not yet the master every sentinel names", new.service),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `ROLE`'s first field: `master` or `slave`.
fn role(server: &Container) -> Result<String, TestbedError> {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut server.connection()?)?;
    match role.first() {
        Some(redis::Value::BulkString(r)) => Ok(String::from_utf8_lossy(r).into_owned()),
        _ => Ok(String::new()),
    }
}
