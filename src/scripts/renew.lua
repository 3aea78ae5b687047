-- Renew many guards on this node in one call (the watchdog's batch).
-- KEYS: every guard's lock keys, guard after guard; then, in the same
-- order, each key's force-release marker (`quorumlock:forced:<key>`, see
-- force_release.lua); then the epoch marker (epoch.lua).
-- ARGV: per guard, four values: owner token, entry id, TTL in ms, and how
--       many of KEYS are its keys; then the settled marker and the
--       quarantine in ms (epoch.lua).
-- Reply: one integer per guard:
--   1  every key carried our hold: TTL raised to at least the TTL
--   2  as 1, but some key was absent (node restarted empty, failover) and
--      was re-taken with our token and entry, or lacked our entry: "healed"
--   0  some key is held by another owner, or was force-released (absent,
--      with a `quorumlock:forced:<key>` marker): nothing written for this guard
--  -1  some key holds a value of another type: nothing written
-- Keys are read under pcall so that one wrong-typed key cannot fail the
-- renewal of every other guard in the batch. A key that already carries our
-- hold is only given its TTL (no write to the hold): the common case, a
-- string key (layout.lua), costs GET, PTTL and at most a PEXPIRE.

-- Key `key` as renewing hold `entry` sees it: its form ('free', 'string',
-- 'hash', or 'other': a value of another type), its owner (false: absent,
-- or a hash without one) and whether it carries `entry`. Never raises.
local function renew_read(key, entry)
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then
    local owner, held = quorumlock_parse(v)
    if not owner then
      return 'other'
    end
    return 'string', owner, held == entry
  elseif not v then
    return 'free', false, false
  end
  local found = redis.pcall('HMGET', key, 'owner', entry)
  if found.err then
    return 'other'
  end
  return 'hash', found[1], found[2] ~= false
end
local young = quorumlock_young()
local out = {}
local k = 1
local a = 1
-- Lock key i's force-release marker is KEYS[forced + i].
local forced = (#KEYS - 1) / 2
while a < #ARGV - 1 do
  local token, entry = ARGV[a], ARGV[a + 1]
  local ttl, n = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local code = 1
  -- Per key: 'ok' (ours, entry present), 'entry' (ours, entry missing),
  -- 'absent' (re-take).
  local state, strings = {}, {}
  for i = k, k + n - 1 do
    local found, owner, held = renew_read(KEYS[i], entry)
    if found == 'other' then
      code = -1
      break
    elseif owner == false then
      -- Held by another (or not a lock key), or force-released by an
      -- operator (quorumlock:forced:<key>): never re-taken.
      if redis.call('EXISTS', KEYS[i], KEYS[forced + i]) > 0 then
        code = 0
        break
      end
      state[i] = 'absent'
      code = 2
    elseif owner ~= token then
      code = 0
      break
    elseif not held then
      state[i] = 'entry'
      strings[i] = found == 'string'
      code = 2
    else
      state[i] = 'ok'
    end
  end
  if code > 0 then
    for i = k, k + n - 1 do
      if state[i] == 'absent' then
        redis.call('SET', KEYS[i], token .. ' ' .. entry, 'PX', ARGV[a + 2])
      else
        if state[i] == 'entry' then
          if strings[i] then
            quorumlock_as_hash(KEYS[i])
          end
          redis.call('HSET', KEYS[i], entry, 1)
        end
        if redis.call('PTTL', KEYS[i]) < ttl then
          -- The argument as it came: a Lua number would be formatted.
          redis.call('PEXPIRE', KEYS[i], ARGV[a + 2])
        end
      end
    end
  end
  out[#out + 1] = code
  k = k + n
  a = a + 4
end
return quorumlock_answer(young, out)
