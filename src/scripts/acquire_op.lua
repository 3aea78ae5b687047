-- One acquire of a batch (see batch.lua for what it answers): takes the m
-- lock keys KEYS[at+1..at+m] for `token`'s hold `id`, all or nothing, and
-- reads their fencing counters KEYS[at+m+1..at+2m]; `waits`: mark a key
-- found held for a waiter. Needs epoch.lua (quorumlock_counter).
local function quorumlock_acquire(at, m, token, id, ttl, waits)
  local fresh = {}
  for i = 1, m do
    local key = KEYS[at + i]
    if redis.call('HLEN', key) == 0 then
      fresh[i] = true
    else
      local owner = redis.call('HGET', key, 'owner')
      if owner ~= token then
        if waits and owner then
          redis.call('HSET', key, 'waiters', 1)
        end
        return {0, redis.call('PTTL', key), i}
      end
    end
  end
  local out = {1}
  for i = 1, m do
    local key = KEYS[at + i]
    redis.call('HSET', key, 'owner', token, id, 1)
    -- Never shorten: another hold of the same owner may have a longer TTL.
    if fresh[i] or redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
    local value, current = quorumlock_counter(KEYS[at + m + i])
    out[#out + 1] = value
    out[#out + 1] = current
  end
  return out
end

