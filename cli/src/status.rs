//! `quorumlock status`: per node, who holds each name, from the keys
//! themselves (see the crate's CHANGELOG, "Key format"): the mutex, and
//! the held slots of the name's semaphore (`run --permits`) and
//! read-write lock (`run --shared` / `--exclusive`). Without names, the
//! names held on any node, found with a bounded `SCAN`. What a node
//! answers is shown escaped (see `shown`): a node may lie.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use quorumlock::MultiRwLock;
use quorumlock::redis::{self, aio::MultiplexedConnection};
use serde::Serialize;

use crate::args::{StatusArgs, exit};
use crate::connect::{TIMEOUT, connect, query, server_time_ms};
use crate::lock_key;
use crate::nodes::{Failure, Settings};
use crate::shown;
use crate::slots::{self, Primitive};

/// The prefix of the keys quorumlock derives from names: no lock name
/// starts with it (the library refuses such names).
pub const RESERVED_PREFIX: &str = "quorumlock:";

/// One name's mutex, or one held slot of its semaphore or read-write
/// lock, on one node.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    node: String,
    /// What the row shows: `mutex` (every name has this row on every
    /// node, held or not), `permit`, `reader` or `writer` (held slots
    /// only), `slots` (reading the slots failed).
    kind: Kind,
    /// The permit's or the reader's slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    slot: Option<u32>,
    /// A permit row: how many permits of the name this node holds; a
    /// reader row: how many readers.
    #[serde(skip_serializing_if = "Option::is_none")]
    held: Option<u32>,
    /// A writer row: how many of the reader slots its owner holds on this
    /// node (all 32, but while it takes or loses them).
    #[serde(skip_serializing_if = "Option::is_none")]
    slots: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The first 8 characters of the holder's owner token.
    owner: Option<String>,
    holds: u64,
    /// The key's time to live in ms (`None`: no key, or no expiry; a
    /// writer: its slot key that expires first).
    pttl_ms: Option<i64>,
    /// The fencing counter (the largest token handed out for the name; a
    /// slot's own counter; a writer: the largest of its slots').
    fence: Option<u64>,
    /// Set after a force release: renewals do not re-take the name.
    forced: bool,
    epoch: Option<Epoch>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Mutex,
    Permit,
    Reader,
    Writer,
    /// The slots could not be read (the row's `error` says why).
    Slots,
}

/// The node's epoch marker (`quorumlock:epoch`).
#[derive(Clone, Debug, Serialize)]
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
            // A listing reads the slots of only the names it saw slots of.
            let slotted = listing.as_ref().is_none_or(|l| l.slotted.contains(name));
            let (row, slot_rows) = match conn {
                Ok(conn) => match read(conn.clone(), name, quarantine).await {
                    Ok(row) if !slotted => (row, Vec::new()),
                    Ok(row) => {
                        let slot_rows =
                            read_slots(conn.clone(), name, &row)
                                .await
                                .unwrap_or_else(|error| {
                                    vec![Row {
                                        kind: Kind::Slots,
                                        ..Row::failed(name, error)
                                    }]
                                });
                        (row, slot_rows)
                    }
                    Err(error) => (Row::failed(name, error), Vec::new()),
                },
                Err(error) => (Row::failed(name, error.clone()), Vec::new()),
            };
            for row in [row].into_iter().chain(slot_rows) {
                rows.push(Row {
                    node: node.clone(),
                    ..row
                });
            }
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
            kind: Kind::Mutex,
            slot: None,
            held: None,
            slots: None,
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
        kind: Kind::Mutex,
        slot: None,
        held: None,
        slots: None,
        error: None,
        owner: owner.map(|o| shown_owner(&o)),
        holds,
        pttl_ms: (pttl >= 0).then_some(pttl),
        fence: fence.as_deref().and_then(fence_value),
        forced,
        epoch: marker.and_then(|m| epoch(&String::from_utf8_lossy(&m), now, quarantine)),
    })
}

/// The first 8 characters of an owner token, escaped.
fn shown_owner(owner: &[u8]) -> String {
    shown::bytes(&owner[..owner.len().min(8)])
}

/// A fencing counter's value (`"<value> <epoch id>"`).
fn fence_value(counter: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(counter);
    text.split(' ').next().and_then(|v| v.parse().ok())
}

/// One slot key found on a node.
struct Slot {
    primitive: Primitive,
    slot: u32,
    owner: Vec<u8>,
    holds: u64,
    pttl: i64,
    fence: Option<u64>,
    forced: bool,
}

/// The longest name whose slots are looked at one by one (see
/// [`read_slots`]): 1,056 keys of up to 1 KiB each in one call.
const MAX_LISTED_NAME: usize = 1024;

/// The held slots of `name`'s semaphore and read-write lock on one node,
/// as rows beside its mutex row `mutex` (whose epoch they share). Every
/// slot a name can have is looked at (a semaphore's up to 1,024 and the
/// 32 reader slots): in one round trip their `PTTL`s, in a second the
/// keys that exist read with [`lock_key::READ`], with their fencing
/// counters. Bounded and complete whatever the keyspace holds, and no
/// `SCAN`, which the library's ACL does not grant. A name over
/// [`MAX_LISTED_NAME`] would make that first call huge: its slots are
/// found with a bounded `SCAN MATCH` instead.
async fn read_slots(
    mut conn: MultiplexedConnection,
    name: &str,
    mutex: &Row,
) -> Result<Vec<Row>, String> {
    let keys: Vec<(Primitive, u32, String)> = if name.len() <= MAX_LISTED_NAME {
        Primitive::ALL
            .into_iter()
            .flat_map(|p| (0..p.slots()).map(move |slot| (p, slot, p.key(name, slot))))
            .collect()
    } else {
        scan_slots(&mut conn, name).await?
    };
    let mut pipe = redis::pipe();
    for (_, _, key) in &keys {
        pipe.cmd("PTTL").arg(key);
    }
    let pttls: Vec<i64> = bounded(pipe.query_async(&mut conn)).await?;
    // -2: no such key.
    let present: Vec<_> = keys
        .into_iter()
        .zip(pttls)
        .filter(|(_, pttl)| *pttl != -2)
        .collect();
    if present.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for ((_, _, key), _) in &present {
        lock_key::read(&mut pipe, key);
        pipe.cmd("GET").arg(format!("{RESERVED_PREFIX}fence:{key}"));
        pipe.cmd("EXISTS")
            .arg(format!("{RESERVED_PREFIX}forced:{key}"));
    }
    let replies: Vec<redis::Value> = bounded(pipe.query_async(&mut conn)).await?;
    let mut replies = replies.into_iter();
    let mut found = Vec::new();
    for ((primitive, slot, key), pttl) in present {
        let mut next = || replies.next().ok_or("a short reply".to_owned());
        let parsed = (|| {
            let (owner, holds): (Option<Vec<u8>>, u64) = redis::from_redis_value(next()?)?;
            let fence: Option<Vec<u8>> = redis::from_redis_value(next()?)?;
            let forced: bool = redis::from_redis_value(next()?)?;
            Ok::<_, Box<dyn std::error::Error>>((owner, holds, fence, forced))
        })()
        .map_err(|e| format!("{}: {e}", shown::name(&key)))?;
        let (owner, holds, fence, forced) = parsed;
        // Gone between the two reads.
        let Some(owner) = owner else { continue };
        found.push(Slot {
            primitive,
            slot,
            owner,
            holds,
            pttl,
            fence: fence.as_deref().and_then(fence_value),
            forced,
        });
    }
    Ok(slot_rows(name, mutex, &found))
}

/// The slot keys of `name` on one node, found with `SCAN MATCH` (the
/// name's glob characters escaped), bounded as the listing is.
async fn scan_slots(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> Result<Vec<(Primitive, u32, String)>, String> {
    let began = Instant::now();
    // `quorumlock:permit:<name>:<i>` and `quorumlock:rw:<name>:<i>`, and
    // keys derived from them, which `slots::parse` leaves out.
    let pattern = format!("{RESERVED_PREFIX}*:{}:*", glob_escaped(name));
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    for _ in 0..MAX_SCAN_CALLS {
        if began.elapsed() > SCAN_BUDGET {
            return Err(format!(
                "the slots' SCAN stopped after {} s",
                SCAN_BUDGET.as_secs()
            ));
        }
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, keys): (u64, Vec<Vec<u8>>) = query(conn, &scan).await?;
        for key in keys {
            let Ok(key) = String::from_utf8(key) else {
                continue;
            };
            if let Some((primitive, slot_of, slot)) = slots::parse(&key) {
                let entry = (primitive, slot, key.clone());
                if slot_of == name && !found.contains(&entry) {
                    found.push(entry);
                }
            }
        }
        if next == 0 {
            found.sort();
            return Ok(found);
        }
        cursor = next;
    }
    Err(format!(
        "the slots' SCAN stopped after {MAX_SCAN_CALLS} calls"
    ))
}

/// `text` matching only itself in a `SCAN MATCH` pattern.
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The rows of the slots found on one node: a row per permit, a row per
/// reader, one row for a writer (the one owner of several reader slots:
/// a reader holds one).
fn slot_rows(name: &str, mutex: &Row, found: &[Slot]) -> Vec<Row> {
    let row = |kind, slot: &Slot| Row {
        name: name.to_owned(),
        node: String::new(),
        kind,
        slot: Some(slot.slot),
        held: None,
        slots: None,
        error: None,
        owner: Some(shown_owner(&slot.owner)),
        holds: slot.holds,
        pttl_ms: (slot.pttl >= 0).then_some(slot.pttl),
        fence: slot.fence,
        forced: slot.forced,
        epoch: mutex.epoch.clone(),
    };
    let permits: Vec<&Slot> = found
        .iter()
        .filter(|s| s.primitive == Primitive::Semaphore)
        .collect();
    let rw: Vec<&Slot> = found
        .iter()
        .filter(|s| s.primitive == Primitive::ReadWrite)
        .collect();
    let held_by = |owner: &[u8]| rw.iter().filter(|s| s.owner == owner).count() as u32;
    let readers = rw.iter().filter(|s| held_by(&s.owner) == 1).count() as u32;
    let mut rows: Vec<Row> = permits
        .iter()
        .map(|slot| Row {
            held: Some(permits.len() as u32),
            ..row(Kind::Permit, slot)
        })
        .collect();
    let mut writers: Vec<&[u8]> = Vec::new();
    for slot in &rw {
        let slots = held_by(&slot.owner);
        if slots == 1 {
            rows.push(Row {
                held: Some(readers),
                ..row(Kind::Reader, slot)
            });
        } else if !writers.contains(&slot.owner.as_slice()) {
            writers.push(&slot.owner);
            let mine = || rw.iter().filter(|s| s.owner == slot.owner);
            rows.push(Row {
                slot: None,
                slots: Some(slots),
                pttl_ms: mine().filter(|s| s.pttl >= 0).map(|s| s.pttl).min(),
                fence: mine().filter_map(|s| s.fence).max(),
                forced: mine().any(|s| s.forced),
                holds: mine().map(|s| s.holds).max().unwrap_or_default(),
                ..row(Kind::Writer, slot)
            });
        }
    }
    rows
}

/// `reply`, bounded by [`TIMEOUT`].
async fn bounded<T>(reply: impl Future<Output = redis::RedisResult<T>>) -> Result<T, String> {
    match tokio::time::timeout(TIMEOUT, reply).await {
        Ok(reply) => reply.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {} s", TIMEOUT.as_secs())),
    }
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
    /// The names with held slots (permits, readers, a writer): only
    /// these have their slots read, 1,056 keys a name.
    slotted: BTreeSet<String>,
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
/// outside the reserved namespace but for the slots of semaphores and
/// read-write locks, which list their name. Bounded in calls, names and
/// time.
async fn list_held(conns: &mut [Result<MultiplexedConnection, String>], limit: usize) -> Listing {
    let began = Instant::now();
    let mut listing = Listing {
        names: BTreeSet::new(),
        slotted: BTreeSet::new(),
        incomplete: Vec::new(),
    };
    for conn in conns.iter_mut() {
        let Ok(conn) = conn else { continue };
        if let Err(why) = scan_node(conn, limit, began, &mut listing).await {
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
    listing: &mut Listing,
) -> Result<(), String> {
    let Listing { names, slotted, .. } = listing;
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
            .filter(|key| match slots::parse(key) {
                Some((_, name, _)) => !slotted.contains(name),
                None => !key.starts_with(RESERVED_PREFIX) && !names.contains(key),
            })
            .collect();
        for key in held(conn, keys).await? {
            let slot = slots::parse(&key);
            let name = slot.map_or(key.as_str(), |(_, name, _)| name);
            if !names.contains(name) {
                if names.len() >= limit {
                    return Err(format!("stopped at --limit {limit} names"));
                }
                names.insert(name.to_owned());
            }
            if slot.is_some() {
                slotted.insert(name.to_owned());
            }
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
        kind: String,
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
        width(|c| &c.kind, "KIND"),
        width(|c| &c.owner, "OWNER"),
        width(|c| &c.holds, "HOLDS"),
        width(|c| &c.ttl, "TTL"),
        width(|c| &c.fence, "FENCE"),
    ];
    // Text columns to the left, numbers to the right.
    let line = |c: [&str; 8]| {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {:>w4$}  {:>w5$}  {:>w6$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            c[7],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5],
            w6 = w[6],
        );
        println!("{}", line.trim_end());
    };
    line([
        "NAME", "NODE", "KIND", "OWNER", "HOLDS", "TTL", "FENCE", "EPOCH",
    ]);
    for c in &cells {
        line([
            &c.name, &c.node, &c.kind, &c.owner, &c.holds, &c.ttl, &c.fence, &c.rest,
        ]);
    }

    /// One row's cells, each escaped and at most `MAX_SHOWN` characters.
    fn row_cells(row: &Row) -> Cells {
        let name = shown::name(&row.name);
        let node = shown::name(&row.node);
        let slot = row.slot.unwrap_or_default();
        let kind = match row.kind {
            Kind::Mutex => "mutex".to_owned(),
            Kind::Permit => format!("permit #{slot} ({} held)", row.held.unwrap_or_default()),
            Kind::Reader => format!("reader #{slot} ({} held)", row.held.unwrap_or_default()),
            Kind::Writer => match row.slots {
                Some(slots) if slots < MultiRwLock::READER_SLOTS => {
                    format!("writer ({slots} of {} slots)", MultiRwLock::READER_SLOTS)
                }
                _ => "writer".to_owned(),
            },
            Kind::Slots => "slots".to_owned(),
        };
        if let Some(error) = &row.error {
            let what = match row.kind {
                Kind::Mutex => "unreachable",
                _ => "unread",
            };
            return Cells {
                name,
                node,
                kind,
                owner: String::new(),
                holds: String::new(),
                ttl: String::new(),
                fence: String::new(),
                rest: format!("{what}: {}", shown::name(error)),
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
            kind,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_match_only_themselves() {
        assert_eq!(glob_escaped("plain:name-1"), "plain:name-1");
        assert_eq!(glob_escaped(r"a*b?c[d]e\f"), r"a\*b\?c\[d\]e\\f");
    }
}
