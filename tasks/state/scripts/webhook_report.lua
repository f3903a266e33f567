-- KEYS: the job's webhook deliveries (hash). ARGV: delivery id, attempt, outcome ('delivered',
-- 'failed' or 'retry'), the retry's delay (s). Only the attempt that holds the delivery reports, and
-- once (a later attempt fenced an earlier, slow one off; a report ends the hold). Returns '' (not
-- this attempt's to report), the outcome, or for 'retry' when the next attempt is due (Redis time).
--! with prelude.lua
local d = ARGV[1]
local s = redis.call('HMGET', KEYS[1], d .. ':state', d .. ':attempt', d .. ':lease')
if s[1] ~= 'pending' or s[2] ~= ARGV[2] or tonumber(s[3]) == 0 then return '' end
if ARGV[3] ~= 'retry' then
  redis.call('HSET', KEYS[1], d .. ':state', ARGV[3], d .. ':lease', 0)
  return ARGV[3]
end
local due = fmt(now() + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], d .. ':due', due, d .. ':lease', 0)
return due
