-- A job just created holds back its first step until its tenant's turn (``tandem.tasks.tenants``):
-- state ``waiting`` for ``tenant``, the time left to its deadline kept aside (the wait does not
-- count towards it) and the deadline moved to the longest wait from now. Only a job that has not
-- started: no holder, and the epoch it was created with (0; a resumed or forked job: the epoch its
-- reopen gave it, so no step claimed it since). ARGV: the longest wait in seconds, the detail shown,
-- the epoch expected ('0' when left out).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'holder', 'deadline')
if s[1] ~= 'running' or s[2] ~= (ARGV[3] or '0') or s[3] ~= '' then return 0 end
local t = now()
local remaining = math.max(tonumber(s[4]) - t, 1)
local deadline = t + remaining + tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'waiting', 'wait_for', 'tenant', 'wait_until', fmt(deadline),
  'deadline', fmt(deadline), 'held_remaining', fmt(remaining), 'held_at', fmt(t), 'last_error', ARGV[2],
  'updated_at', fmt(t))
expire_all(live_ttl(t))
return 1
