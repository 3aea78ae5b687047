-- Take every lock key of one guard on this node, all or nothing.
-- KEYS[1..m] lock keys (sorted), KEYS[m+1..2m] their fencing counters,
-- KEYS[2m+1..3m] their waiter queues, KEYS[3m+1..4m] the queues' leases
-- (queue.lua); then the epoch marker (epoch.lua), except in a batch, whose
-- one marker key follows every call's keys.
-- (Read as KEYS[ko + i] and ARGV[ao + i], nk keys and na arguments: a
-- call's own, also in a batch, whose calls share KEYS and ARGV; see
-- batch.lua.)
-- ARGV[1] owner token, ARGV[2] this hold's entry id, ARGV[3] TTL in ms,
-- ARGV[4] '1' when the caller waits for a release notice; only when it
-- queues (a fair lock service; na = 7): ARGV[5] its queue id, ARGV[6] its
-- ticket, ARGV[7] its place's lease in ms. Then the settled marker and the
-- quarantine in ms (epoch.lua).
--
-- A lock key is a string "<owner> <entry>" while it has one hold, a hash
-- once its owner takes it again (re-entry: one more entry; layout.lua);
-- anyone else is refused.
--
-- Release notices go only to waiters: a caller that waits (ARGV[4] = '1')
-- and finds a key held by another owner marks it (layout.lua; the owner,
-- the holds and the TTL are left as they are); one that queues
-- also takes a place in the name's queue (queue.lua), and a key taken
-- while others queue for it is marked at once. The release that frees a
-- marked key publishes; one that frees an unmarked key costs no PUBLISH
-- (nor a look at the queue).
--
-- A free key is taken only by the queue's first waiter (or another waiter
-- of its lock service, whose waiters take turns), or by anyone when nobody
-- is queued: a waiter is not overtaken by later ones, nor by the holder
-- that just released (fairness across processes).
--
-- Reply: {1, c1, f1, ..., cm, fm} when we hold every key now (ci = key i's
--        fencing counter value as stored, a string, nil when the node has
--        none: the client validates it, so a bad value never turns into a
--        number here and is never written back; fi = 1 when it is current,
--        see epoch.lua); our place in the queues, if any, is given up;
--        {0, pttl, i} when key i is held by another owner (pttl -1: the
--        holder set no expiry); no lock key is written then;
--        {0, -2, i} when key i is free but a waiter is queued ahead of us.
-- A key of another type, or a string that is not a lock key, fails with
-- WRONGTYPE: never overwritten. A hash without an owner field is someone
-- else's data: refused.
-- The free path (the common one) costs EXISTS (the queue), SET NX PX and
-- the counter's GET; the rest only runs when a key is held or queued for.
local young = quorumlock_young()
local m = math.floor(nk / 4)
local hold = ARGV[ao + 1] .. ' ' .. ARGV[ao + 2]
-- Every key free and nobody queued for it: each taken with SET NX PX.
local taken = 0
for i = 1, m do
  if redis.call('EXISTS', KEYS[ko + 2 * m + i]) == 1
    or not redis.call('SET', KEYS[ko + i], hold, 'NX', 'PX', ARGV[ao + 3]) then
    break
  end
  taken = i
end
local function won()
  local out = {1}
  for i = 1, m do
    local value, current = quorumlock_counter(KEYS[ko + m + i])
    out[#out + 1] = value
    out[#out + 1] = current
  end
  return quorumlock_answer(young, out)
end
if taken == m then
  return won()
end
-- All or nothing: what the loop took goes back before anyone saw it.
for i = 1, taken do
  redis.call('DEL', KEYS[ko + i])
end
local ttl = tonumber(ARGV[ao + 3])
local me = na > 4 and ARGV[ao + 5] or ''
local function queue(i)
  return KEYS[ko + 2 * m + i], KEYS[ko + 3 * m + i]
end
-- A waiter refused anywhere keeps its place on every name of its lock.
local function join_every_queue()
  if me == '' then
    return
  end
  for i = 1, m do
    local q, leases = queue(i)
    quorumlock_enqueue(q, leases, me, ARGV[ao + 6], tonumber(ARGV[ao + 7]))
  end
end
-- Per key: fresh (free), or ours in string form (its re-entry turns it
-- into a hash) or in hash form.
local fresh, strings = {}, {}
for i = 1, m do
  local state, owner, entry, marked = quorumlock_read(KEYS[ko + i])
  if state == 'free' then
    fresh[i] = true
  else
    if state == 'hash' then
      owner = redis.call('HGET', KEYS[ko + i], 'owner')
    end
    if owner ~= ARGV[ao + 1] then
      if owner and ARGV[ao + 4] == '1' then
        quorumlock_mark(KEYS[ko + i], state, owner, entry, marked)
        join_every_queue()
      end
      return quorumlock_answer(young, {0, redis.call('PTTL', KEYS[ko + i]), i})
    end
    strings[i] = state == 'string'
  end
end
-- Free, or ours (re-entry, never queued): ours if nobody waits ahead.
local queued = {}
for i = 1, m do
  local q, leases = queue(i)
  if fresh[i] and redis.call('EXISTS', q) == 1 then
    queued[i] = true
    if me ~= '' then
      quorumlock_enqueue(q, leases, me, ARGV[ao + 6], tonumber(ARGV[ao + 7]))
    end
    local first = quorumlock_head(q, leases)
    if first ~= nil and first ~= me and not quorumlock_same_service(first, me) then
      join_every_queue()
      return quorumlock_answer(young, {0, -2, i})
    end
  end
end
for i = 1, m do
  if fresh[i] then
    local mark = ''
    if queued[i] then
      local q, leases = queue(i)
      if me ~= '' then
        quorumlock_dequeue(q, leases, me)
      end
      -- Others still queue: the release must announce itself to them.
      if redis.call('EXISTS', q) == 1 then
        mark = ' w'
      end
    end
    redis.call('SET', KEYS[ko + i], hold .. mark, 'PX', ARGV[ao + 3])
  else
    if strings[i] then
      quorumlock_as_hash(KEYS[ko + i])
    end
    redis.call('HSET', KEYS[ko + i], 'owner', ARGV[ao + 1], ARGV[ao + 2], '1')
    -- Never shorten: another hold of the same owner may have a longer TTL.
    if redis.call('PTTL', KEYS[ko + i]) < ttl then
      redis.call('PEXPIRE', KEYS[ko + i], ARGV[ao + 3])
    end
  end
end
return won()
