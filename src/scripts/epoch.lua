-- Node epochs: the history of this node's data since it last lost any.
-- Prepended to every script that casts a vote or touches a fencing
-- counter (acquire, extend, renew, handoff, fencing read and raise).
--
-- The marker `quorumlock:epoch` = "<run_id> <epoch id> <start ms> <origin>",
-- declared as the script's last KEY (a batch's last, for all its calls),
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
--
-- The ARGV before it is the marker this client last saw settled (past its
-- quarantine) on this node, '' when none. A marker found equal to it needs
-- no clock and no parse: the same marker is the same epoch, started at the
-- same time, and the time since then only grows. A vote script whose
-- reply settles a marker the client did not send wraps it once as
-- {'settled', marker, reply}, so that the next call takes the short path.
-- (This saves the TIME call and the parse, about a fifth of an acquire's
-- server time.)
local quorumlock_epoch_id = '-'
local quorumlock_origin = false
-- The settled marker the caller sent, when it matched: parsed only if a
-- fencing counter needs its epoch id (quorumlock_epoch).
local quorumlock_unparsed = false
-- A marker this call found settled that the caller did not send.
local quorumlock_news = false
-- The marker, when the node votes in this call: a waiter's place keeps it
-- with its grant request (queue.lua), and a release grants the name only
-- while the marker is still the same (the same epoch, as settled as then).
local quorumlock_voter = false

-- The ms of quarantine left, once read (false: not yet).
local quorumlock_left = false

-- Reads (or starts) the epoch; returns the ms of quarantine left (0: the
-- node votes).
local function quorumlock_check()
  local marker = redis.call('GET', KEYS[#KEYS])
  if marker and marker == ARGV[#ARGV - 1] then
    quorumlock_unparsed = marker
    quorumlock_voter = marker
    return 0
  end
  local quarantine = tonumber(ARGV[#ARGV]) or 0
  local durable = quarantine < 0
  local t, now = quorumlock_time()
  local id, start, origin
  if marker then
    id, start, origin = string.match(marker, '^%S+ (%d+) (%d+) ([01])$')
  end
  if not start then
    -- Missing (a promoted replica, a flush, an eviction): a new epoch from
    -- now, its run_id unknown until the next connect's check.
    id, start, origin = t[1] .. t[2], now, '0'
    marker = '- ' .. id .. ' ' .. now .. ' 0'
    redis.set_repl(durable and redis.REPL_AOF or redis.REPL_NONE)
    redis.call('SET', KEYS[#KEYS], marker)
    redis.set_repl(redis.REPL_ALL)
  end
  quorumlock_epoch_id = id
  quorumlock_origin = origin == '1'
  if quarantine > 0 then
    local left = tonumber(start) + quarantine - now
    if left > 0 then
      return left
    end
  end
  quorumlock_news = marker
  quorumlock_voter = marker
  return 0
end

-- The ms of quarantine left (0: the node votes), read once per script
-- call: every call of a batch (batch.lua) is answered for the same epoch.
local function quorumlock_young()
  if not quorumlock_left then
    quorumlock_left = quorumlock_check()
  end
  return quorumlock_left
end

-- The epoch id and whether the epoch is the node's whole history.
local function quorumlock_epoch()
  if quorumlock_unparsed then
    local id, origin = string.match(quorumlock_unparsed, '^%S+ (%d+) %d+ ([01])$')
    quorumlock_epoch_id, quorumlock_origin = id or '-', origin == '1'
    quorumlock_unparsed = false
  end
  return quorumlock_epoch_id, quorumlock_origin
end

local function quorumlock_answer(young, reply)
  if young > 0 then
    return {'young', young, reply}
  end
  if quorumlock_news then
    return {'settled', quorumlock_news, reply}
  end
  return reply
end

-- A fencing counter "<value> <epoch id>": its value as stored (a string,
-- validated by the client; false: none) and 1 when it is current: written
-- in this epoch, or absent on a node whose epoch is its whole history.
local function quorumlock_counter(key)
  local raw = redis.call('GET', key)
  if not raw then
    -- Only the origin, the marker's last character: no parse for it.
    local origin = quorumlock_origin
    if quorumlock_unparsed then
      origin = string.byte(quorumlock_unparsed, -1) == 49 -- '1'
    end
    if origin then
      return '0', 1
    end
    return false, 0
  end
  local epoch_id = quorumlock_epoch()
  local value, id = string.match(raw, '^(%S+) (%S+)$')
  if value then
    if id == epoch_id then
      return value, 1
    end
    return value, 0
  end
  return raw, 0
end

