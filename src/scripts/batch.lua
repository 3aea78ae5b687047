-- Group commit: one script call runs the acquires and releases queued for
-- this node, in their order, each as its own script would have run it.
-- The scripts' bodies are defined just above as quorumlock_acquire and
-- quorumlock_release (ko, nk, ao, na): each reads its keys and arguments
-- in place, KEYS[ko + i] and ARGV[ao + i], nk keys and na arguments (no
-- copy per call: the copies cost a tenth of a batch's server time); the
-- epoch check (epoch.lua, outside them) reads the batch's own ARGV and
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
-- A batch has few distinct headers (acquires and releases of guards of
-- one size), and equal strings are one Lua string: each is parsed once.
local headers = {}
local k, a = 0, 1 + n
for i = 1, n do
  local header = ARGV[1 + i]
  local call = headers[header]
  if not call then
    local kind, nk, na = string.match(header, '^([ar])(%d+) (%d+)$')
    call = {kind == 'a' and quorumlock_acquire or quorumlock_release, tonumber(nk), tonumber(na)}
    headers[header] = call
  end
  local nk, na = call[2], call[3]
  local ok, reply = pcall(call[1], k, nk, a, na)
  k, a = k + nk, a + na
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' then
    replies[i] = reply
  else
    replies[i] = {err = tostring(reply)}
  end
end
return replies
