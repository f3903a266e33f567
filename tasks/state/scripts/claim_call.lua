-- ARGV: round, index, token, lease seconds, max expiries, the four versions the worker reads (see
-- ``readable``), then the call's view to read (optional: see ``view_of``), returned after the
-- attempt and the started mark. A job whose versions the worker does not read is refused before
-- anything is written, as in claim.lua.
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'deadline', 'calls', 'ttl_after',
  'spec_version', 'memory_version')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended'} end
if s[2] ~= ARGV[1] or s[3] ~= 'tools' then return {'other'} end
local n = tonumber(ARGV[2])
if not n or n < 1 or n > tonumber(s[5]) then return {'no-call', s[5] or '0'} end
if redis.call('HEXISTS', KEYS[4], ARGV[1] .. ':' .. ARGV[2]) == 1 then return {'done'} end
if string.find(redis.call('HGET', KEYS[1], 'held') or '', ',' .. ARGV[2] .. ',', 1, true) then
  return {'held'}
end
local i = ARGV[2]
local h = redis.call('HMGET', KEYS[5], i .. ':holder', i .. ':until')
local t = now()
if h[1] and h[1] ~= '' and tonumber(h[2]) > t then return {'busy'} end
local unread = readable(6, true, s[7], s[8])
if unread then return unread end
if h[1] and h[1] ~= '' then
  local e = redis.call('HINCRBY', KEYS[5], i .. ':expiries', 1)
  redis.call('HSET', KEYS[5], i .. ':holder', '')
  if e > tonumber(ARGV[5]) then return {'give-up', tostring(e)} end
end
if t > tonumber(s[4]) then return {'deadline'} end
local attempt = redis.call('HINCRBY', KEYS[5], i .. ':attempts', 1)
redis.call('HSET', KEYS[5], i .. ':holder', ARGV[3], i .. ':until', fmt(t + tonumber(ARGV[4])))
redis.call('HSET', KEYS[1], 'progress_at', fmt(t), 'updated_at', fmt(t))
if attempt == 1 then expire_key(KEYS[5], t, s[4], s[6]) end
local started = redis.call('HGET', KEYS[5], i .. ':started') or ''
local view = view_of(10, ARGV[1])
if view then return {'ok', tostring(attempt), started, view} end
return {'ok', tostring(attempt), started}
