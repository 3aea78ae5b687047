-- Lock keys, in one of two forms. Prepended to every script that reads or
-- writes one (acquire, release, handoff, extend, renew, fencing raise).
--
-- A key with one hold is a string "<owner> <entry>" (owner token and entry
-- id, both lowercase hex, as the client writes them), with " w" appended
-- once a waiter marked it: the common case, taken with one SET NX PX and
-- given back with GET + DEL. A key held
-- more than once (re-entry) is a hash: field `owner` = the owner token,
-- one field per hold (its entry id, value 1), and `waiters` = 1 once
-- marked; the hold count is the rest. A string in neither form, or a key
-- of another type, is someone else's data: never overwritten.
--
-- The keys beside a lock key are named after it, as keys.rs names them:
-- its fencing counter, its waiter queue and the queue's leases. The
-- acquire and release scripts (the hot path, alone or in a batch) take
-- only the lock keys and name the rest here: every argument a call sends
-- costs the server more than naming a key in the script (three of an
-- acquire's four keys and two of a release's three were about a tenth of
-- a batch's server time, measured with callgrind). Redis asks scripts to
-- declare every key so that a cluster can route them; quorumlock's nodes
-- are independent masters, never a Redis Cluster (whose slots a lock key
-- and its counter would not share anyway).

local function quorumlock_fence_of(key)
  return 'quorumlock:fence:' .. key
end

local function quorumlock_queue_of(key)
  return 'quorumlock:queue:' .. key
end

local function quorumlock_leases_of(key)
  return 'quorumlock:leases:' .. key
end

-- The node's epoch marker (epoch.lua): the vote scripts declare it as
-- their last key; a release reads it only to grant a name (release.lua).
local function quorumlock_epoch_key()
  return 'quorumlock:epoch'
end

-- The owner, the entry and whether it is marked, of lock string `v`;
-- nil when `v` is not one.
local function quorumlock_parse(v)
  -- The pattern the testbed's and the command's readers use too.
  local owner, entry, rest = string.match(v, '^([0-9a-f]+) ([0-9a-f]+)(.*)$')
  if rest == '' then
    return owner, entry, false
  elseif rest == ' w' then
    return owner, entry, true
  end
  return nil
end

-- How `key` is held: 'free'; 'hash' (read it with the H* commands, which
-- refuse a key of another type with WRONGTYPE); or 'string' and its owner,
-- entry and mark. A string that is not a lock key raises WRONGTYPE.
local function quorumlock_read(key)
  local v = redis.pcall('GET', key)
  if not v then
    return 'free'
  elseif type(v) == 'table' then
    return 'hash'
  end
  local owner, entry, marked = quorumlock_parse(v)
  if not owner then
    -- Fails as any other type does, in every Redis version's own words.
    redis.call('HGET', key, 'owner')
  end
  return 'string', owner, entry, marked
end

-- The owner token of `key`: false when it is absent (or a hash without
-- one), '' when it is not a lock key. Never raises.
local function quorumlock_owner(key)
  local v = redis.pcall('GET', key)
  if not v then
    return false
  elseif type(v) == 'string' then
    return quorumlock_parse(v) or ''
  end
  local owner = redis.pcall('HGET', key, 'owner')
  if type(owner) == 'table' then
    return ''
  end
  return owner
end

-- Turns a one-hold string key into the hash form, its TTL kept (before a
-- second hold goes in). A key already a hash, or absent, is left alone.
local function quorumlock_as_hash(key)
  local state, owner, entry, marked = quorumlock_read(key)
  if state ~= 'string' then
    return
  end
  local pttl = redis.call('PTTL', key)
  redis.call('DEL', key)
  if marked then
    redis.call('HSET', key, 'owner', owner, entry, '1', 'waiters', '1')
  else
    redis.call('HSET', key, 'owner', owner, entry, '1')
  end
  if pttl > 0 then
    redis.call('PEXPIRE', key, pttl)
  end
end

-- Marks a held `key` for its release to announce itself: found as
-- `state`, `owner`, `entry`, `marked` (quorumlock_read). Its TTL is kept.
local function quorumlock_mark(key, state, owner, entry, marked)
  if state == 'hash' then
    redis.call('HSET', key, 'waiters', '1')
  elseif not marked then
    redis.call('SET', key, owner .. ' ' .. entry .. ' w', 'KEEPTTL')
  end
end
