-- Renew many locks on this node in one call (the watchdog's batch).
-- KEYS[i] lock key; ARGV[2i-1] its owner token, ARGV[2i] its TTL in ms.
-- Reply: one integer per key:
--   1  our token was there: TTL reset
--   2  the key was absent (node restarted empty, failover): re-taken with
--      our token, "healed"
--   0  another owner holds it: left alone
--  -1  the key holds a non-string value: left alone
-- GET runs under pcall so that one wrong-typed key cannot fail the renewal
-- of every other lock in the batch.
local out = {}
for i, key in ipairs(KEYS) do
  local token = ARGV[2 * i - 1]
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' and holder.err then
    out[i] = -1
  elseif holder == token then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    out[i] = 1
  elseif holder == false then
    redis.call('SET', key, token, 'PX', ARGV[2 * i])
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
