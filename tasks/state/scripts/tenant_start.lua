-- An admitted job starts: a job held for its tenant (``tenant_hold``) runs again, its deadline the
-- time it had left when it was held. 0 when it is not held (started already, ended, or not held yet).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'wait_for', 'held_remaining')
if s[1] ~= 'waiting' or s[2] ~= 'tenant' then return 0 end
local t = now()
redis.call('HSET', KEYS[1], 'state', 'running', 'wait_for', '', 'wait_until', 0, 'last_error', '',
  'deadline', fmt(t + tonumber(s[3])), 'progress_at', fmt(t), 'updated_at', fmt(t), 'admitted_at', fmt(t))
expire_all(live_ttl(t))
return 1
