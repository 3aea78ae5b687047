-- Giving back one hold of a lock key: prepended, after layout.lua, to the
-- scripts that do (release, handoff).

-- Gives back `hold` ("<owner token> <entry id>") on lock `key`,
-- owner-checked. Returns 0 when the hold was not there (expired, released,
-- or another owner's), 1 when it was the last hold and the key is deleted,
-- 2 when the owner's other holds keep the key; whether a waiter marked
-- the key; and whether it was a one-hold string (a key never re-entered).
local function quorumlock_give_back(key, hold)
  local v = redis.pcall('GET', key)
  if not v then
    return 0, false
  elseif type(v) == 'string' then
    -- One hold: ours only if it is exactly this one.
    if v == hold then
      redis.call('DEL', key)
      return 1, false, true
    elseif v == hold .. ' w' then
      redis.call('DEL', key)
      return 1, true, true
    end
    if not quorumlock_parse(v) then
      -- Someone else's data: fails as any other type does.
      redis.call('HGET', key, 'owner')
    end
    return 0, false
  end
  local token, id = string.match(hold, '^(%S+) (%S+)$')
  if not token then
    -- No hold at all (a call that only leaves the queues).
    return 0, false
  end
  local found = redis.call('HMGET', key, 'owner', id, 'waiters')
  if found[1] ~= token or not found[2] then
    return 0, found[3]
  end
  -- The fields besides the holds: the owner, and the waiters' mark.
  if redis.call('HLEN', key) <= (found[3] and 3 or 2) then
    redis.call('DEL', key)
    return 1, found[3]
  end
  redis.call('HDEL', key, id)
  return 2, found[3]
end
