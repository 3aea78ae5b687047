-- Raise the fencing counters of a guard's lock keys to a token, only while
-- every key carries our owner token or is absent (so only a holder raises,
-- and only with a token it computed from a sound read: see the fence
-- module). An absent key is re-taken first, with our token and entry, for
-- the validity the holder has left: the renew script's heal, done here so
-- that a node the acquire never reached (decided before it answered) or
-- one that lost the key can still confirm the token.
-- KEYS[1..m] lock keys, KEYS[m+1..2m] their fencing counters,
-- KEYS[2m+1..3m] their force-release markers (force_release.lua), then the
-- epoch marker (epoch.lua).
-- ARGV[1] owner token, ARGV[2] the fencing token p, ARGV[3] the entry id,
-- ARGV[4] the validity left in ms (the healed key's TTL), ARGV[5] the
-- settled marker and ARGV[6] the quarantine in ms (unused: a raise is not a
-- vote, and a young node's raise is as good as any, see epoch.lua).
-- Each counter becomes max(its value, p), stamped with this node's epoch:
-- "<value> <epoch id>". Counters never go down within an epoch.
-- Reply: 1 every counter is now >= p; 2 the same, after re-taking some
-- absent key; 0 some key is held by another owner (nothing written).
-- A counter that is not a whole number in [0, 2^53 - 1) (the range the
-- client accepts, exact in Lua's doubles) is an error reply naming the key,
-- before anything is written: a bad value is never raised or copied.
quorumlock_young()
local m = (#KEYS - 1) / 3
local absent = {}
for i = 1, m do
  local owner = quorumlock_owner(KEYS[i])
  -- Absent and not force-released (quorumlock:forced:<key>): re-taken.
  if owner == false and redis.call('EXISTS', KEYS[i], KEYS[2 * m + i]) == 0 then
    absent[#absent + 1] = KEYS[i]
  elseif owner ~= ARGV[1] then
    return 0
  end
end
local p = tonumber(ARGV[2])
local current = {}
for i = 1, m do
  local raw = quorumlock_counter(KEYS[m + i])
  local c = 0
  if raw then
    c = string.match(raw, '^%d+$') and tonumber(raw)
    if not c or c >= 9007199254740991 then
      return redis.error_reply('QLCOUNTER fencing counter ' .. KEYS[m + i] .. ' is not a counter')
    end
  end
  current[i] = c
end
for _, key in ipairs(absent) do
  redis.call('SET', key, ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[4])
end
local epoch_id = quorumlock_epoch()
for i = 1, m do
  local value = math.max(current[i], p)
  redis.call('SET', KEYS[m + i], string.format('%d', value) .. ' ' .. epoch_id)
end
if #absent > 0 then
  return 2
end
return 1
