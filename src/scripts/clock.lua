-- The server's clock, read in one place (`TIME`): prepended to every
-- script that reads it.

-- The server's time as `TIME` answers it ({seconds, µs}) and in ms.
local function quorumlock_time()
  local t = redis.call('TIME')
  return t, t[1] * 1000 + math.floor(t[2] / 1000)
end

local function quorumlock_now_ms()
  local _, now = quorumlock_time()
  return now
end
