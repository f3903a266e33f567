-- KEYS: the job's webhook deliveries (hash). ARGV: delivery id, lease seconds.
-- Takes a pending delivery whose next attempt is due and that no live attempt holds: counts the
-- attempt and holds the delivery for the lease. Returns {'ok', attempt, delivery JSON}, or why not:
-- {'gone'}, {'delivered'}, {'failed'}, {'early', due}, {'busy', lease end}.
--! with prelude.lua
local d = ARGV[1]
local s = redis.call('HMGET', KEYS[1], d, d .. ':state', d .. ':due', d .. ':lease')
if not s[1] then return {'gone'} end
if s[2] ~= 'pending' then return {s[2]} end
local t = now()
if tonumber(s[3]) > t then return {'early', s[3]} end
if tonumber(s[4]) > t then return {'busy', s[4]} end
local attempt = redis.call('HINCRBY', KEYS[1], d .. ':attempt', 1)
redis.call('HSET', KEYS[1], d .. ':lease', fmt(t + tonumber(ARGV[2])))
return {'ok', attempt, s[1]}
