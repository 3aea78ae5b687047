-- Give back one hold on every lock key of a guard, owner-checked.
-- KEYS[ko + 1 .. ko + m] the lock keys; each one's waiter queue and the
-- queue's leases are named after it (layout.lua).
-- Its kind: 'r' gives back the hold; 'l' also `leaves`: gives up the
-- places of a queue id in the keys' waiter queues (a guard's release: a
-- rollback's waiter still waits).
-- ARGV[ao + 1] the hold, "<owner token> <entry id>" (a call that only
-- leaves the queues sends one that holds nothing, or its grant hold); for
-- 'l' only: ARGV[ao + 2] the queue id ('' none: the rollback of an
-- attempt whose call may have been granted the name), ARGV[ao + 3] the
-- call's grant hold when it is not the hold, given back too ('' none).
-- (A call's own keys and arguments, read in place also in a batch, whose
-- calls share KEYS and ARGV; see batch.lua.)
-- A key whose last hold goes is deleted, and if a waiter marked it (one
-- that found it held, or the queue it was taken past: see acquire.lua) the
-- node announces that it is free (quorumlock_announce): to the lock service
-- of the queue's first waiter, whose turn it is, or when none is known on
-- `quorumlock:released:<key>` to every waiter; or, when the first
-- waiter's place asks for it (queue.lua), the key is taken for that
-- waiter and its lock service told (a grant). A rollback too: a waiter
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
  if leaves and ARGV[ao + 3] ~= '' then
    -- The call's grant hold, which a release may have taken the key for
    -- as well (below): given back too; the key is freed when it goes last.
    local also, also_marked = quorumlock_give_back(key, ARGV[ao + 3])
    if also == 1 then
      given, marked, plain = 1, also_marked, false
    end
  end
  if leaves then
    -- A one-hold key of ours that nobody marked: our win here found no
    -- queue, or left ours and the queue empty (acquire.lua), so one EXISTS
    -- tells whether a place to give up can be here (one left by a script
    -- that failed half way, say), rather than a ZREM and an HDEL.
    local q = quorumlock_queue_of(key)
    if ARGV[ao + 2] ~= '' and (not (given == 1 and plain and not marked) or redis.call('EXISTS', q) == 1) then
      quorumlock_dequeue(q, quorumlock_leases_of(key), ARGV[ao + 2])
    end
  end
  if given == 1 then
    -- Ours was the last hold.
    if marked then
      -- The first waiter takes it now if its place asks (a grant), or
      -- hears that it is free.
      local q, leases = quorumlock_queue_of(key), quorumlock_leases_of(key)
      local first, lease, now = quorumlock_head(q, leases)
      local grantable, ttl, attempt, owner, entry, marker
      if type(first) == 'string' and lease then
        grantable, ttl, attempt, owner, entry, marker =
          string.match(lease, '^%d+ (%d+) (%d+) (%d+) ([0-9a-f]+) ([0-9a-f]+) (.+)$')
      end
      -- A request past its time is one whose call may be over.
      if grantable and tonumber(grantable) <= now then
        marker = nil
      end
      -- Only while the node's epoch marker is the one it voted under when
      -- the request came: the same marker is the same epoch, as settled as
      -- then (epoch.lua), so the grant is a vote as good as the acquire's.
      local service = marker and string.match(first, '^([^.|]+)%.[^|]*$')
      -- The counter as acquire.lua reads it: '-' none (current only on a
      -- node whose epoch is its whole history); one this client did not
      -- write is left to the waiter's own acquire to read and report.
      local value, current = false, 0
      if service and redis.call('GET', quorumlock_epoch_key()) == marker then
        local counter = redis.call('GET', quorumlock_fence_of(key))
        if not counter then
          if string.sub(marker, -1) == '1' then
            value, current = '0', 1
          else
            value = '-'
          end
        else
          local stored, id = string.match(counter, '^(%d+) (%S+)$')
          if stored then
            local epoch_id = string.match(marker, '^%S+ (%d+) ')
            value, current = stored, (id == epoch_id) and 1 or 0
          end
        end
      end
      if value then
        -- Taken as acquire.lua's free path takes it, marked when others
        -- still queue; its lock service hears "<queue id>|<attempt>|
        -- <counter>|<current> <key>" on its turn channel: the attempt
        -- whose request was granted (the waiter counts the validity from
        -- its start) and the counter.
        quorumlock_dequeue(q, leases, first)
        local mark = redis.call('EXISTS', q) == 1 and ' w' or ''
        redis.call('SET', key, owner .. ' ' .. entry .. mark, 'PX', ttl)
        redis.call('PUBLISH', 'quorumlock:released:quorumlock:turn:' .. service,
          first .. '|' .. attempt .. '|' .. value .. '|' .. current .. ' ' .. key)
      else
        quorumlock_announce(key, first)
      end
      if result ~= 2 then result = 3 end
    elseif result == 0 then
      result = 1
    end
  elseif given == 2 then
    result = 2
  end
end
return result
