-- Take the lock on this node if it is free (or already ours).
-- KEYS[1] lock key, ARGV[1] owner token, ARGV[2] TTL in milliseconds.
-- Reply: status OK when we hold it now; otherwise the holder's PTTL
-- (-1 when the holder's key has no expiry).
-- GET fails with WRONGTYPE when the key holds a non-string value, so a key
-- that is not a lock is reported, never overwritten.
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return redis.status_reply('OK')
end
return redis.call('PTTL', KEYS[1])
