-- One release of a batch (see batch.lua for what it answers): gives back
-- `token`'s hold `id` on the m lock keys KEYS[at+1..at+m]; `announce`:
-- publish for a key it frees that a waiter marked.
local function quorumlock_release(at, m, token, id, announce)
  local result = 0
  for i = 1, m do
    local key = KEYS[at + i]
    local found = redis.call('HMGET', key, 'owner', id, 'waiters')
    if found[1] == token and found[2] then
      -- The fields besides the holds: the owner, and the waiters' mark.
      local others = found[3] and 2 or 1
      if redis.call('HLEN', key) <= others + 1 then
        -- Ours was the last hold.
        redis.call('DEL', key)
        if announce and found[3] then
          redis.call('PUBLISH', 'quorumlock:released:' .. key, '')
        end
        if result == 0 then result = 1 end
      else
        redis.call('HDEL', key, id)
        result = 2
      end
    end
  end
  return result
end

