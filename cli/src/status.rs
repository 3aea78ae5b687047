//! `quorumlock status`: per node, who holds each name, from the keys
//! themselves (see the crate's CHANGELOG, "Key format").

use std::time::Duration;

use quorumlock::redis;
use serde::Serialize;

use crate::args::StatusArgs;
use crate::connect::{connect, query, server_time_ms};
use crate::nodes::{Failure, Settings};

/// One name on one node.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The first 8 characters of the holder's owner token.
    owner: Option<String>,
    holds: u64,
    /// The key's time to live in ms (`None`: no key).
    pttl_ms: Option<i64>,
    /// The fencing counter (the largest token handed out for the name).
    fence: Option<u64>,
    /// Set after a force release: renewals do not re-take the name.
    forced: bool,
    epoch: Option<Epoch>,
}

/// The node's epoch marker (`quorumlock:epoch`).
#[derive(Debug, Serialize)]
struct Epoch {
    id: String,
    age_ms: i64,
    /// Whether the node still casts no vote, under this configuration's
    /// quarantine.
    quarantined: bool,
    quarantine_left_ms: i64,
}

pub async fn status(settings: &Settings, args: StatusArgs) -> Result<u8, Failure> {
    let config = settings.config()?;
    let quarantine = config.quarantine();
    let shown: Vec<String> = config.node_urls().map(str::to_owned).collect();
    let mut rows = Vec::new();
    for (url, node) in settings.nodes.iter().zip(&shown) {
        let conn = connect(settings.client(url)).await;
        for name in &args.names {
            let row = match &conn {
                Ok((conn, _)) => read(conn.clone(), name, quarantine)
                    .await
                    .unwrap_or_else(|error| Row::failed(name, error)),
                Err(error) => Row::failed(name, error.clone()),
            };
            rows.push(Row {
                node: node.clone(),
                ..row
            });
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialise")
        );
    } else {
        print_table(&rows);
    }
    Ok(0)
}

impl Row {
    fn failed(name: &str, error: String) -> Row {
        Row {
            name: name.to_owned(),
            node: String::new(),
            error: Some(error),
            owner: None,
            holds: 0,
            pttl_ms: None,
            fence: None,
            forced: false,
            epoch: None,
        }
    }
}

async fn read(
    mut conn: redis::aio::MultiplexedConnection,
    name: &str,
    quarantine: Duration,
) -> Result<Row, String> {
    let owner: Option<String> = query(&mut conn, redis::cmd("HGET").arg(name).arg("owner")).await?;
    let fields: u64 = query(&mut conn, redis::cmd("HLEN").arg(name)).await?;
    // Not a hold: the mark a waiting acquire leaves (scripts/acquire.lua).
    let marked: bool = query(&mut conn, redis::cmd("HEXISTS").arg(name).arg("waiters")).await?;
    let pttl: i64 = query(&mut conn, redis::cmd("PTTL").arg(name)).await?;
    let fence: Option<String> = query(
        &mut conn,
        redis::cmd("GET").arg(format!("quorumlock:fence:{name}")),
    )
    .await?;
    let forced: bool = query(
        &mut conn,
        redis::cmd("EXISTS").arg(format!("quorumlock:forced:{name}")),
    )
    .await?;
    let marker: Option<String> =
        query(&mut conn, redis::cmd("GET").arg("quorumlock:epoch")).await?;
    let now = server_time_ms(&mut conn).await?;
    Ok(Row {
        name: name.to_owned(),
        node: String::new(),
        error: None,
        owner: owner.map(|o| o.chars().take(8).collect()),
        holds: fields.saturating_sub(1 + u64::from(marked)),
        pttl_ms: (pttl >= 0).then_some(pttl),
        fence: fence.and_then(|f| f.split(' ').next().and_then(|v| v.parse().ok())),
        forced,
        epoch: marker.and_then(|m| epoch(&m, now, quarantine)),
    })
}

/// Parses `"<run_id> <epoch id> <start ms> <origin>"`.
fn epoch(marker: &str, now_ms: i64, quarantine: Duration) -> Option<Epoch> {
    let mut parts = marker.split(' ');
    let (_run_id, id, start) = (parts.next()?, parts.next()?, parts.next()?);
    let age_ms = now_ms - start.parse::<i64>().ok()?;
    let left = quarantine.as_millis() as i64 - age_ms;
    Some(Epoch {
        id: id.to_owned(),
        age_ms,
        quarantined: left > 0,
        quarantine_left_ms: left.max(0),
    })
}

fn print_table(rows: &[Row]) {
    let width = rows.iter().map(|r| r.node.len()).max().unwrap_or(4).max(4);
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:name_width$}  {:width$}  {:8}  {:>5}  {:>9}  {:>8}  EPOCH",
        "NAME", "NODE", "OWNER", "HOLDS", "TTL", "FENCE"
    );
    for row in rows {
        if let Some(error) = &row.error {
            println!(
                "{:name_width$}  {:width$}  unreachable: {error}",
                row.name, row.node
            );
            continue;
        }
        let ttl = match row.pttl_ms {
            Some(ms) => format!("{:.1}s", ms as f64 / 1000.0),
            None => "-".to_owned(),
        };
        let epoch = match &row.epoch {
            Some(e) if e.quarantined => format!(
                "quarantined, {:.1}s left",
                e.quarantine_left_ms as f64 / 1000.0
            ),
            Some(e) => format!(
                "votes (age {})",
                humantime::format_duration(Duration::from_secs((e.age_ms / 1000).max(0) as u64))
            ),
            None => "no marker (a new epoch starts at the next vote)".to_owned(),
        };
        println!(
            "{:name_width$}  {:width$}  {:8}  {:>5}  {:>9}  {:>8}  {epoch}{}",
            row.name,
            row.node,
            row.owner.as_deref().unwrap_or("-"),
            row.holds,
            ttl,
            row.fence.map_or("-".to_owned(), |f| f.to_string()),
            if row.forced { " [force-released]" } else { "" },
        );
    }
}
