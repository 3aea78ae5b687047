-- Delete the lock key only if it carries our token (never a plain DEL).
-- KEYS[1] lock key, ARGV[1] owner token. Reply: 1 deleted, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
