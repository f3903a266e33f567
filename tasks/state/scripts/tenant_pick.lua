-- Free job slots go to waiting jobs, weighted fair share between tenants (``tandem.tasks.tenants``).
-- KEYS: the set of tenants with waiting jobs, the fleet's running set, the parked jobs' hash, the
-- admitted set (admitted, not yet known started). ARGV: the tenant keys' prefix (``<prefix>:tenants:{fair}:``),
-- caps and weights (JSON: {"d": [cap, weight], "t": {tenant: [cap, weight]}}; cap 0: none), the
-- fleet's cap (0: none), the most jobs to admit, a job that ended ('' for none) and its tenant, the
-- keys' TTL. Each slot goes to the tenant with the fewest running jobs for its weight among those
-- with a waiting job and room under their cap (ties: the most urgent, then the oldest head job).
-- Returns the admitted job ids: the caller starts them (``tenant_start``).
--! with prelude.lua
local t = now()
local base = ARGV[1]
local ttl = tonumber(ARGV[7])
if ARGV[5] ~= '' then
  redis.call('ZREM', base .. 'running:' .. ARGV[6], ARGV[5])
  redis.call('ZREM', base .. 'waiting:' .. ARGV[6], ARGV[5])
  redis.call('ZREM', KEYS[2], ARGV[5])
  redis.call('HDEL', KEYS[3], ARGV[5])
  redis.call('ZREM', KEYS[4], ARGV[5])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', t)
local conf = cjson.decode(ARGV[2])
local fleet = tonumber(ARGV[3])
local out = {}
for _ = 1, tonumber(ARGV[4]) do
  if fleet > 0 and redis.call('ZCARD', KEYS[2]) >= fleet then break end
  local best, best_share, best_head = nil, 0, 0
  for _, tenant in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    local head = redis.call('ZRANGE', base .. 'waiting:' .. tenant, 0, 0, 'WITHSCORES')
    if #head == 0 then
      redis.call('SREM', KEYS[1], tenant)
    else
      local running = base .. 'running:' .. tenant
      redis.call('ZREMRANGEBYSCORE', running, '-inf', t)
      local c = conf.t[tenant] or conf.d
      local n = redis.call('ZCARD', running)
      if c[1] == 0 or n < c[1] then
        local share, at = n / c[2], tonumber(head[2])
        if best == nil or share < best_share or (share == best_share and at < best_head) then
          best, best_share, best_head = tenant, share, at
        end
      end
    end
  end
  if best == nil then break end
  local job = redis.call('ZPOPMIN', base .. 'waiting:' .. best)[1]
  local expiry = t + (tonumber(redis.call('HGET', KEYS[3], job)) or 86400)
  redis.call('HDEL', KEYS[3], job)
  local running = base .. 'running:' .. best
  redis.call('ZADD', running, expiry, job)
  redis.call('ZADD', KEYS[2], expiry, job)
  redis.call('ZADD', KEYS[4], t, job)
  redis.call('EXPIRE', running, ttl)
  table.insert(out, job)
end
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('EXPIRE', KEYS[4], ttl)
return out
