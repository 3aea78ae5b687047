-- Reset the lock key's TTL only if it carries our token (never a plain PEXPIRE).
-- KEYS[1] lock key, ARGV[1] owner token, ARGV[2] TTL in milliseconds.
-- Reply: 1 extended, 0 not ours (absent or held by another owner).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
