-- Run once on every new connection, before any vote: makes sure the epoch
-- marker belongs to this server process, and starts a new epoch when it
-- does not (the server restarted, or was promoted, since it was written).
-- KEYS[1] the epoch marker (epoch.lua).
-- ARGV[1] the server's identity, run_id:master_replid2 (new at every start
-- and promotion). ARGV[2] how far back the new epoch may start in ms: when
-- INFO shows a master never promoted (its data is complete since it
-- booted), its uptime less the second its whole-second rounding may add
-- (epoch.rs), else 0; counted back from this script's TIME, later than
-- INFO's, so the epoch never starts before the server did. ARGV[3] 1: the
-- node is declared durable: a marker it kept over a restart (in its AOF)
-- stays valid.
-- Reply: {age of the epoch in ms, 1 if it is new}.
local t, now = quorumlock_time()
local marker = redis.call('GET', KEYS[1])
if marker then
  local run_id, start = string.match(marker, '^(%S+) %d+ (%d+) [01]$')
  if start and (run_id == ARGV[1] or ARGV[3] == '1') then
    if ARGV[3] == '1' then
      -- A durable node keeps its marker in its AOF (never on a replica).
      redis.set_repl(redis.REPL_AOF)
      redis.call('SET', KEYS[1], marker)
      redis.set_repl(redis.REPL_ALL)
    end
    return {now - tonumber(start), 0}
  end
end
local start = now - tonumber(ARGV[2])
redis.set_repl(ARGV[3] == '1' and redis.REPL_AOF or redis.REPL_NONE)
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. t[1] .. t[2] .. ' ' .. start .. ' 0')
redis.set_repl(redis.REPL_ALL)
return {now - start, 1}
