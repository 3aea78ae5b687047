-- Take every lock key of one guard on this node, all or nothing.
-- KEYS[1..m] lock keys (sorted), KEYS[m+1..2m] their fencing counters,
-- KEYS[2m+1..3m] their waiter queues, KEYS[3m+1..4m] the queues' leases
-- (queue.lua); then the epoch marker (epoch.lua), except in a batch, whose
-- one marker key follows every call's keys.
-- ARGV[1] owner token, ARGV[2] this hold's entry id, ARGV[3] TTL in ms,
-- ARGV[4] '1' when the caller waits for a release notice; ARGV[5] its
-- queue id when it queues (a fair lock service), '' when it does not;
-- ARGV[6] its ticket, ARGV[7] its place's lease in ms; ARGV[8] the
-- settled marker and ARGV[9] the quarantine in ms (epoch.lua).
--
-- A lock key is a hash: field `owner` = the owner token, plus one field per
-- hold (entry id) of that owner, and the waiters' mark once a waiter left
-- one (below); the hold count is the rest. The owner may take it again
-- (re-entry: one more entry); anyone else is refused.
--
-- Release notices go only to waiters: a caller that waits (ARGV[4] = '1')
-- and finds a key held by another owner marks it, field `waiters` = 1
-- (the owner, the holds and the TTL are left as they are); one that queues
-- also takes a place in the name's queue (queue.lua), and a key taken
-- while others queue for it is marked at once. The release that frees a
-- marked key publishes; one that frees an unmarked key costs no PUBLISH
-- (nor a look at the queue). The hold count is HLEN - 1 - the mark.
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
-- A key of another type fails with WRONGTYPE (HLEN): never overwritten. A
-- hash without an owner field is someone else's data: refused.
-- The free path (the common one) costs HLEN, EXISTS, HSET, PEXPIRE and GET.
local young = quorumlock_young()
local m = math.floor(#KEYS / 4)
local ttl = tonumber(ARGV[3])
local me = ARGV[5]
local function queue(i)
  return KEYS[2 * m + i], KEYS[3 * m + i]
end
-- A waiter refused anywhere keeps its place on every name of its lock.
local function join_every_queue()
  if me == '' then
    return
  end
  for i = 1, m do
    local q, leases = queue(i)
    quorumlock_enqueue(q, leases, me, ARGV[6], tonumber(ARGV[7]))
  end
end
local fresh = {}
for i = 1, m do
  if redis.call('HLEN', KEYS[i]) == 0 then
    fresh[i] = true
  else
    local owner = redis.call('HGET', KEYS[i], 'owner')
    if owner ~= ARGV[1] then
      if owner and ARGV[4] == '1' then
        redis.call('HSET', KEYS[i], 'waiters', 1)
        join_every_queue()
      end
      return quorumlock_answer(young, {0, redis.call('PTTL', KEYS[i]), i})
    end
  end
end
-- Free, or ours (re-entry, never queued): ours if nobody waits ahead.
local queued = {}
for i = 1, m do
  local q, leases = queue(i)
  if fresh[i] and redis.call('EXISTS', q) == 1 then
    queued[i] = true
    if me ~= '' then
      quorumlock_enqueue(q, leases, me, ARGV[6], tonumber(ARGV[7]))
    end
    local first = quorumlock_head(q, leases)
    if first ~= nil and first ~= me and not quorumlock_same_service(first, me) then
      join_every_queue()
      return quorumlock_answer(young, {0, -2, i})
    end
  end
end
local out = {1}
for i = 1, m do
  -- Arguments as strings: a Lua number would be formatted for each call.
  redis.call('HSET', KEYS[i], 'owner', ARGV[1], ARGV[2], '1')
  -- Never shorten: another hold of the same owner may have a longer TTL.
  if fresh[i] or redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
  end
  if queued[i] then
    local q, leases = queue(i)
    if me ~= '' then
      quorumlock_dequeue(q, leases, me)
    end
    -- Others still queue: the release must announce itself to them.
    if redis.call('EXISTS', q) == 1 then
      redis.call('HSET', KEYS[i], 'waiters', 1)
    end
  end
  local value, current = quorumlock_counter(KEYS[m + i])
  out[#out + 1] = value
  out[#out + 1] = current
end
return quorumlock_answer(young, out)
