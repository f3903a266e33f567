-- ARGV: token, lease seconds, call index ('' for the step's own lease), last error ('' keeps it).
--! with prelude.lua
local t = now()
if ARGV[3] == '' then
  if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
  redis.call('HSET', KEYS[1], 'lease_until', fmt(t + tonumber(ARGV[2])))
else
  if redis.call('HGET', KEYS[5], ARGV[3] .. ':holder') ~= ARGV[1] then return 0 end
  redis.call('HSET', KEYS[5], ARGV[3] .. ':until', fmt(t + tonumber(ARGV[2])))
end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'last_error', ARGV[4]) end
return 1
