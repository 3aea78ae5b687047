-- Take every lock key of one guard on this node, all or nothing.
-- KEYS[1..m] lock keys (sorted), KEYS[m+1..2m] their fencing counters.
-- ARGV[1] owner token, ARGV[2] this hold's entry id, ARGV[3] TTL in ms,
-- ARGV[4] '1' when the caller waits for a release notice, ARGV[5] the
-- quarantine in ms (epoch.lua).
--
-- A lock key is a hash: field `owner` = the owner token, plus one field per
-- hold (entry id) of that owner, and the waiters' mark once a waiter left
-- one (below); the hold count is the rest. The owner may take it again
-- (re-entry: one more entry); anyone else is refused.
--
-- Release notices go only to waiters: a caller that waits (ARGV[4] = '1')
-- and finds a key held by another owner marks it, field `waiters` = 1
-- (the owner, the holds and the TTL are left as they are); the release
-- that frees a marked key publishes, one that frees an unmarked key costs
-- no PUBLISH. The hold count is HLEN - 1 - the mark.
--
-- Reply: {1, c1, f1, ..., cm, fm} when we hold every key now (ci = key i's
--        fencing counter value as stored, a string, nil when the node has
--        none: the client validates it, so a bad value never turns into a
--        number here and is never written back; fi = 1 when it is current,
--        see epoch.lua);
--        {0, pttl, i} when key i is held by another owner (pttl -1: the
--        holder set no expiry). Nothing is written then.
-- A key of another type fails with WRONGTYPE (HLEN): never overwritten. A
-- hash without an owner field is someone else's data: refused.
-- The free path (the common one) costs HLEN, HSET, PEXPIRE and GET.
local young = quorumlock_young()
local m = #KEYS / 2
local ttl = tonumber(ARGV[3])
local fresh = {}
for i = 1, m do
  if redis.call('HLEN', KEYS[i]) == 0 then
    fresh[i] = true
  else
    local owner = redis.call('HGET', KEYS[i], 'owner')
    if owner ~= ARGV[1] then
      if owner and ARGV[4] == '1' then
        redis.call('HSET', KEYS[i], 'waiters', 1)
      end
      return quorumlock_answer(young, {0, redis.call('PTTL', KEYS[i]), i})
    end
  end
end
local out = {1}
for i = 1, m do
  redis.call('HSET', KEYS[i], 'owner', ARGV[1], ARGV[2], 1)
  -- Never shorten: another hold of the same owner may have a longer TTL.
  if fresh[i] or redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
  local value, current = quorumlock_counter(KEYS[m + i])
  out[#out + 1] = value
  out[#out + 1] = current
end
return quorumlock_answer(young, out)
