-- Give back one hold on every lock key of a guard, owner-checked.
-- KEYS[1..m] lock keys. ARGV[1] owner token, ARGV[2] the hold's entry id.
-- A key whose last hold goes is deleted, and if a waiter marked it (see
-- acquire.lua) the node announces on `quorumlock:released:<key>` that it is
-- free: waiters retry at once. A rollback too: a waiter that found the
-- attempt's key in its way waits for it. A key nobody marked is freed
-- without a PUBLISH.
-- Reply: 0 no key carried this hold (expired, released, or another
-- owner's); 1 the hold is gone and every key of it was deleted; 2 the hold
-- is gone but the owner's other holds keep some key (re-entry).
local result = 0
for _, key in ipairs(KEYS) do
  local found = redis.call('HMGET', key, 'owner', ARGV[2], 'waiters')
  if found[1] == ARGV[1] and found[2] then
    -- The fields besides the holds: the owner, and the waiters' mark.
    if redis.call('HLEN', key) <= (found[3] and 3 or 2) then
      -- Ours was the last hold.
      redis.call('DEL', key)
      if found[3] then
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
