-- An operator's word that this node is brand new and empty (or part of a
-- new deployment): its epoch starts at once, as if it had always been
-- there, so it votes without waiting out the quarantine.
-- KEYS[1] the epoch marker (epoch.lua).
-- ARGV[1] the server's identity (run_id:master_replid2, see epoch.rs), ARGV[2] 1 when the node is declared durable
-- (the marker then goes to its AOF).
-- Reply: 1 adopted; an error 'QLNOTEMPTY n' when the node holds any key
-- but the marker (it may hold locks or counters of an earlier life).
local keys = redis.call('DBSIZE')
if redis.call('EXISTS', KEYS[1]) == 1 then
  keys = keys - 1
end
if keys > 0 then
  return redis.error_reply('QLNOTEMPTY the node holds ' .. keys .. ' keys: only an empty node can be adopted')
end
local t = quorumlock_time()
redis.set_repl(ARGV[2] == '1' and redis.REPL_AOF or redis.REPL_NONE)
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. t[1] .. t[2] .. ' 0 1')
redis.set_repl(redis.REPL_ALL)
return 1
