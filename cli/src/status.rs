//! `quorumlock status`: per node, who holds each name, from the keys
//! themselves (see the crate's CHANGELOG, "Key format"). Without names,
//! the names held on any node, found with a bounded `SCAN`. What a node
//! answers is shown escaped (see `shown`): a node may lie.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use quorumlock::redis::{self, aio::MultiplexedConnection};
use serde::Serialize;

use crate::args::{StatusArgs, exit};
use crate::connect::{TIMEOUT, connect, query, server_time_ms};
use crate::lock_key;
use crate::nodes::{Failure, Settings};
use crate::shown;

/// The prefix of the keys quorumlock derives from names: no lock name
/// starts with it (the library refuses such names).
pub const RESERVED_PREFIX: &str = "quorumlock:";

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
    /// Adopted as brand new (`quorumlock adopt`): dated from the start of
    /// time, it votes at once.
    adopted: bool,
    /// Whether the node still casts no vote, under this configuration's
    /// quarantine.
    quarantined: bool,
    quarantine_left_ms: i64,
}

/// Refuses a name in the reserved namespace, as every verb does.
pub fn check_name(name: &str) -> Result<(), Failure> {
    if name.starts_with(RESERVED_PREFIX) {
        return Err(Failure::new(
            exit::USAGE,
            // As the library words it for the other verbs.
            format!(
                "lock name \"{}\": names starting with `{RESERVED_PREFIX}` are reserved for the keys quorumlock derives (epoch markers, fencing counters, release channels)",
                shown::name(name)
            ),
        ));
    }
    Ok(())
}

pub async fn status(settings: &Settings, args: StatusArgs) -> Result<u8, Failure> {
    for name in &args.names {
        check_name(name)?;
    }
    let config = settings.config()?;
    let quarantine = config.quarantine();
    let shown_urls: Vec<String> = config.node_urls().map(str::to_owned).collect();
    let mut conns = Vec::new();
    for url in &settings.nodes {
        conns.push(connect(settings.client(url)).await.map(|(conn, _)| conn));
    }
    let (names, listing) = if args.names.is_empty() {
        let listing = list_held(&mut conns, args.limit).await;
        (listing.names.iter().cloned().collect(), Some(listing))
    } else {
        (args.names.clone(), None)
    };
    let mut rows = Vec::new();
    for (conn, node) in conns.iter().zip(&shown_urls) {
        for name in &names {
            let row = match conn {
                Ok(conn) => read(conn.clone(), name, quarantine)
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
        print_json(&rows, listing.as_ref());
    } else {
        if let Some(listing) = &listing {
            listing.say();
        }
        if !rows.is_empty() {
            print_table(&rows);
        }
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

/// One name's keys on one node, in one pipelined round trip.
async fn read(
    mut conn: MultiplexedConnection,
    name: &str,
    quarantine: Duration,
) -> Result<Row, String> {
    let mut pipe = redis::pipe();
    lock_key::read(&mut pipe, name);
    pipe.cmd("PTTL").arg(name);
    pipe.cmd("GET")
        .arg(format!("{RESERVED_PREFIX}fence:{name}"));
    pipe.cmd("EXISTS")
        .arg(format!("{RESERVED_PREFIX}forced:{name}"));
    pipe.cmd("GET").arg(format!("{RESERVED_PREFIX}epoch"));
    type Reply = (
        (Option<Vec<u8>>, u64),
        i64,
        Option<Vec<u8>>,
        bool,
        Option<Vec<u8>>,
    );
    let ((owner, holds), pttl, fence, forced, marker): Reply =
        match tokio::time::timeout(TIMEOUT, pipe.query_async(&mut conn)).await {
            Ok(reply) => reply.map_err(|e| e.to_string())?,
            Err(_) => return Err(format!("no answer within {} s", TIMEOUT.as_secs())),
        };
    let now = server_time_ms(&mut conn).await?;
    Ok(Row {
        name: name.to_owned(),
        node: String::new(),
        error: None,
        owner: owner.map(|o| shown::bytes(&o[..o.len().min(8)])),
        holds,
        pttl_ms: (pttl >= 0).then_some(pttl),
        fence: fence.and_then(|f| {
            let text = String::from_utf8_lossy(&f).into_owned();
            text.split(' ').next().and_then(|v| v.parse().ok())
        }),
        forced,
        epoch: marker.and_then(|m| epoch(&String::from_utf8_lossy(&m), now, quarantine)),
    })
}

/// Parses `"<run_id> <epoch id> <start ms> <origin>"`; `None` for a marker
/// that does not parse.
fn epoch(marker: &str, now_ms: i64, quarantine: Duration) -> Option<Epoch> {
    let mut parts = marker.split(' ');
    let (_run_id, id, start) = (parts.next()?, parts.next()?, parts.next()?);
    let start: i64 = start.parse().ok()?;
    let age_ms = now_ms.saturating_sub(start);
    let quarantine_ms = i64::try_from(quarantine.as_millis()).unwrap_or(i64::MAX);
    let left = quarantine_ms.saturating_sub(age_ms);
    Some(Epoch {
        id: shown::short(id, 40),
        age_ms,
        adopted: start == 0,
        quarantined: left > 0,
        quarantine_left_ms: left.max(0),
    })
}

/// The names held on the nodes, as a bounded scan found them.
struct Listing {
    names: BTreeSet<String>,
    /// Why the scan stopped early, if it did.
    incomplete: Vec<String>,
}

/// How many `SCAN` calls one node gets, at most.
const MAX_SCAN_CALLS: usize = 1000;
/// How many keys one `SCAN` call asks for.
const SCAN_COUNT: usize = 1000;
/// How long the whole listing may take.
const SCAN_BUDGET: Duration = Duration::from_secs(10);

/// Scans each node for lock keys (either form of [`lock_key`], with a TTL),
/// outside the reserved namespace. Bounded in calls, names and time.
async fn list_held(conns: &mut [Result<MultiplexedConnection, String>], limit: usize) -> Listing {
    let began = Instant::now();
    let mut listing = Listing {
        names: BTreeSet::new(),
        incomplete: Vec::new(),
    };
    for conn in conns.iter_mut() {
        let Ok(conn) = conn else { continue };
        if let Err(why) = scan_node(conn, limit, began, &mut listing.names).await {
            listing.incomplete.push(why);
        }
    }
    listing
}

/// Adds the held names of one node; `Err` says why it stopped early.
async fn scan_node(
    conn: &mut MultiplexedConnection,
    limit: usize,
    began: Instant,
    names: &mut BTreeSet<String>,
) -> Result<(), String> {
    let mut cursor: u64 = 0;
    for _ in 0..MAX_SCAN_CALLS {
        if began.elapsed() > SCAN_BUDGET {
            return Err(format!("stopped after {} s", SCAN_BUDGET.as_secs()));
        }
        // Every type: a lock key is a string or a hash.
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("COUNT").arg(SCAN_COUNT);
        let (next, keys): (u64, Vec<Vec<u8>>) = query(conn, &scan).await?;
        let keys: Vec<String> = keys
            .into_iter()
            // Lock names are text (the library takes &str).
            .filter_map(|key| String::from_utf8(key).ok())
            .filter(|key| !key.starts_with(RESERVED_PREFIX) && !names.contains(key))
            .collect();
        for key in held(conn, keys).await? {
            if names.len() >= limit {
                return Err(format!("stopped at --limit {limit} names"));
            }
            names.insert(key);
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
    Err(format!("stopped after {MAX_SCAN_CALLS} SCAN calls"))
}

/// Those of `keys` (one `SCAN` page) that look like held locks, judged on
/// the node in one call ([`lock_key::HELD`]). A key the user may not read
/// (an ACL) is not listed.
async fn held(conn: &mut MultiplexedConnection, keys: Vec<String>) -> Result<Vec<String>, String> {
    if keys.is_empty() {
        return Ok(keys);
    }
    let found: Vec<usize> = query(conn, &lock_key::held(&keys)).await?;
    let mut keys: Vec<Option<String>> = keys.into_iter().map(Some).collect();
    // Indexes from 1; one out of range (a lying node) is ignored.
    Ok(found
        .into_iter()
        .filter_map(|i| keys.get_mut(i.checked_sub(1)?)?.take())
        .collect())
}

impl Listing {
    fn say(&self) {
        if self.names.is_empty() && self.incomplete.is_empty() {
            println!("no names held");
        }
        for why in &self.incomplete {
            eprintln!(
                "{}",
                shown::line(&format!(
                    "quorumlock: the list of held names is incomplete: {why}"
                ))
            );
        }
    }
}

fn print_json(rows: &[Row], listing: Option<&Listing>) {
    let text = match listing {
        // With a listing, an object: the rows and whether it is complete.
        Some(listing) => serde_json::to_string_pretty(&serde_json::json!({
            "names": listing.names,
            "complete": listing.incomplete.is_empty(),
            "incomplete": listing.incomplete,
            "rows": rows,
        })),
        None => serde_json::to_string_pretty(&rows),
    };
    // Serialising strings and numbers cannot fail.
    println!("{}", shown::json(&text.unwrap_or_default()));
}

fn print_table(rows: &[Row]) {
    struct Cells {
        name: String,
        node: String,
        owner: String,
        holds: String,
        ttl: String,
        fence: String,
        rest: String,
    }
    let cells: Vec<Cells> = rows.iter().map(row_cells).collect();
    let width = |f: fn(&Cells) -> &str, title: &str| {
        cells
            .iter()
            .map(|c| f(c).chars().count())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let w = [
        width(|c| &c.name, "NAME"),
        width(|c| &c.node, "NODE"),
        width(|c| &c.owner, "OWNER"),
        width(|c| &c.holds, "HOLDS"),
        width(|c| &c.ttl, "TTL"),
        width(|c| &c.fence, "FENCE"),
    ];
    // Text columns to the left, numbers to the right.
    let line = |c: [&str; 7]| {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:>w3$}  {:>w4$}  {:>w5$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5],
        );
        println!("{}", line.trim_end());
    };
    line(["NAME", "NODE", "OWNER", "HOLDS", "TTL", "FENCE", "EPOCH"]);
    for c in &cells {
        line([
            &c.name, &c.node, &c.owner, &c.holds, &c.ttl, &c.fence, &c.rest,
        ]);
    }

    /// One row's cells, each escaped and at most `MAX_SHOWN` characters.
    fn row_cells(row: &Row) -> Cells {
        let name = shown::name(&row.name);
        let node = shown::name(&row.node);
        if let Some(error) = &row.error {
            return Cells {
                name,
                node,
                owner: String::new(),
                holds: String::new(),
                ttl: String::new(),
                fence: String::new(),
                rest: format!("unreachable: {}", shown::name(error)),
            };
        }
        let epoch = match &row.epoch {
            Some(e) if e.quarantined => format!(
                "quarantined, {:.1}s left",
                e.quarantine_left_ms as f64 / 1000.0
            ),
            Some(e) if e.adopted => "votes (adopted)".to_owned(),
            Some(e) => format!(
                "votes (age {})",
                humantime::format_duration(Duration::from_secs(
                    u64::try_from(e.age_ms / 1000).unwrap_or(0)
                ))
            ),
            None => "no marker (a new epoch starts at the next vote)".to_owned(),
        };
        Cells {
            name,
            node,
            owner: row.owner.clone().unwrap_or_else(|| "-".to_owned()),
            holds: row.holds.to_string(),
            ttl: row
                .pttl_ms
                .map_or("-".to_owned(), |ms| format!("{:.1}s", ms as f64 / 1000.0)),
            fence: row.fence.map_or("-".to_owned(), |f| f.to_string()),
            rest: format!(
                "{epoch}{}",
                if row.forced { " [force-released]" } else { "" }
            ),
        }
    }
}
