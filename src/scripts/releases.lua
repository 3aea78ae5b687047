-- A flight of releases alone (see batch.lua, and src/outbox.rs): the same
-- arguments and replies as batch.lua's releases, without the epoch check a
-- release does not need (it is no vote), so it costs the server less.
-- release_op.lua comes before this loop in the script sent.
local replies = {}
local at = 0
for op = 1, math.floor(#ARGV / 5) do
  local arg = (op - 1) * 5
  local m = tonumber(ARGV[arg + 2])
  local ok, reply = pcall(quorumlock_release, at, m, ARGV[arg + 3], ARGV[arg + 4], ARGV[arg + 5] == '1')
  if not ok and not (type(reply) == 'table' and reply.err) then
    reply = {err = tostring(reply)}
  end
  replies[op] = reply
  at = at + m
end
return replies
