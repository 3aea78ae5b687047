-- Give back one hold on every lock key of a guard, owner-checked.
-- KEYS[1..m] lock keys, KEYS[m+1..2m] their waiter queues, KEYS[2m+1..3m]
-- the queues' leases (queue.lua).
-- (Read as KEYS[ko + i] and ARGV[ao + i], nk keys: a call's own, also in
-- a batch, whose calls share KEYS and ARGV; see batch.lua.)
-- ARGV[1] owner token, ARGV[2] the hold's entry id, ARGV[3] the queue id
-- whose places this release gives up ('' none: a rollback's waiter still
-- waits).
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
local m = nk / 3
if ARGV[ao + 3] ~= '' then
  for i = 1, m do
    quorumlock_dequeue(KEYS[ko + m + i], KEYS[ko + 2 * m + i], ARGV[ao + 3])
  end
end
local result = 0
for i = 1, m do
  local given, marked = quorumlock_give_back(KEYS[ko + i], ARGV[ao + 1], ARGV[ao + 2])
  if given == 1 then
    -- Ours was the last hold.
    if marked then
      quorumlock_announce(KEYS[ko + i], quorumlock_head(KEYS[ko + m + i], KEYS[ko + 2 * m + i]))
      if result ~= 2 then result = 3 end
    elseif result == 0 then
      result = 1
    end
  elseif given == 2 then
    result = 2
  end
end
return result
