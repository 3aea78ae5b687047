//! One container of the deployment and the faults a container can have:
//! `docker kill` / `start`, `pause` / `unpause`, a network disconnect and
//! reconnect on the same address, and a wiped data directory.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use super::cli;
use crate::TestbedError;

/// How long a started container may take to answer `PING`.
pub(crate) const READY_LIMIT: Duration = Duration::from_secs(30);
/// Connect, read and write timeout of a connection to a container.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// A container of the deployment, reached at its own address on the
/// deployment's private network.
#[derive(Clone, Debug)]
pub struct Container {
    /// Its compose service (`node1`, `group-master`, …).
    pub service: String,
    /// Its id.
    pub id: String,
    /// Its address on the network.
    pub ip: Ipv4Addr,
    /// The port its server listens on inside (6379, or 26379 for a sentinel).
    pub port: u16,
    /// The network it is on (for disconnect and reconnect).
    pub network: String,
}

impl Container {
    /// Reads a container's address on its (only) network.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer, or the
    /// container is on no network or on several.
    pub fn inspect(service: &str, id: &str, port: u16) -> Result<Container, TestbedError> {
        let format = "{{range $net, $ep := .NetworkSettings.Networks}}{{$net}} {{$ep.IPAddress}} {{$ep.IPAMConfig}}\n{{end}}";
        let out = cli::docker(&["inspect", "--format", format, id])?;
        let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
        let bad = |why: String| TestbedError::Docker {
            command: format!("docker inspect {id}"),
            status: "unexpected network settings".into(),
            stderr: format!("{service}: {why}"),
        };
        let [line] = lines[..] else {
            return Err(bad(format!(
                "on {} networks, not one: {out:?}",
                lines.len()
            )));
        };
        let mut parts = line.split_whitespace();
        let network = parts.next().unwrap_or_default().to_string();
        let ip = parts
            .next()
            .and_then(|ip| ip.parse().ok())
            // A stopped container has no address; the one compose gave it
            // (`ipv4_address`) is in its endpoint configuration.
            .or_else(|| static_ip(line))
            .ok_or_else(|| bad(format!("no address in {line:?}")))?;
        Ok(Container {
            service: service.to_string(),
            id: id.to_string(),
            ip,
            port,
            network,
        })
    }

    /// `redis://<ip>:<port>`.
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.ip, self.port)
    }

    /// `<ip>:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.port))
    }

    /// A synchronous connection with 2 s timeouts.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Redis`] when it cannot connect.
    pub fn connection(&self) -> Result<redis::Connection, TestbedError> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(CONNECTION_TIMEOUT)?;
        con.set_read_timeout(Some(CONNECTION_TIMEOUT))?;
        con.set_write_timeout(Some(CONNECTION_TIMEOUT))?;
        Ok(con)
    }

    /// The pid of its main process on the host (0 when it is not running).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer.
    pub fn pid(&self) -> Result<u32, TestbedError> {
        let out = cli::docker(&["inspect", "--format", "{{.State.Pid}}", &self.id])?;
        Ok(out.trim().parse().unwrap_or(0))
    }

    /// When its main process last started (`.State.StartedAt`), in
    /// seconds since the Unix epoch on the host's clock.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer or the
    /// time does not parse.
    pub fn started_at(&self) -> Result<f64, TestbedError> {
        let out = cli::docker(&["inspect", "--format", "{{.State.StartedAt}}", &self.id])?;
        parse_utc(out.trim()).ok_or_else(|| TestbedError::Docker {
            command: format!("docker inspect {}", self.id),
            status: "a start time that does not parse".into(),
            stderr: out.trim().to_string(),
        })
    }

    /// Whether it runs (paused counts as running).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] when the engine does not answer.
    pub fn is_running(&self) -> Result<bool, TestbedError> {
        let out = cli::docker(&["inspect", "--format", "{{.State.Running}}", &self.id])?;
        Ok(out.trim() == "true")
    }

    /// `docker kill` (SIGKILL): a crash.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn kill(&self) -> Result<(), TestbedError> {
        cli::docker(&["kill", &self.id]).map(drop)
    }

    /// `docker start`, then waits until the server answers `PING`.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`], or [`TestbedError::Redis`] when it does not
    /// answer within 30 s.
    pub fn start(&self) -> Result<(), TestbedError> {
        self.start_only()?;
        self.wait_ready(READY_LIMIT)
    }

    /// `docker start` alone: returns once the process runs, which may be
    /// before it listens.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn start_only(&self) -> Result<(), TestbedError> {
        cli::docker(&["start", &self.id]).map(drop)
    }

    /// Waits (bounded) until the server answers `PING`.
    ///
    /// # Errors
    ///
    /// The last connection error after `limit`.
    pub fn wait_ready(&self, limit: Duration) -> Result<(), TestbedError> {
        let end = Instant::now() + limit;
        loop {
            let pong = self
                .connection()
                .and_then(|mut c| Ok(redis::cmd("PING").query::<String>(&mut c)?));
            match pong {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= end => return Err(e),
                Err(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// `docker pause`: every process frozen (the cgroup freezer). The
    /// socket stays open; nothing answers.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn pause(&self) -> Result<(), TestbedError> {
        cli::docker(&["pause", &self.id]).map(drop)
    }

    /// `docker unpause`.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn unpause(&self) -> Result<(), TestbedError> {
        cli::docker(&["unpause", &self.id]).map(drop)
    }

    /// Whether it is paused.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn is_paused(&self) -> Result<bool, TestbedError> {
        let out = cli::docker(&["inspect", "--format", "{{.State.Paused}}", &self.id])?;
        Ok(out.trim() == "true")
    }

    /// `docker network disconnect`: its interface is gone, packets to its
    /// address go nowhere (a partition), and its published ports close.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn disconnect(&self) -> Result<(), TestbedError> {
        cli::docker(&["network", "disconnect", &self.network, &self.id]).map(drop)
    }

    /// `docker network connect` on its own address again.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn connect(&self) -> Result<(), TestbedError> {
        let ip = self.ip.to_string();
        cli::docker(&["network", "connect", "--ip", &ip, &self.network, &self.id]).map(drop)
    }

    /// Whether it is on its network now.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn is_connected(&self) -> Result<bool, TestbedError> {
        let format = "{{range $net, $ep := .NetworkSettings.Networks}}{{$net}}\n{{end}}";
        let out = cli::docker(&["inspect", "--format", format, &self.id])?;
        Ok(out.lines().any(|l| l.trim() == self.network))
    }

    /// The host directory of the volume mounted on `/data`, if any.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`].
    pub fn data_dir(&self) -> Result<Option<PathBuf>, TestbedError> {
        let format = "{{range .Mounts}}{{if eq .Destination \"/data\"}}{{.Source}}{{end}}{{end}}";
        let out = cli::docker(&["inspect", "--format", format, &self.id])?;
        let dir = out.trim();
        Ok((!dir.is_empty()).then(|| PathBuf::from(dir)))
    }

    /// Deletes what the server keeps in its `/data` volume (its AOF and
    /// snapshot), so that its next start is empty: a crash that lost the
    /// disk. Only while it is stopped; needs the engine on this host (the
    /// volume is read from the host's file system).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] when the volume cannot be emptied (not root, or
    /// a remote engine), [`TestbedError::AlreadyRunning`] when it runs.
    pub fn wipe_data(&self) -> Result<(), TestbedError> {
        if self.is_running()? {
            return Err(TestbedError::AlreadyRunning {
                port: self.port,
                pid: self.pid()?,
            });
        }
        let Some(dir) = self.data_dir()? else {
            return Ok(());
        };
        let context = format!(
            "emptying {} (the /data volume of {})",
            dir.display(),
            self.service
        );
        for entry in std::fs::read_dir(&dir).map_err(TestbedError::io(context.clone()))? {
            let path = entry.map_err(TestbedError::io(context.clone()))?.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(TestbedError::io(context.clone()))?;
        }
        Ok(())
    }
}

/// The `ipv4_address` compose configured, from a `{{$ep.IPAMConfig}}`
/// line such as `net  &{10.231.31.13  []}` (a stopped container has no
/// `IPAddress`).
fn static_ip(line: &str) -> Option<Ipv4Addr> {
    line.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find_map(|word| word.parse().ok())
}

/// Seconds since the Unix epoch of an RFC 3339 UTC time as the engine
/// writes it (`2026-11-28T01:51:09.184934123Z`).
fn parse_utc(text: &str) -> Option<f64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (parts.next()??, parts.next()??, parts.next()??);
    let frac: f64 = format!("0.{frac}").parse().ok()?;
    // Days from 1970-01-01 to y-m-d (the proleptic Gregorian calendar).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3_600 + mm * 60 + ss) as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_times_parse_to_epoch_seconds() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_utc("2000-03-01T00:00:01.5Z"), Some(951_868_801.5));
        let t = parse_utc("2026-11-28T01:51:09.184934123Z").unwrap();
        assert!((t - 1_795_830_669.184_934).abs() < 1e-5, "{t}");
        assert_eq!(parse_utc("yesterday"), None);
    }

    #[test]
    fn the_configured_address_is_read_from_the_endpoint_configuration() {
        assert_eq!(
            static_ip("quorumlock-testbed_locks  &{10.231.31.13  []}"),
            Some(Ipv4Addr::new(10, 231, 31, 13))
        );
        assert_eq!(static_ip("net  <nil>"), None);
    }
}
