-- A job asks to start (``tandem.tasks.tenants.queue``). KEYS: the tenant's running and waiting sets,
-- the set of tenants with waiting jobs, the fleet's running set, the parked jobs' hash, the set of
-- tenants seen (what ``tandem tenants`` lists). ARGV: job, tenant, the tenant's cap (0: none), the
-- fleet's cap (0: none), the job's expiry in seconds from now (how long it may count as running),
-- its priority (0-9, 9 most urgent), the keys' TTL.
-- Running sets score a job by when it stops counting (its deadline), so a job that ended unseen
-- frees its place by then. Returns 'admitted', 'running' (it was), 'waiting', or 'waiting+room'
-- (queued behind its own tenant's waiting jobs while a slot is free: the caller runs the pick).
--! with prelude.lua
local t = now()
local job = ARGV[1]
local ttl = tonumber(ARGV[7])
redis.call('SADD', KEYS[6], ARGV[2])
redis.call('EXPIRE', KEYS[6], ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', t)
if redis.call('ZSCORE', KEYS[1], job) then return 'running' end
if redis.call('ZSCORE', KEYS[2], job) then return 'waiting' end
local cap, fleet = tonumber(ARGV[3]), tonumber(ARGV[4])
local free = (cap == 0 or redis.call('ZCARD', KEYS[1]) < cap)
  and (fleet == 0 or redis.call('ZCARD', KEYS[4]) < fleet)
local expiry = t + tonumber(ARGV[5])
if free and redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('ZADD', KEYS[1], expiry, job)
  redis.call('ZADD', KEYS[4], expiry, job)
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[4], ttl)
  return 'admitted'
end
-- Within a tenant: the most urgent first, then the oldest.
redis.call('ZADD', KEYS[2], 'NX', (9 - tonumber(ARGV[6])) * 1e11 + t, job)
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[5], job, ARGV[5])
for i = 2, 5 do if i ~= 4 then redis.call('EXPIRE', KEYS[i], ttl) end end
if free then return 'waiting+room' end
return 'waiting'
