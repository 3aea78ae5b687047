-- Group commit: the acquires and releases bound for this node, in the order
-- they were made, in one call (see src/outbox.rs). One call costs the
-- server one script invocation and at most one epoch check however many
-- operations it carries.
--
-- Per operation, five ARGV values, and its KEYS, both in operation order:
--   'A' (or 'W', see below), m, owner token, entry id, TTL in ms:
--        KEYS: m lock keys (sorted), then their m fencing counters.
--   'R', m, owner token, entry id, announce ('1' or '0'):
--        KEYS: m lock keys.
-- ARGV[#ARGV]: the quarantine in ms (epoch.lua).
--
-- Reply: one element per operation, what it alone would answer:
--
-- An acquire takes every lock key of one guard, all or nothing. A lock key
-- is a hash: field `owner` = the owner token, plus one field per hold
-- (entry id) of that owner; the hold count is HLEN - 1. The owner may take
-- it again (re-entry: one more entry); anyone else is refused. It answers
--   {1, c1, f1, ..., cm, fm} when we hold every key now (ci = key i's
--   fencing counter as stored, a string, nil when the node has none: the
--   client validates it, so a bad value never turns into a number here and
--   is never written back; fi = 1 when it is current, see epoch.lua);
--   {0, pttl, i} when key i is held by another owner (pttl -1: the holder
--   set no expiry). Nothing is written then.
-- A key of another type fails with WRONGTYPE (HLEN): never overwritten. A
-- hash without an owner field is someone else's data: refused. The free
-- path (the common one) costs HLEN, HSET, PEXPIRE and GET.
--
-- Release notices are published only for a waiter. An acquire of kind 'W'
-- (a caller that will wait for a notice) that finds a key held by another
-- owner marks it: field `waiters` = 1 (the owner, the holds and the TTL
-- are left as they are). The release that frees a marked key publishes;
-- one that frees an unmarked key costs no PUBLISH.
--
-- A release gives back one hold on every lock key of a guard, owner-checked.
-- A key whose last hold goes is deleted, and with announce = '1' the node
-- announces on `quorumlock:released:<key>` that it is free if a waiter
-- marked it (waiters retry at once). A rollback does not announce: the key was free before the
-- attempt, and a notice would wake the waiter that rolled back (and every
-- other) for nothing. It answers 0 when no key carried this hold (expired,
-- released, or another owner's); 1 when the hold is gone and every key of
-- it was deleted; 2 when the hold is gone but the owner's other holds keep
-- some key (re-entry).
--
-- An operation whose command failed (a key of another type) answers an
-- error element, and the operations after it still run: one caller's bad
-- key never costs another caller its answer. The epoch is read once, before
-- the first acquire; a call that holds one is answered by a young node as
-- {'young', ms left, replies} (a release's answer counts all the same: it
-- is no vote).
--
-- The operations themselves are acquire_op.lua and release_op.lua, which
-- come before this loop in the script sent; a flight of releases alone is
-- sent as releases.lua, which needs no epoch.

local young = 0
local epoch_read = false
local replies = {}
local at = 0
for op = 1, math.floor((#ARGV - 1) / 5) do
  local arg = (op - 1) * 5
  local kind, m = ARGV[arg + 1], tonumber(ARGV[arg + 2])
  local token, id, last = ARGV[arg + 3], ARGV[arg + 4], ARGV[arg + 5]
  local ok, reply
  if kind == 'A' or kind == 'W' then
    if not epoch_read then
      young = quorumlock_young()
      epoch_read = true
    end
    ok, reply = pcall(quorumlock_acquire, at, m, token, id, tonumber(last), kind == 'W')
    at = at + 2 * m
  else
    ok, reply = pcall(quorumlock_release, at, m, token, id, last == '1')
    at = at + m
  end
  if not ok and not (type(reply) == 'table' and reply.err) then
    reply = {err = tostring(reply)}
  end
  replies[op] = reply
end
return quorumlock_answer(young, replies)
