-- The reply of an acquire that holds every key of its guard now: after
-- epoch.lua and layout.lua, in the scripts that take lock keys (acquire,
-- batch).

-- {1, c1, f1, ..., cm, fm} when it `reads`, else 1 (a table costs the
-- server more to answer than the SET it confirms); answered for the
-- node's epoch. ci = lock key i's fencing counter value as stored (a
-- string, false when the node has none: the client validates it, so a bad
-- value never turns into a number here and is never written back); fi = 1
-- when it is current (epoch.lua). Lock key i is KEYS[ko + i].
local function quorumlock_won(young, ko, m, reads)
  if not reads then
    return quorumlock_answer(young, 1)
  end
  local out = {1}
  for i = 1, m do
    out[2 * i], out[2 * i + 1] = quorumlock_counter(quorumlock_fence_of(KEYS[ko + i]))
  end
  return quorumlock_answer(young, out)
end
