-- Node epochs: the history of this node's data since it last lost any.
-- Prepended to every script that casts a vote or touches a fencing
-- counter (acquire, extend, renew, handoff, fencing read and raise).
--
-- The marker `quorumlock:epoch` = "<run_id> <epoch id> <start ms> <origin>"
-- is written with replication off (redis.set_repl(REPL_NONE)): it never
-- reaches a replica or the AOF, so a promoted replica and a restarted
-- server both lack it (a server restored from an RDB snapshot has an old
-- one, with another run_id: the client's check on connect, epoch_check.lua,
-- replaces it). `origin` 1: the epoch is the node's whole history (an
-- adopted, brand-new node), so a counter it lacks was never written.
--
-- A node whose marker is missing, or younger than the quarantine, still
-- does the script's writes (it blocks others) but a vote script wraps its
-- reply as {'young', ms left, reply}: the client does not count it toward
-- any quorum. The quarantine in ms is the last ARGV: 0 turns it off, -1
-- declares the node durable (AOF with appendfsync always, never failed
-- over): no quarantine, and its marker goes to the AOF (never to a
-- replica), so its epoch, and the counters stamped with it, survive a
-- restart.
local quorumlock_epoch_id = '-'
local quorumlock_origin = false

-- Reads (or starts) the epoch; returns the ms of quarantine left (0: the
-- node votes).
local function quorumlock_young()
  local quarantine = tonumber(ARGV[#ARGV]) or 0
  local durable = quarantine < 0
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local marker = redis.call('GET', 'quorumlock:epoch')
  local id, start, origin
  if marker then
    id, start, origin = string.match(marker, '^%S+ (%d+) (%d+) ([01])$')
  end
  if not start then
    -- Missing (a promoted replica, a flush, an eviction): a new epoch from
    -- now, its run_id unknown until the next connect's check.
    id, start, origin = t[1] .. t[2], now, '0'
    redis.set_repl(durable and redis.REPL_AOF or redis.REPL_NONE)
    redis.call('SET', 'quorumlock:epoch', '- ' .. id .. ' ' .. now .. ' 0')
    redis.set_repl(redis.REPL_ALL)
  end
  quorumlock_epoch_id = id
  quorumlock_origin = origin == '1'
  if quarantine <= 0 then
    return 0
  end
  local left = tonumber(start) + quarantine - now
  if left > 0 then
    return left
  end
  return 0
end

local function quorumlock_answer(young, reply)
  if young > 0 then
    return {'young', young, reply}
  end
  return reply
end

-- A fencing counter "<value> <epoch id>": its value as stored (a string,
-- validated by the client; false: none) and 1 when it is current: written
-- in this epoch, or absent on a node whose epoch is its whole history.
local function quorumlock_counter(key)
  local raw = redis.call('GET', key)
  if not raw then
    if quorumlock_origin then
      return '0', 1
    end
    return false, 0
  end
  local value, id = string.match(raw, '^(%S+) (%S+)$')
  if value then
    if id == quorumlock_epoch_id then
      return value, 1
    end
    return value, 0
  end
  return raw, 0
end

