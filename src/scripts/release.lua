-- Give back one hold on every lock key of a guard, owner-checked.
-- KEYS[1..m] lock keys. ARGV[1] owner token, ARGV[2] the hold's entry id.
-- A key whose last hold goes is deleted, and the node announces on
-- `quorumlock:released:<key>` that it is free (waiters retry at once).
-- Reply: 0 no key carried our token; 1 our hold is gone and every key of
-- ours was deleted; 2 our hold is gone but the owner's other holds keep
-- some key (re-entry).
local result = 0
for _, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'owner') == ARGV[1] then
    redis.call('HDEL', key, ARGV[2])
    if redis.call('HLEN', key) <= 1 then
      redis.call('DEL', key)
      redis.call('PUBLISH', 'quorumlock:released:' .. key, '')
      if result == 0 then result = 1 end
    else
      result = 2
    end
  end
end
return result
