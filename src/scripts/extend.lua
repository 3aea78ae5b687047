-- Give every lock key of a guard at least a new TTL, only if all carry our
-- owner token (never a plain PEXPIRE).
-- KEYS[1..m] lock keys, then the epoch marker (epoch.lua). ARGV[1] owner token, ARGV[2] entry id, ARGV[3] TTL ms,
-- ARGV[4] the settled marker, ARGV[5] the quarantine in ms (epoch.lua).
-- Reply: 1 every key is ours and lives at least the TTL now (a longer TTL
-- set by another hold of the same owner is kept); 0 some key is not ours
-- (nothing written).
local young = quorumlock_young()
local ttl = tonumber(ARGV[3])
local m = #KEYS - 1
local strings = {}
for i = 1, m do
  local state, owner = quorumlock_read(KEYS[i])
  if state == 'hash' then
    owner = redis.call('HGET', KEYS[i], 'owner')
  end
  if owner ~= ARGV[1] then
    return quorumlock_answer(young, 0)
  end
  strings[i] = state == 'string'
end
for i = 1, m do
  -- A second hold: the hash form (layout.lua).
  if strings[i] then
    quorumlock_as_hash(KEYS[i])
  end
  redis.call('HSET', KEYS[i], ARGV[2], 1)
  if redis.call('PTTL', KEYS[i]) < ttl then
    -- The argument as it came: a Lua number would be formatted.
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
  end
end
return quorumlock_answer(young, 1)
