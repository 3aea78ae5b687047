-- Group commit: one script call runs the acquires and releases queued for
-- this node, in their order, each as its own script would have run it.
-- The scripts' bodies are defined just above as quorumlock_acquire and
-- quorumlock_release (KEYS, ARGV), their parameters shadowing the globals;
-- the epoch check (epoch.lua, outside them) reads the batch's own ARGV and
-- runs once for the batch, at its first acquire.
--
-- KEYS: each call's keys in turn.
-- ARGV[1] the number of calls n; ARGV[1 + i] call i's script, 'a'
-- (acquire) or 'r' (release), followed by its number of keys and of
-- arguments ("a12 7": 12 keys, 7 arguments); then each call's arguments
-- in turn; then the settled marker and the quarantine (epoch.lua).
--
-- Reply: one reply per call, in order. A call that fails (a key of another
-- type: WRONGTYPE) answers its error in its place, and the others still
-- run, as they would have as calls of their own.
local n = tonumber(ARGV[1])
local replies = {}
local k, a = 0, 1 + n
for i = 1, n do
  local kind, nk, na = string.match(ARGV[1 + i], '^([ar])(%d+) (%d+)$')
  local keys, argv = {}, {}
  for j = 1, tonumber(nk) do
    keys[j] = KEYS[k + j]
  end
  for j = 1, tonumber(na) do
    argv[j] = ARGV[a + j]
  end
  k, a = k + #keys, a + #argv
  local ok, reply = pcall(kind == 'a' and quorumlock_acquire or quorumlock_release, keys, argv)
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' then
    replies[i] = reply
  else
    replies[i] = {err = tostring(reply)}
  end
end
return replies
