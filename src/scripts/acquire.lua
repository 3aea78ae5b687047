-- Take every lock key of one guard on this node, all or nothing.
-- KEYS[ko + 1 .. ko + m] the lock keys (sorted); each one's fencing
-- counter, waiter queue and the queue's leases are named after it
-- (layout.lua). Alone, the script's last key is the epoch marker
-- (epoch.lua); a batch's one marker follows every call's keys.
-- Its kind: 'a' takes the keys; 'w' also `waits` for a release notice;
-- 'q' also `queues` (it waits too; its place refuses the waiters behind
-- it only for a fair lock service: queue.lua). In capitals, it
-- `reads` the fencing counters: a won call's reply carries them (won.lua).
-- ARGV[ao + 1] the hold, "<owner token> <entry id>"; ARGV[ao + 2] the TTL
-- in ms; for 'q' only: ARGV[ao + 3] its queue id, ARGV[ao + 4] its ticket,
-- ARGV[ao + 5] its place's lease in ms, ARGV[ao + 6] its grant request,
-- "<attempt> <owner token> <grant entry id>" ('' none: queue.lua). Alone,
-- the settled marker and the
-- quarantine in ms (epoch.lua) follow.
-- (A call's own keys and arguments, read in place also in a batch, whose
-- calls share KEYS and ARGV; see batch.lua.)
--
-- A lock key is a string "<owner> <entry>" while it has one hold, a hash
-- once its owner takes it again (re-entry: one more entry; layout.lua);
-- anyone else is refused.
--
-- Release notices go only to waiters: a caller that waits and
-- finds a key held by another owner marks it (layout.lua; the owner, the
-- holds and the TTL are left as they are); one that queues also takes a
-- place in the name's queue (queue.lua), and a key taken while others
-- queue for it is marked at once. The release that frees a marked key
-- publishes; one that frees an unmarked key costs no PUBLISH (nor a look
-- at the queue).
--
-- A free key is taken only by the queue's first waiter (or another waiter
-- of its lock service, whose waiters take turns), or by anyone when no
-- fair waiter is queued (the places of the others refuse nobody): a fair
-- waiter is not overtaken by later ones, nor by the holder that just
-- released (fairness across processes).
--
-- Reply: {1, c1, f1, ..., cm, fm} when we hold every key now, 1 when it
--        does not read the counters (won.lua);
--        our place in the queues, if any, is given up;
--        {0, pttl, i} when key i is held by another owner (pttl -1: the
--        holder set no expiry); no lock key is written then;
--        {0, -2, i} when key i is free but a waiter is queued ahead of us.
-- A key of another type, or a string that is not a lock key, fails with
-- WRONGTYPE: never overwritten. A hash without an owner field is someone
-- else's data: refused.
-- The free path (the common one) costs EXISTS (the queue), SET NX PX and,
-- when it reads them, the counter's GET; the rest only runs when a key is
-- held or queued for.
local young = quorumlock_young()
local hold = ARGV[ao + 1]
-- Every key free and nobody queued for it: each taken with SET NX PX.
local taken = 0
for i = 1, m do
  local key = KEYS[ko + i]
  if redis.call('EXISTS', quorumlock_queue_of(key)) == 1
    or not redis.call('SET', key, hold, 'NX', 'PX', ARGV[ao + 2]) then
    break
  end
  taken = i
end
if taken == m then
  return quorumlock_won(young, ko, m, reads)
end
-- All or nothing: what the loop took goes back before anyone saw it.
for i = 1, taken do
  redis.call('DEL', KEYS[ko + i])
end
local owner, entry = string.match(hold, '^(%S+) (%S+)$')
local ttl = tonumber(ARGV[ao + 2])
local me = queues and ARGV[ao + 3] or ''
-- A queued waiter of one name may ask the release that frees the name to
-- take it for its call (a grant: release.lua): only while this node
-- votes, under the marker it votes under now.
local request = ''
if queues and m == 1 and young == 0 and quorumlock_voter and ARGV[ao + 6] ~= '' then
  request = ' ' .. ARGV[ao + 2] .. ' ' .. ARGV[ao + 6] .. ' ' .. quorumlock_voter
end
local function queue(i)
  local key = KEYS[ko + i]
  return quorumlock_queue_of(key), quorumlock_leases_of(key)
end
-- A waiter refused anywhere keeps its place on every name of its lock.
local function join_every_queue()
  if me == '' then
    return
  end
  for i = 1, m do
    local q, leases = queue(i)
    quorumlock_enqueue(q, leases, me, ARGV[ao + 4], tonumber(ARGV[ao + 5]), request, math.floor(ttl / 2))
  end
end
-- Per key: fresh (free), or ours in string form (its re-entry turns it
-- into a hash) or in hash form.
local fresh, strings = {}, {}
for i = 1, m do
  local state, holder, held, marked = quorumlock_read(KEYS[ko + i])
  if state == 'free' then
    fresh[i] = true
  else
    if state == 'hash' then
      holder = redis.call('HGET', KEYS[ko + i], 'owner')
    end
    if holder ~= owner then
      if holder and waits then
        quorumlock_mark(KEYS[ko + i], state, holder, held, marked)
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
  local q = fresh[i] and quorumlock_queue_of(KEYS[ko + i])
  if q and redis.call('EXISTS', q) == 1 then
    local leases = quorumlock_leases_of(KEYS[ko + i])
    queued[i] = true
    local function lets_us_in(first)
      return first == nil or first == me or quorumlock_same_service(first, me)
        or not quorumlock_refuses(first)
    end
    -- The first waiter's turn (ours, most often: the one a release
    -- announced itself to) needs no place of ours. Refused, we take our
    -- place (by our ticket, which may be ahead of the first) and look again.
    if not lets_us_in(quorumlock_head(q, leases)) then
      if me == '' then
        return quorumlock_answer(young, {0, -2, i})
      end
      quorumlock_enqueue(q, leases, me, ARGV[ao + 4], tonumber(ARGV[ao + 5]), request, math.floor(ttl / 2))
      if not lets_us_in(quorumlock_head(q, leases)) then
        join_every_queue()
        return quorumlock_answer(young, {0, -2, i})
      end
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
    redis.call('SET', KEYS[ko + i], hold .. mark, 'PX', ARGV[ao + 2])
  else
    if strings[i] then
      quorumlock_as_hash(KEYS[ko + i])
    end
    redis.call('HSET', KEYS[ko + i], 'owner', owner, entry, '1')
    -- Never shorten: another hold of the same owner may have a longer TTL.
    if redis.call('PTTL', KEYS[ko + i]) < ttl then
      redis.call('PEXPIRE', KEYS[ko + i], ARGV[ao + 2])
    end
  end
end
return quorumlock_won(young, ko, m, reads)
