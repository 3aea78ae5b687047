//! `quorumlock doctor`: checks each node for what the lock's guarantees
//! assume (see DEPLOYING.md), one finding per line. What a node answers
//! (versions, settings, errors) is shown escaped: a node may lie.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorumlock::redis::{self, aio::MultiplexedConnection};
use serde::Serialize;

use crate::args::{DoctorArgs, exit};
use crate::connect::{connect, query, server_time_ms};
use crate::nodes::{Failure, Settings};
use crate::shown;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Severity {
    Ok,
    Info,
    Warn,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Ok => "ok",
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        })
    }
}

#[derive(Debug, Serialize)]
struct Finding {
    severity: Severity,
    node: String,
    check: &'static str,
    message: String,
}

/// What the clock and same-server checks compare across nodes.
struct Seen {
    node: String,
    offset_ms: i64,
    run_id: Option<String>,
}

/// The commands the library sends or its scripts run, as `ACL DRYRUN`
/// checks them (key and channel names in the library's namespace; a lock
/// key is a string with one hold, a hash once re-entered).
const NEEDED: &[&[&str]] = &[
    &["evalsha", "0000000000000000000000000000000000000000", "0"],
    &["eval", "return 1", "0"],
    &["script", "load", "return 1"],
    &["info", "server"],
    &["ping"],
    &["time"],
    &["subscribe", "quorumlock:released:doctor"],
    &["publish", "quorumlock:released:doctor", "x"],
    &["get", "quorumlock:epoch"],
    &["set", "quorumlock:fence:doctor", "1"],
    &["del", "quorumlock:fence:doctor"],
    &["exists", "quorumlock:forced:doctor"],
    &["get", "quorumlock:doctor"],
    &["set", "quorumlock:doctor", "x", "NX", "PX", "1"],
    &["set", "quorumlock:doctor", "x", "KEEPTTL"],
    &["del", "quorumlock:doctor"],
    &["exists", "quorumlock:doctor"],
    &["hget", "quorumlock:doctor", "owner"],
    &["hmget", "quorumlock:doctor", "owner"],
    &["hset", "quorumlock:doctor", "owner", "x"],
    &["hdel", "quorumlock:doctor", "owner"],
    &["hlen", "quorumlock:doctor"],
    &["pexpire", "quorumlock:doctor", "1"],
    &["pttl", "quorumlock:doctor"],
    // The waiter queues (every waiting acquire takes a place).
    &["zadd", "quorumlock:queue:doctor", "1", "x"],
    &["zrange", "quorumlock:queue:doctor", "0", "0"],
    &["zrem", "quorumlock:queue:doctor", "x"],
];

pub async fn doctor(settings: &Settings, args: DoctorArgs) -> Result<u8, Failure> {
    let config = settings.config()?;
    let shown: Vec<String> = config.node_urls().map(str::to_owned).collect();
    let mut findings = Vec::new();
    let mut seen = Vec::new();
    for (url, node) in settings.nodes.iter().zip(&shown) {
        let mut add = |severity, check, message: String| {
            findings.push(Finding {
                severity,
                node: node.clone(),
                check,
                message,
            })
        };
        let mut conn = match connect(settings.client(url)).await {
            Ok((conn, _)) => conn,
            Err(error) => {
                add(
                    Severity::Error,
                    "reachable",
                    format!("unreachable: {error}"),
                );
                continue;
            }
        };
        check_node(&mut conn, url, config.node_timeout(), &mut add).await;
        seen.push(Seen {
            node: node.clone(),
            offset_ms: clock_offset(&mut conn).await.unwrap_or(0),
            run_id: run_id(&mut conn).await,
        });
    }
    compare(&seen, config.drift_factor(), config.ttl(), &mut findings);
    let worst = findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Ok);
    if args.json {
        // Serialising strings cannot fail.
        println!(
            "{}",
            shown::json(&serde_json::to_string_pretty(&findings).unwrap_or_default())
        );
    } else {
        for f in &findings {
            let line = format!(
                "{:5}  {}  {}: {}",
                f.severity.to_string(),
                f.node,
                f.check,
                f.message
            );
            println!("{}", shown::line(&line));
        }
    }
    Ok(if worst == Severity::Error {
        exit::FINDINGS
    } else {
        0
    })
}

async fn check_node(
    conn: &mut MultiplexedConnection,
    url: &str,
    node_timeout: Duration,
    add: &mut impl FnMut(Severity, &'static str, String),
) {
    match round_trip(conn).await {
        // A script call takes longer than a PING: at half the node timeout
        // a node is one busy moment away from counting as failed.
        Ok(rtt) if rtt > node_timeout / 2 => add(
            Severity::Warn,
            "reachable",
            format!(
                "PING round trip {rtt:.1?} (median of 5), node timeout {node_timeout:?}: \
                 over half of it, raise --node-timeout (`node_timeout`)"
            ),
        ),
        Ok(rtt) => add(
            Severity::Ok,
            "reachable",
            format!("PING round trip {rtt:.1?} (median of 5), node timeout {node_timeout:?}"),
        ),
        Err(e) => add(Severity::Error, "reachable", format!("PING failed: {e}")),
    }
    match info_field(conn, "redis_version").await {
        Some(version) => {
            let major_minor: Vec<u32> = version
                .split('.')
                .take(2)
                .filter_map(|p| p.parse().ok())
                .collect();
            if major_minor.as_slice() < [6, 2].as_slice() {
                add(
                    Severity::Error,
                    "version",
                    format!("Redis {version}: quorumlock needs 6.2 or later"),
                );
            } else {
                add(Severity::Ok, "version", format!("Redis {version}"));
            }
        }
        None => add(
            Severity::Warn,
            "version",
            "INFO server gave no redis_version".to_owned(),
        ),
    }
    check_config(conn, add).await;
    check_acl(conn, add).await;
    if url.starts_with("rediss://") {
        add(Severity::Ok, "tls", "TLS in use".to_owned());
    } else {
        add(
            Severity::Info,
            "tls",
            "no TLS: fine on loopback or a private network".to_owned(),
        );
    }
}

async fn round_trip(conn: &mut MultiplexedConnection) -> Result<Duration, String> {
    let mut times = Vec::with_capacity(5);
    for _ in 0..5 {
        let began = Instant::now();
        let _: String = query(conn, &redis::cmd("PING")).await?;
        times.push(began.elapsed());
    }
    times.sort();
    Ok(times[2])
}

async fn info_field(conn: &mut MultiplexedConnection, field: &str) -> Option<String> {
    let info: String = query(conn, redis::cmd("INFO").arg("server")).await.ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

async fn run_id(conn: &mut MultiplexedConnection) -> Option<String> {
    info_field(conn, "run_id").await
}

async fn check_config(
    conn: &mut MultiplexedConnection,
    add: &mut impl FnMut(Severity, &'static str, String),
) {
    let get = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .arg("appendfsync")
        .arg("maxmemory-policy")
        .clone();
    let values: HashMap<String, String> = match query(conn, &get).await {
        Ok(values) => values,
        Err(e) => {
            add(
                Severity::Info,
                "config",
                format!("cannot read CONFIG ({e}): check persistence and maxmemory-policy by hand"),
            );
            return;
        }
    };
    match values.get("maxmemory-policy").map(String::as_str) {
        Some("noeviction") => add(Severity::Ok, "maxmemory-policy", "noeviction".to_owned()),
        Some(policy) => add(
            Severity::Warn,
            "maxmemory-policy",
            format!(
                "{policy}: an evicted lock key or fencing counter is data loss the lock cannot date; use noeviction"
            ),
        ),
        None => {}
    }
    let aof = values.get("appendonly").map(String::as_str);
    let fsync = values.get("appendfsync").map(String::as_str).unwrap_or("?");
    match aof {
        Some("yes") => add(
            Severity::Ok,
            "persistence",
            format!(
                "AOF on, appendfsync {fsync}{}",
                if fsync == "always" {
                    " (may be declared durable_nodes)"
                } else {
                    ""
                }
            ),
        ),
        _ => add(
            Severity::Info,
            "persistence",
            "no AOF: a restart loses the locks, and the node sits out the quarantine after it"
                .to_owned(),
        ),
    }
}

async fn check_acl(
    conn: &mut MultiplexedConnection,
    add: &mut impl FnMut(Severity, &'static str, String),
) {
    let user: String = match query(conn, redis::cmd("ACL").arg("WHOAMI")).await {
        Ok(user) => user,
        Err(e) => {
            add(
                Severity::Info,
                "acl",
                format!("cannot check ACL permissions ({e})"),
            );
            return;
        }
    };
    let mut denied: Vec<&str> = Vec::new();
    for command in NEEDED {
        let mut dryrun = redis::cmd("ACL");
        dryrun.arg("DRYRUN").arg(&user).arg(*command);
        match query::<String>(conn, &dryrun).await {
            Ok(reply) if reply == "OK" => {}
            Err(e) if denied.is_empty() && e.contains("NOPERM") && e.contains("acl") => {
                add(
                    Severity::Info,
                    "acl",
                    format!("user {user:?} may not run ACL DRYRUN: cannot check its permissions"),
                );
                return;
            }
            // Named once, however many of its forms are denied.
            _ if denied.contains(&command[0]) => {}
            _ => denied.push(command[0]),
        }
    }
    if denied.is_empty() {
        add(
            Severity::Ok,
            "acl",
            format!("user {user:?} may run every command the lock needs"),
        );
    } else {
        add(
            Severity::Error,
            "acl",
            format!(
                "user {user:?} may not run: {} (see the least ACL line in DEPLOYING.md)",
                denied.join(", ")
            ),
        );
    }
}

/// The node's clock minus ours, in ms, at the midpoint of the round trip.
async fn clock_offset(conn: &mut MultiplexedConnection) -> Result<i64, String> {
    let wall_ms = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    };
    let before = wall_ms();
    let server = server_time_ms(conn).await?;
    let after = wall_ms();
    Ok(server.saturating_sub(before / 2 + after / 2))
}

/// Clock offsets between nodes, and nodes that are one server.
fn compare(seen: &[Seen], drift_factor: f64, ttl: Duration, findings: &mut Vec<Finding>) {
    let Some(first) = seen.first() else {
        return;
    };
    // Offsets are no drift, but nodes far apart suggest a clock without NTP.
    let allowance = (ttl.as_millis() as f64 * drift_factor) as i64 + 2;
    for s in seen {
        let apart = s.offset_ms.saturating_sub(first.offset_ms);
        let severity = if apart.unsigned_abs() > 1000.max(allowance).unsigned_abs() {
            Severity::Warn
        } else {
            Severity::Ok
        };
        findings.push(Finding {
            severity,
            node: s.node.clone(),
            check: "clock",
            message: format!(
                "{apart:+} ms from the first node's clock ({:+} ms from this host's)",
                s.offset_ms
            ),
        });
    }
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            if a.run_id.is_some() && a.run_id == b.run_id {
                findings.push(Finding {
                    severity: Severity::Error,
                    node: b.node.clone(),
                    check: "independent",
                    message: format!("the same server as {}: it would get one vote only", a.node),
                });
            }
        }
    }
}
