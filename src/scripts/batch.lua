-- Group commit: one script call runs the acquires and releases queued for
-- this node, in their order, each as its own script would have run it.
-- The scripts' bodies are defined just above as quorumlock_acquire (ko, m,
-- ao, waits, queues, reads) and quorumlock_release (ko, m, ao, leaves):
-- each reads its m lock keys and its arguments in place, KEYS[ko + i] and
-- ARGV[ao + i] (no copy per call: the copies cost a tenth of a batch's
-- server time); the epoch check (epoch.lua, outside them) reads the
-- batch's own ARGV and runs once for the batch, at its first acquire.
--
-- KEYS: each call's lock keys in turn, then the epoch marker.
-- ARGV[1] the shape: per call, in order, its kind (acquire.lua: 'a', 'w',
-- 'q', in capitals when it reads the fencing counters; release.lua: 'r',
-- 'l') and its number of lock keys when that is not 1 ("aAw3r": two
-- acquires and a waiting acquire of three keys, then a release of one).
-- Then each call's arguments in turn (as many as its kind takes); then the
-- settled marker and the quarantine (epoch.lua).
-- One argument for the whole shape, read byte by byte: a header argument
-- per call, or a pattern match per call, cost the server more than a call's
-- own SET (measured with callgrind).
--
-- Reply: one reply per call, in order. A call that fails (a key of another
-- type: WRONGTYPE) answers its error in its place, and the others still
-- run, as they would have as calls of their own.
local shape = ARGV[1]
local replies = {}
local k, a, n, at = 0, 1, 0, 1
while at <= #shape do
  local kind, digit = string.byte(shape, at, at + 1)
  at = at + 1
  -- The number of lock keys: the digits after the kind, 1 without.
  local m = 1
  if digit and digit <= 57 then
    m = 0
    while digit and digit <= 57 do
      m = m * 10 + digit - 48
      at = at + 1
      digit = string.byte(shape, at)
    end
  end
  -- A capital (below 'a', 97) reads the fencing counters.
  local reads = kind < 97
  if reads then
    kind = kind + 32
  end
  local ok, reply, args
  if kind == 97 or kind == 119 then -- 'a', 'w'
    ok, reply = pcall(quorumlock_acquire, k, m, a, kind == 119, false, reads)
    args = 2
  elseif kind == 114 then -- 'r'
    ok, reply = pcall(quorumlock_release, k, m, a, false)
    args = 1
  elseif kind == 113 then -- 'q'
    ok, reply = pcall(quorumlock_acquire, k, m, a, true, true, reads)
    args = 6
  elseif kind == 108 then -- 'l'
    ok, reply = pcall(quorumlock_release, k, m, a, true)
    args = 3
  else
    return redis.error_reply('QLBATCH no call of kind ' .. string.sub(shape, at - 1, at - 1))
  end
  k, a, n = k + m, a + args, n + 1
  if ok then
    replies[n] = reply
  elseif type(reply) == 'table' then
    replies[n] = reply
  else
    replies[n] = {err = tostring(reply)}
  end
end
return replies
