-- KEYS: the job's keys in JOB_PARTS order. ARGV: mode, expected updated_at, spec, reasoner, round,
-- kind, calls, status, pending, outbox, outbox id, timeout, ttl_after, memory writes, call-result
-- writes (JSON [[field, value], ...]), call indices to forget (JSON list), the pause count a fork
-- starts from (its origin's ``pause_seq``; a resume keeps the job's own), the spec and memory
-- versions of the worker (``tandem.tasks.state.versions``): the spec is stored in its format, and
-- so is a fork's copied memory; a resumed job's memory version only ever goes up (its stored
-- memory stays as it was, and the worker writes in its own format from now on).
--! with prelude.lua
local RESUMABLE = {failed=true, cancelled=true, truncated=true}
local s = redis.call('HMGET', KEYS[1], 'state', 'updated_at', 'memory_version')
if ARGV[1] == 'resume' then
  if not s[1] or redis.call('EXISTS', KEYS[2]) == 0 then return {'gone', ''} end
  if not RESUMABLE[s[1]] then return {'state', s[1]} end
  if s[2] ~= ARGV[2] then return {'moved', s[1]} end
elseif s[1] then
  return {'exists', s[1]}
end
local t = now()
redis.call('SET', KEYS[2], ARGV[3])
for _, w in ipairs(cjson.decode(ARGV[14])) do redis.call('HSETNX', KEYS[3], w[1], w[2]) end
for _, w in ipairs(cjson.decode(ARGV[15])) do redis.call('HSETNX', KEYS[4], w[1], w[2]) end
if ARGV[6] == 'tools' then
  for _, i in ipairs(cjson.decode(ARGV[16])) do
    local k = tostring(i)
    redis.call('HDEL', KEYS[4], ARGV[5] .. ':' .. k)
    redis.call('HDEL', KEYS[5], k .. ':holder', k .. ':until', k .. ':attempts', k .. ':expiries',
      k .. ':started')
  end
else
  redis.call('DEL', KEYS[5])
end
redis.call('DEL', KEYS[7], KEYS[8])
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
if ARGV[1] == 'resume' then redis.call('HINCRBY', KEYS[1], 'resumes', 1) end
redis.call('HSETNX', KEYS[1], 'created_at', fmt(t))
redis.call('HSET', KEYS[1], 'state', 'running', 'reasoner', ARGV[4], 'round', ARGV[5], 'kind', ARGV[6],
  'calls', ARGV[7], 'status', ARGV[8], 'pending', ARGV[9], 'holder', '', 'lease_until', 0, 'expiries', 0,
  'retries', 0, 'outbox', ARGV[10], 'outbox_id', ARGV[11], 'progress_at', fmt(t), 'updated_at', fmt(t),
  'deadline', fmt(t + tonumber(ARGV[12])), 'ttl_after', ARGV[13], 'wait_for', '', 'wait_until', 0,
  'last_error', '', 'error', '', 'tx', '', 'held', '', 'approval_until', 0, 'deliver', '',
  'owner', owner_of(ARGV[3]))
local memory_version = tonumber(ARGV[19])
if ARGV[1] == 'resume' then memory_version = math.max(memory_version, tonumber(s[3]) or 0) end
redis.call('HSET', KEYS[1], 'spec_version', ARGV[18], 'memory_version', memory_version)
if ARGV[1] ~= 'resume' and tonumber(ARGV[17] or '0') > 0 then
  redis.call('HSET', KEYS[1], 'pause_seq', ARGV[17])
end
expire_all(live_ttl(t))
return {'ok', tostring(epoch)}
