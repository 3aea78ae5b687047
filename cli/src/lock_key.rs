//! Reading a lock key in either form the library writes: a string
//! `"<owner> <entry>"` (owner token and entry id, lowercase hex) while it
//! has one hold, `" w"` after it once a waiter marked it; a hash (field
//! `owner`, one field per hold, `waiters` once marked) once re-entered. A
//! string in neither form is someone else's data, not a lock key. The
//! library's `scripts/layout.lua` is the authority.
//!
//! Both reads are scripts that only read: one call reads a key whatever
//! its form, at one instant, and they run with commands the library's own
//! ACL already allows (DEPLOYING.md).

use quorumlock::redis;

/// `KEYS[1]`'s owner token and hold count: `{owner, holds}`, `{nil, 0}`
/// when it is absent. A key that is not a lock key (a string in neither
/// form, a key of another type) fails with `WRONGTYPE`, as the library's
/// scripts refuse it.
pub const READ: &str = r"
local v = redis.pcall('GET', KEYS[1])
if not v then
  return {false, 0}
elseif type(v) == 'string' then
  local owner, _, rest = string.match(v, '^([0-9a-f]+) ([0-9a-f]+)(.*)$')
  if rest == '' or rest == ' w' then
    return {owner, 1}
  end
  -- Fails as a key of any other type does, in the server's own words.
  redis.call('HGET', KEYS[1], 'owner')
end
local found = redis.call('HMGET', KEYS[1], 'owner', 'waiters')
local holds = redis.call('HLEN', KEYS[1]) - 1 - (found[2] and 1 or 0)
return {found[1], math.max(holds, 0)}
";

/// Of the keys in `ARGV` (one `SCAN` page), the indexes (from 1) of those
/// that look like held locks: either form, with a TTL. The keys come as
/// arguments, not `KEYS`, so that a key the user may not read (an ACL)
/// fails its own read, and is left out, instead of the whole call.
pub const HELD: &str = r"
local held = {}
for i, key in ipairs(ARGV) do
  local v = redis.pcall('GET', key)
  local lock = false
  if type(v) == 'string' then
    local _, _, rest = string.match(v, '^([0-9a-f]+) ([0-9a-f]+)(.*)$')
    lock = rest == '' or rest == ' w'
  elseif type(v) == 'table' and string.sub(v.err or '', 1, 9) == 'WRONGTYPE' then
    lock = type(redis.pcall('HGET', key, 'owner')) == 'string'
  end
  if lock then
    local pttl = redis.pcall('PTTL', key)
    if type(pttl) == 'number' and pttl > 0 then
      held[#held + 1] = i
    end
  end
end
return held
";

/// Adds a [`READ`] of lock key `key` to `pipe`.
pub fn read(pipe: &mut redis::Pipeline, key: &str) {
    pipe.cmd("EVAL").arg(READ).arg(1).arg(key);
}

/// A [`HELD`] call over `keys`.
pub fn held(keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(HELD).arg(0).arg(keys);
    cmd
}
