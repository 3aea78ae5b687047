-- Waiter queues: which waiters of other lock services a free name goes to
-- first. Prepended to the scripts that take or free a lock key (acquire,
-- release, handoff).
--
-- Per name, two keys:
-- `quorumlock:queue:<name>`, a sorted set: member = a waiter's queue id
--   ("<lock service>.<acquire call>"),
--   score = its ticket (the µs since the Unix epoch when its acquire call
--   began, by its own clock). Every node gets the same ticket for the same
--   waiter, so every node orders the same waiters the same way, and a
--   release hands the name to the same waiter on each: no split votes.
--   A waiter of a lock service that is not fair takes a place that
--   refuses nobody: its id ends in ".n", and its ticket adds 4e15 µs
--   (keys.rs), so it queues behind every fair place. It only asks for the
--   release notice: the first of those waiters alone hears it, not all.
-- `quorumlock:leases:<name>`, a hash: queue id -> the server time in ms
--   when its place lapses unless the waiter attempts again. A waiter whose
--   process died blocks nobody longer than that. A waiter of one name may
--   add a grant request: "<lapses> <grantable until> <ttl ms> <attempt>
--   <owner> <entry> <epoch marker>" (a grant, release.lua: the release that frees
--   the name takes it for that waiter in the same call, while the node's
--   marker is the one it voted under when the request came).
-- A place never takes a key by itself: a lock key is taken by the acquire
-- rules, or by a release for the first waiter that asked for it. It is lost
-- with the node's data at no cost to safety (the waiters join again on
-- their next attempt; a grant needs the same marker, which goes with it).

-- Whether queue id `a` belongs to the lock service of queue id `b`
-- ("<service>.<call>"): a lock service's waiters take turns among
-- themselves, so any of them may take a name one of them is first for.
local function quorumlock_same_service(a, b)
  if type(a) ~= 'string' then
    return false
  end
  local service = string.match(b, '^([^.]+)%.')
  return service ~= nil and service == string.match(a, '^([^.]+)%.')
end

-- Whether the place `id` (as quorumlock_head returns it) refuses a free
-- name to the waiters behind it: a fair one (or `true`, unknown) does;
-- one whose id ends in ".n" refuses nobody. Such places queue behind every
-- fair one, so a first place that refuses nobody means none refuses.
local function quorumlock_refuses(id)
  return type(id) ~= 'string' or string.sub(id, -2) ~= '.n'
end

-- The queue's first waiter whose place has not lapsed, its lease as
-- stored (with its grant request, if any) and the server time in ms,
-- dropping lapsed ones on the way (at most 16 per call: with more, `true`,
-- as some waiter may be ahead); nil when the queue is empty.
local function quorumlock_head(queue, leases)
  local now = nil
  for _ = 1, 16 do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then
      return nil
    end
    now = now or quorumlock_now_ms()
    local lease = redis.call('HGET', leases, first)
    local lapses = lease and tonumber(string.match(lease, '^%d+'))
    if lapses and lapses > now then
      return first, lease, now
    end
    redis.call('ZREM', queue, first)
    redis.call('HDEL', leases, first)
  end
  return true
end

-- Takes (or keeps, at the same ticket) a place for `lease` ms from now;
-- `request` ('' or " <ttl ms> <attempt> <owner> <entry> <marker>") asks
-- the release that frees the name within `grantable` ms from now to take
-- it for this waiter. (Half the TTL: a release or rollback that would give
-- the request up is sent again for the TTL, so a request it could not
-- reach is not granted after that, whatever the node's clock rate.)
local function quorumlock_enqueue(queue, leases, id, ticket, lease, request, grantable)
  redis.call('ZADD', queue, ticket, id)
  local now = quorumlock_now_ms()
  if request ~= '' then
    request = ' ' .. (now + grantable) .. request
  end
  redis.call('HSET', leases, id, (now + lease) .. request)
  -- Both keys live as long as the newest place at least.
  for _, key in ipairs({queue, leases}) do
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
  end
end

-- Announces that `key` is free on this node. When the queue's first
-- waiter is known, only its lock service hears it, on that service's turn
-- channel, with "<queue id> <key>" (the waiters of other lock services
-- could not take the name, so waking them would be wasted); otherwise
-- every waiter of the name hears it on the name's channel, with ''.
-- `first` as quorumlock_head returns it.
local function quorumlock_announce(key, first)
  if type(first) == 'string' then
    local service = string.match(first, '^([^.]+)%.')
    if service then
      redis.call('PUBLISH', 'quorumlock:released:quorumlock:turn:' .. service, first .. ' ' .. key)
      return
    end
    -- Not a queue id this client wrote: named on the name's channel, as
    -- any waiter it could be listens there.
    redis.call('PUBLISH', 'quorumlock:released:' .. key, first)
    return
  end
  redis.call('PUBLISH', 'quorumlock:released:' .. key, '')
end

local function quorumlock_dequeue(queue, leases, id)
  redis.call('ZREM', queue, id)
  redis.call('HDEL', leases, id)
end
