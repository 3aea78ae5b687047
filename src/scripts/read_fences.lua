-- Read the fencing counters of a guard's names (the extra read of the
-- fencing scheme). Not a vote: a young node's current counters are as good
-- as any (they were written after its data loss).
-- KEYS[1..m] the counters, then the epoch marker (epoch.lua). ARGV[1] the settled marker, ARGV[2] the
-- quarantine in ms (unused here: see epoch.lua).
-- Reply: {time in µs, v1, f1, ..., vm, fm}: each value as stored (nil:
-- none) and 1 when it is current (see epoch.lua).
quorumlock_young()
local t = quorumlock_time()
local out = {t[1] * 1000000 + t[2]}
for i = 1, #KEYS - 1 do
  local value, current = quorumlock_counter(KEYS[i])
  out[#out + 1] = value
  out[#out + 1] = current
end
return out
