-- ARGV: round, index, token, result, collect outbox, outbox id; then, optionally, the tool_result
-- event's type, data, at and the stream's length cap (appended with the result, atomically).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'deadline', 'ttl_after')
if not s[1] or FINAL[s[1]] then return 0 end
if s[2] ~= ARGV[1] or s[3] ~= 'tools' then return 0 end
if redis.call('HGET', KEYS[5], ARGV[2] .. ':holder') ~= ARGV[3] then return 0 end
if redis.call('HSETNX', KEYS[4], ARGV[1] .. ':' .. ARGV[2], ARGV[4]) == 0 then return 0 end
redis.call('HSET', KEYS[5], ARGV[2] .. ':holder', '')
if ARGV[7] then
  redis.call('XADD', KEYS[6], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[10], '*',
    'type', ARGV[7], 'data', ARGV[8], 'at', ARGV[9])
end
local t = now()
expire_key(KEYS[4], t, s[4], s[5])
local left = redis.call('HINCRBY', KEYS[1], 'pending', -1)
redis.call('HSET', KEYS[1], 'progress_at', fmt(t), 'updated_at', fmt(t))
if left <= 0 then
  redis.call('HSET', KEYS[1], 'kind', 'collect', 'holder', '', 'lease_until', 0, 'expiries', 0,
    'outbox', ARGV[5], 'outbox_id', ARGV[6])
  return 2
end
return 1
