-- Give back one hold on every lock key of a guard, owner-checked.
-- KEYS[1..m] lock keys. ARGV[1] owner token, ARGV[2] the hold's entry id,
-- ARGV[3] '1' to announce. A key whose last hold goes is deleted, and with
-- ARGV[3] = '1' the node announces on `quorumlock:released:<key>` that it
-- is free (waiters retry at once). A rollback does not announce: the key
-- was free before the attempt, and a notice would wake the waiter that
-- rolled back (and every other) for nothing.
-- Reply: 0 no key carried this hold (expired, released, or another
-- owner's); 1 the hold is gone and every key of it was deleted; 2 the hold
-- is gone but the owner's other holds keep some key (re-entry).
local result = 0
for _, key in ipairs(KEYS) do
  local found = redis.call('HMGET', key, 'owner', ARGV[2])
  if found[1] == ARGV[1] and found[2] then
    if redis.call('HLEN', key) <= 2 then
      -- Ours was the last hold (the other field is the owner).
      redis.call('DEL', key)
      if ARGV[3] == '1' then
        redis.call('PUBLISH', 'quorumlock:released:' .. key, '')
      end
      if result == 0 then result = 1 end
    else
      redis.call('HDEL', key, ARGV[2])
      result = 2
    end
  end
end
return result
