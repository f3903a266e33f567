-- ARGV: round, kind, epoch, token, delay, reason, error, outbox, outbox id.
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'epoch', 'holder', 'deadline')
if not s[1] or FINAL[s[1]] then return {'gone'} end
if s[2] ~= ARGV[1] or s[3] ~= ARGV[2] or s[4] ~= ARGV[3] or s[5] ~= ARGV[4] then return {'lost'} end
local t = now()
local deadline = tonumber(s[6])
if t >= deadline then return {'deadline'} end
-- A back-off that would end past the deadline parks the step until the deadline: the job fails
-- then (the reconciler, with this last error), never sooner.
local until_ = math.min(t + tonumber(ARGV[5]), deadline)
redis.call('HINCRBY', KEYS[1], 'retries', 1)
redis.call('HSET', KEYS[1], 'state', 'waiting', 'wait_for', ARGV[6], 'wait_until', fmt(until_),
  'last_error', ARGV[7], 'holder', '', 'lease_until', 0, 'outbox', ARGV[8], 'outbox_id', ARGV[9],
  'progress_at', fmt(t), 'updated_at', fmt(t))
return {'ok', fmt(until_)}
