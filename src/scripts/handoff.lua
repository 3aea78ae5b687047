-- Give back one hold and, if that leaves the lock free on this node, take
-- it at once for the next waiter of the same lock service: one call where
-- a release, a notice and an acquire would take three steps.
-- KEYS[1] lock key, KEYS[2] its fencing counter, KEYS[3] its waiter queue,
-- KEYS[4] the queue's leases (queue.lua), KEYS[5] the epoch marker
-- (epoch.lua).
-- ARGV[1] the releasing hold ("<owner token> <entry id>"), ARGV[2] the
-- queue id whose place the release gives up ('' none);
-- ARGV[3] the next owner's hold, ARGV[4] its queue id ('' none), ARGV[5]
-- TTL in ms, ARGV[6] the releasing call's grant hold when it is not
-- ARGV[1], given back too ('' none: release.lua), ARGV[7] the settled marker,
-- ARGV[8] the quarantine in ms (epoch.lua).
-- Reply: {r, 1, value, current}: the next owner holds the key now (its
--        fencing counter as acquire.lua returns it) and left the queue;
--        {r, 0, pttl}: it does not (the key stays held: another hold of the
--        releasing owner, or another owner).
-- r as in release.lua: 0 the hold was not here, 1 given back and the key
-- deleted, 2 given back, the owner's other holds keep the key.
-- Nothing is published: the lock does not become free on this node. The
-- name passes within one lock service ahead of the queue's waiters from
-- other services; they are announced the release that frees it.
local young = quorumlock_young()
if ARGV[2] ~= '' then
  quorumlock_dequeue(KEYS[3], KEYS[4], ARGV[2])
end
local r, marked = quorumlock_give_back(KEYS[1], ARGV[1])
if ARGV[6] ~= '' then
  local also, also_marked = quorumlock_give_back(KEYS[1], ARGV[6])
  if also == 1 then
    -- The releasing call's grant hold went last: the key is free.
    r, marked = 1, also_marked
  end
end
if r == 1 or redis.call('EXISTS', KEYS[1]) == 0 then
  -- Waiters in other processes still wait: the next release announces.
  local mark = (r == 1 and marked) and ' w' or ''
  redis.call('SET', KEYS[1], ARGV[3] .. mark, 'PX', ARGV[5])
  if ARGV[4] ~= '' then
    quorumlock_dequeue(KEYS[3], KEYS[4], ARGV[4])
  end
  local value, current = quorumlock_counter(KEYS[2])
  return quorumlock_answer(young, {r, 1, value, current})
end
return quorumlock_answer(young, {r, 0, redis.call('PTTL', KEYS[1])})
