-- Raise the fencing counters of a guard's lock keys to a token, only while
-- every key carries our owner token (so only a holder raises, and only with
-- a token it computed from a sound read: see src/fence.rs).
-- KEYS[1..m] lock keys, KEYS[m+1..2m] their fencing counters.
-- ARGV[1] owner token, ARGV[2] the fencing token p.
-- Reply: 1 every counter is now >= p; 0 some key is not ours (nothing
-- written). Counters never go down.
local m = #KEYS / 2
for i = 1, m do
  if redis.call('HGET', KEYS[i], 'owner') ~= ARGV[1] then
    return 0
  end
end
local p = tonumber(ARGV[2])
for i = 1, m do
  local c = tonumber(redis.call('GET', KEYS[m + i]) or '0')
  if c < p then
    redis.call('SET', KEYS[m + i], ARGV[2])
  end
end
return 1
