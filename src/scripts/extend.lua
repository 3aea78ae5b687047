-- Give every lock key of a guard at least a new TTL, only if all carry our
-- owner token (never a plain PEXPIRE).
-- KEYS[1..m] lock keys. ARGV[1] owner token, ARGV[2] entry id, ARGV[3] TTL ms,
-- ARGV[4] the settled marker, ARGV[5] the quarantine in ms (epoch.lua).
-- Reply: 1 every key is ours and lives at least the TTL now (a longer TTL
-- set by another hold of the same owner is kept); 0 some key is not ours
-- (nothing written).
local young = quorumlock_young()
local ttl = tonumber(ARGV[3])
for _, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'owner') ~= ARGV[1] then
    return quorumlock_answer(young, 0)
  end
end
for _, key in ipairs(KEYS) do
  redis.call('HSET', key, ARGV[2], 1)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return quorumlock_answer(young, 1)
