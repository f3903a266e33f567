-- ARGV: round, kind, token, lease seconds, max expiries, the four versions the worker reads (see
-- ``readable``), then the step's view to read (optional: see ``view_of``), returned after the epoch.
-- A job whose versions the worker does not read is refused ({'newer' or 'older', spec version,
-- memory version}) before anything is written: its record stays as it was.
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'holder', 'lease_until', 'deadline',
  'wait_until', 'expiries', 'epoch', 'spec_version', 'memory_version')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended'} end
if s[2] ~= ARGV[1] or s[3] ~= ARGV[2] then return {'other'} end
local t = now()
if s[4] ~= '' and tonumber(s[5]) > t then return {'busy'} end
local unread = readable(6, true, s[10], s[11])
if unread then return unread end
local expiries = tonumber(s[8])
if s[4] ~= '' then
  expiries = redis.call('HINCRBY', KEYS[1], 'expiries', 1)
  redis.call('HSET', KEYS[1], 'holder', '')
end
if t > tonumber(s[6]) then return {'deadline'} end
if expiries > tonumber(ARGV[5]) then return {'give-up', tostring(expiries)} end
local epoch = (tonumber(s[9]) or 0) + 1
redis.call('HSET', KEYS[1], 'epoch', epoch, 'holder', ARGV[3], 'lease_until', fmt(t + tonumber(ARGV[4])),
  'state', 'running', 'wait_for', '', 'wait_until', 0, 'progress_at', fmt(t), 'updated_at', fmt(t))
local view = view_of(10, ARGV[1])
if view then return {'ok', tostring(epoch), view} end
return {'ok', tostring(epoch)}
