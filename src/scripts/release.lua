-- Give back one hold on every lock key of a guard, owner-checked.
-- KEYS[ko + 1 .. ko + m] the lock keys; each one's waiter queue and the
-- queue's leases are named after it (layout.lua).
-- Its kind: 'r' gives back the hold; 'l' also `leaves`: gives up the
-- places of a queue id in the keys' waiter queues (a guard's release: a
-- rollback's waiter still waits).
-- ARGV[ao + 1] the hold, "<owner token> <entry id>" (a call that only
-- leaves the queues sends one that holds nothing); for 'l' only: ARGV[ao
-- + 2] the queue id.
-- (A call's own keys and arguments, read in place also in a batch, whose
-- calls share KEYS and ARGV; see batch.lua.)
-- A key whose last hold goes is deleted, and if a waiter marked it (one
-- that found it held, or the queue it was taken past: see acquire.lua) the
-- node announces that it is free (quorumlock_announce): to the lock service
-- of the queue's first waiter, whose turn it is, or when none is known on
-- `quorumlock:released:<key>` to every waiter. A rollback too: a waiter
-- that found the attempt's key in its way waits for it. A key nobody waits
-- for is freed without a PUBLISH.
-- Reply: 0 no key carried this hold (expired, released, or another
-- owner's); 1 the hold is gone and every key of it was deleted; 3 the
-- same, and some waiter was told (a key was marked); 2 the hold is gone
-- but the owner's other holds keep some key (re-entry).
local hold = ARGV[ao + 1]
local result = 0
for i = 1, m do
  local key = KEYS[ko + i]
  local given, marked, plain = quorumlock_give_back(key, hold)
  if leaves then
    -- A one-hold key of ours that nobody marked: our win here found no
    -- queue, or left ours and the queue empty (acquire.lua), so one EXISTS
    -- tells whether a place to give up can be here (one left by a script
    -- that failed half way, say), rather than a ZREM and an HDEL.
    local q = quorumlock_queue_of(key)
    if not (given == 1 and plain and not marked) or redis.call('EXISTS', q) == 1 then
      quorumlock_dequeue(q, quorumlock_leases_of(key), ARGV[ao + 2])
    end
  end
  if given == 1 then
    -- Ours was the last hold.
    if marked then
      quorumlock_announce(key, quorumlock_head(quorumlock_queue_of(key), quorumlock_leases_of(key)))
      if result ~= 2 then result = 3 end
    elseif result == 0 then
      result = 1
    end
  elseif given == 2 then
    result = 2
  end
end
return result
