//! [`FencedResource`]: a small protected resource that accepts a write only
//! with a fencing token at least as large as the last one it accepted.
//!
//! It is a Redis key on a server of its own (not one of the lock nodes),
//! updated by one Lua script, so the check and the write are one step. Use
//! it in examples and tests, or as the model for your own resource: a
//! database row with a `last_token` column and `UPDATE … WHERE last_token
//! <= $token` does the same.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = quorumlock_testbed::Testbed::start(1)?;
//! # let resource_url = server.urls()[0].clone();
//! use quorumlock::fenced::{FencedResource, Write};
//!
//! let resource = FencedResource::open(&resource_url, "report").await?;
//! assert_eq!(resource.write(7, "v1").await?, Write::Accepted);
//! assert_eq!(resource.write(7, "v1 again").await?, Write::Accepted, "same holder");
//! assert_eq!(resource.write(5, "stale").await?, Write::Rejected { last: 7 });
//! assert_eq!(resource.read().await?, Some((7, "v1 again".to_string())));
//! # Ok(())
//! # }
//! ```

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

/// Accept `ARGV[2]` as the value when `ARGV[1]` is at least the last
/// accepted token. Reply: {1, token} accepted, {0, last} rejected. Sent
/// with `EVAL` (the server caches it).
const WRITE: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < last then
  return {0, last}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, token}
";

/// Record `ARGV[1]` as the largest token seen (if it is) and return the
/// value. Reply: {1, value or false} or {0, last} when a larger token was
/// seen before.
const READ: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < last then
  return {0, last}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'value')}
";

/// The outcome of [`FencedResource::read_fenced`].
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::fenced::{FencedResource, Read, Write};
///
/// # let server = quorumlock_testbed::Testbed::start(1)?;
/// # let resource_url = server.urls()[0].clone();
/// let ledger = FencedResource::open(&resource_url, "ledger").await?;
/// ledger.write(9, "v9").await?;
/// assert_eq!(ledger.read_fenced(9).await?, Read::Value(Some("v9".into())));
/// assert_eq!(ledger.read_fenced(8).await?, Read::Rejected { last: 9 });
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Read {
    /// The token was at least the largest seen; it is now the largest, and
    /// this is the stored value (`None` before the first write).
    Value(Option<String>),
    /// A larger token was seen before: this reader is stale.
    Rejected {
        /// The largest token seen so far.
        last: u64,
    },
}

/// The outcome of [`FencedResource::write`].
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::fenced::{FencedResource, Read, Write};
///
/// # let server = quorumlock_testbed::Testbed::start(1)?;
/// # let resource_url = server.urls()[0].clone();
/// let ledger = FencedResource::open(&resource_url, "ledger").await?;
/// assert_eq!(ledger.write(5, "new").await?, Write::Accepted);
/// assert_eq!(ledger.write(4, "stale").await?, Write::Rejected { last: 5 });
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Write {
    /// The token was at least the last accepted one; the value is stored.
    Accepted,
    /// A larger token was accepted before: this writer is stale.
    Rejected {
        /// The largest token accepted so far.
        last: u64,
    },
}

/// A value on a Redis server that only fenced writes can change.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::fenced::{FencedResource, Read, Write};
///
/// # let server = quorumlock_testbed::Testbed::start(1)?;
/// # let resource_url = server.urls()[0].clone();
/// let ledger = FencedResource::open(&resource_url, "ledger").await?;
/// // Each holder writes with its fencing token; a stale holder is refused.
/// assert_eq!(ledger.write(12, "from holder 12").await?, Write::Accepted);
/// assert!(matches!(ledger.write(11, "from a paused holder").await?, Write::Rejected { .. }));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FencedResource {
    conn: MultiplexedConnection,
    key: String,
}

impl std::fmt::Debug for FencedResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedResource")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl FencedResource {
    /// Connects to the server at `url` and uses the hash `key` there.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = quorumlock_testbed::Testbed::start(1)?;
    /// # let resource_url = server.urls()[0].clone();
    /// use quorumlock::fenced::FencedResource;
    ///
    /// // A server of its own, not one of the lock's nodes.
    /// let ledger = FencedResource::open(&resource_url, "ledger").await?;
    /// assert_eq!(ledger.read().await?, None, "nothing written yet");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the connect; nothing is written.
    pub async fn open(url: &str, key: &str) -> Result<FencedResource, RedisError> {
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(FencedResource {
            conn,
            key: key.to_string(),
        })
    }

    /// Uses the hash `key` over an existing connection (it is cloned per
    /// call, so one connection can serve many resources).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::fenced::{FencedResource, Write};
    ///
    /// # let server = quorumlock_testbed::Testbed::start(1)?;
    /// # let resource_url = server.urls()[0].clone();
    /// let conn = quorumlock::redis::Client::open(resource_url.as_str())?
    ///     .get_multiplexed_async_connection()
    ///     .await?;
    /// let orders = FencedResource::with_connection(conn.clone(), "orders");
    /// let stock = FencedResource::with_connection(conn, "stock");
    /// assert_eq!(orders.write(1, "o").await?, Write::Accepted);
    /// assert_eq!(stock.write(1, "s").await?, Write::Accepted);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_connection(conn: MultiplexedConnection, key: &str) -> FencedResource {
        FencedResource {
            conn,
            key: key.to_string(),
        }
    }

    /// Stores `value` if `token` is at least the last accepted token.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = quorumlock_testbed::Testbed::start(1)?;
    /// # let resource_url = server.urls()[0].clone();
    /// use quorumlock::fenced::{FencedResource, Write};
    ///
    /// let ledger = FencedResource::open(&resource_url, "ledger").await?;
    /// assert_eq!(ledger.write(41, "balance 100").await?, Write::Accepted);
    /// // A holder that paused past its lease comes back with an older token.
    /// assert_eq!(ledger.write(40, "balance 0").await?, Write::Rejected { last: 41 });
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the write done (one
    /// script, applied whole or not at all); read to find out.
    pub async fn write(&self, token: u64, value: &str) -> Result<Write, RedisError> {
        Ok(match self.run(WRITE, token, Some(value)).await? {
            Ok(_) => Write::Accepted,
            Err(last) => Write::Rejected { last },
        })
    }

    /// Reads the value as the holder of `token`, for a read-modify-write.
    ///
    /// The resource remembers `token` as the largest it has seen, so a
    /// stale holder (smaller token) that read *before* this call can no
    /// longer write: without that, a stale holder's read-then-write could
    /// interleave with a newer holder's and one update would be lost even
    /// though every write carried a valid token.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = quorumlock_testbed::Testbed::start(1)?;
    /// # let resource_url = server.urls()[0].clone();
    /// use quorumlock::fenced::{FencedResource, Read, Write};
    ///
    /// let counter = FencedResource::open(&resource_url, "counter").await?;
    /// // A (token 3) reads, then B (token 4) reads and writes.
    /// assert_eq!(counter.read_fenced(3).await?, Read::Value(None));
    /// assert_eq!(counter.read_fenced(4).await?, Read::Value(None));
    /// assert_eq!(counter.write(4, "1").await?, Write::Accepted);
    /// // A's late write would lose B's update: refused.
    /// assert_eq!(counter.write(3, "1").await?, Write::Rejected { last: 4 });
    /// assert_eq!(counter.read_fenced(3).await?, Read::Rejected { last: 4 });
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`write`](Self::write): the token may or may not have been
    /// recorded.
    pub async fn read_fenced(&self, token: u64) -> Result<Read, RedisError> {
        match self.run(READ, token, None).await? {
            Ok(Value::Nil) => Ok(Read::Value(None)),
            Ok(Value::BulkString(bytes)) => Ok(Read::Value(Some(
                String::from_utf8_lossy(&bytes).into_owned(),
            ))),
            Ok(other) => Err(unexpected(other)),
            Err(last) => Ok(Read::Rejected { last }),
        }
    }

    /// Runs one of the scripts (both reply `{1, x}` when the token passed,
    /// `{0, last}` when a larger token was seen): `Ok(x)` or `Err(last)`.
    async fn run(
        &self,
        script: &str,
        token: u64,
        value: Option<&str>,
    ) -> Result<Result<Value, u64>, RedisError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(1).arg(&self.key).arg(token);
        if let Some(value) = value {
            cmd.arg(value);
        }
        let reply: Value = cmd.query_async(&mut conn).await?;
        let Value::Array(mut items) = reply else {
            return Err(unexpected(reply));
        };
        match items.as_slice() {
            [Value::Int(1), _] => Ok(Ok(items.swap_remove(1))),
            // A negative last token is no token: refused, not read as 0.
            [Value::Int(0), Value::Int(last)] if *last >= 0 => Ok(Err(last.unsigned_abs())),
            _ => Err(unexpected(Value::Array(items))),
        }
    }

    /// The last accepted token and value, if any write was accepted.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = quorumlock_testbed::Testbed::start(1)?;
    /// # let resource_url = server.urls()[0].clone();
    /// use quorumlock::fenced::FencedResource;
    ///
    /// let ledger = FencedResource::open(&resource_url, "ledger").await?;
    /// ledger.write(7, "v7").await?;
    /// assert_eq!(ledger.read().await?, Some((7, "v7".to_string())));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// A plain read: drop it at any time.
    pub async fn read(&self) -> Result<Option<(u64, String)>, RedisError> {
        let mut conn = self.conn.clone();
        let (token, value): (Option<u64>, Option<String>) = redis::cmd("HMGET")
            .arg(&self.key)
            .arg("token")
            .arg("value")
            .query_async(&mut conn)
            .await?;
        Ok(token.zip(value))
    }
}

fn unexpected(reply: Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply from a fenced resource script",
        format!("{reply:?}"),
    ))
}
