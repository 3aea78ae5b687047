-- An operator's release of a name, whatever its owner: deletes the lock
-- key, leaves `quorumlock:forced:<key>` for ARGV[1] ms so that no renewal
-- or fencing raise re-takes the key (its holder's watchdog finds the name
-- gone and declares the lock lost), and announces the release.
-- KEYS[1] the lock key, KEYS[2] its marker. Reply: 1 a key was deleted, 0 there was none.
local existed = redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
redis.call('PUBLISH', 'quorumlock:released:' .. KEYS[1], '')
return existed
