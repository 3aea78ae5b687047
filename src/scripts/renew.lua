-- Renew many guards on this node in one call (the watchdog's batch).
-- KEYS: every guard's lock keys, guard after guard.
-- ARGV: per guard, four values: owner token, entry id, TTL in ms, and how
--       many of KEYS are its keys.
-- Reply: one integer per guard:
--   1  every key carried our token: TTL raised to at least the TTL
--   2  as 1, but some key was absent (node restarted empty, failover) and
--      was re-taken with our token and entry: "healed"
--   0  some key is held by another owner: nothing written for this guard
--  -1  some key holds a value of another type: nothing written
-- HGET runs under pcall so that one wrong-typed key cannot fail the renewal
-- of every other guard in the batch.
local out = {}
local k = 1
local a = 1
while a <= #ARGV do
  local token, entry = ARGV[a], ARGV[a + 1]
  local ttl, n = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local code = 1
  for i = k, k + n - 1 do
    local owner = redis.pcall('HGET', KEYS[i], 'owner')
    if type(owner) == 'table' and owner.err then
      code = -1
      break
    elseif owner == false then
      if redis.call('EXISTS', KEYS[i]) == 1 then
        code = 0
        break
      end
      code = 2
    elseif owner ~= token then
      code = 0
      break
    end
  end
  if code > 0 then
    for i = k, k + n - 1 do
      redis.call('HSET', KEYS[i], 'owner', token, entry, 1)
      if redis.call('PTTL', KEYS[i]) < ttl then
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
    end
  end
  out[#out + 1] = code
  k = k + n
  a = a + 4
end
return out
