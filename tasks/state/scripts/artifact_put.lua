-- Keep a tool output whole as an artifact of its job (``tandem.tasks.state.artifacts``), once.
-- KEYS: the job's artifacts hash (handle -> text, and the bytes of them all under '#bytes'), its
-- memory hash (the conversation, counted with the artifacts against the limit), its state record
-- (whose TTL a new artifacts hash takes).
-- ARGV: the handle, the text, its size in bytes, the job's memory limit in bytes (0: none), the TTL
-- of a new hash when the record has none (the store's).
-- Returns {'exists', bytes} for a handle stored already (its text is not written again), {'full',
-- bytes used} when the text would bring the conversation and the artifacts over the limit
-- (nothing written), {'ok', bytes} once stored.
local A, M = KEYS[1], KEYS[2]
local size = tonumber(ARGV[3])
if redis.call('HEXISTS', A, ARGV[1]) == 1 then
  return {'exists', tostring(redis.call('HSTRLEN', A, ARGV[1]))}
end
local limit = tonumber(ARGV[4])
if limit > 0 then
  local used = tonumber(redis.call('HGET', A, '#bytes') or '0')
  for _, field in ipairs(redis.call('HKEYS', M)) do used = used + redis.call('HSTRLEN', M, field) end
  if used + size > limit then return {'full', tostring(used)} end
end
redis.call('HSET', A, ARGV[1], ARGV[2])
redis.call('HINCRBY', A, '#bytes', size)
if redis.call('TTL', A) < 0 then
  local ttl = redis.call('TTL', KEYS[3])
  if ttl <= 0 then ttl = tonumber(ARGV[5]) end
  redis.call('EXPIRE', A, ttl)
end
return {'ok', tostring(size)}
