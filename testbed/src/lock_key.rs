//! Reading a lock key as the library writes it, in either of its two
//! forms: a string `"<owner> <entry>"` (`" w"` after it once a waiter
//! marked it) while it has one hold, a hash (field `owner`, one field per
//! hold, `waiters`) once re-entered. A string in neither form is not a lock
//! key (someone else's data). The library's `scripts/layout.lua` is the
//! authority; this is what the testbed's checks read.

/// `lock_owner(key)`, in Lua: the owner token of lock key `key`, `false`
/// (nil) when it is absent or not a lock key. Never raises.
macro_rules! owner_function {
    () => {
        r#"
local function lock_owner(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then
    local owner, _, rest = string.match(v, '^([0-9a-f]+) ([0-9a-f]+)(.*)$')
    if rest == '' or rest == ' w' then
      return owner
    end
    return false
  elseif not v then
    return false
  end
  local owner = redis.pcall('HGET', key, 'owner')
  if type(owner) == 'table' then
    return false
  end
  return owner
end
"#
    };
}

/// The owner token of the lock key `KEYS[1]`, `false` (nil) when it is
/// absent or not a lock key: one call, so that a pipelined probe reads
/// the owner and the PTTL of the same key at one instant.
pub const OWNER_SCRIPT: &str = concat!(owner_function!(), "return lock_owner(KEYS[1])\n");

/// The owner of each of `KEYS` (nil where absent or not a lock key), read
/// in one call: at one instant.
pub const OWNERS_SCRIPT: &str = concat!(
    owner_function!(),
    "local out = {}\nfor i = 1, #KEYS do out[i] = lock_owner(KEYS[i]) end\nreturn out\n"
);

/// For a prober: of `KEYS`, each one that is a lock key, as its index
/// (1-based), owner token and `PTTL`, flat; read in one call, at one
/// instant.
pub const PROBE_SCRIPT: &str = concat!(
    owner_function!(),
    r#"local out = {}
for i = 1, #KEYS do
  local owner = lock_owner(KEYS[i])
  if owner then
    out[#out + 1] = i
    out[#out + 1] = owner
    out[#out + 1] = redis.call('PTTL', KEYS[i])
  end
end
return out
"#
);

/// Reads every lock key among `keys` at one instant ([`PROBE_SCRIPT`]):
/// `(key, owner, PTTL in ms)` for each present, in the order of `keys`.
pub fn probe(
    conn: &mut redis::Connection,
    keys: &[String],
) -> redis::RedisResult<Vec<(String, String, i64)>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let flat: Vec<redis::Value> = redis::cmd("EVAL")
        .arg(PROBE_SCRIPT)
        .arg(keys.len())
        .arg(keys)
        .query(conn)?;
    let mut found = Vec::with_capacity(flat.len() / 3);
    for triple in flat.chunks(3) {
        if let [
            redis::Value::Int(i),
            redis::Value::BulkString(owner),
            redis::Value::Int(pttl),
        ] = triple
            && let Some(key) = i
                .checked_sub(1)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| keys.get(i))
        {
            found.push((
                key.clone(),
                String::from_utf8_lossy(owner).into_owned(),
                *pttl,
            ));
        }
    }
    Ok(found)
}

/// Adds a read of lock key `key`'s owner to `pipe` (its reply: the owner
/// token, or nil).
pub fn read_owner(pipe: &mut redis::Pipeline, key: &str) {
    pipe.cmd("EVAL").arg(OWNER_SCRIPT).arg(1).arg(key);
}

/// The owner token of lock key `key` (`None`: absent, or not a lock key).
pub fn owner(conn: &mut redis::Connection, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("EVAL")
        .arg(OWNER_SCRIPT)
        .arg(1)
        .arg(key)
        .query(conn)
}

/// The owner token and the waiter's mark of a lock key's string form,
/// `"<owner> <entry>"` or `"<owner> <entry> w"` (lowercase hex); `None`
/// for any other string.
pub fn parse(value: &str) -> Option<(&str, bool)> {
    let (body, marked) = match value.strip_suffix(" w") {
        Some(body) => (body, true),
        None => (value, false),
    };
    let (owner, entry) = body.split_once(' ')?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (hex(owner) && hex(entry)).then_some((owner, marked))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_only_the_two_string_forms() {
        assert_eq!(parse("0af1 09"), Some(("0af1", false)));
        assert_eq!(parse("0af1 09 w"), Some(("0af1", true)));
        for other in [
            "",
            "0af1",
            "0af1 ",
            " 09",
            "0af1 09 ",
            "0af1 09 w ",
            "0AF1 09",
            "not a lock",
            "ab w",
            "0af1 09 x",
        ] {
            assert_eq!(parse(other), None, "{other:?}");
        }
    }
}
