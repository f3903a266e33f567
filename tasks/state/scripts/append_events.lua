-- Append a batch of events to a job's stream once, however often it is sent.
-- KEYS: the events stream, the job's append marks (a hash: write token -> the entries' ids).
-- ARGV: write token, stream length cap (approximate), the marks' TTL in seconds when the stream
-- has none, then (type, data, at) for each event.
-- A batch whose token is marked was written already (redis-py sent it again after a reply lost to
-- a dropped connection): its first ids are returned and nothing is added. No stream (expired, or
-- the intake never made it): false, and nothing is written (the caller creates it).
local done = redis.call('HGET', KEYS[2], ARGV[1])
if done then
  return cjson.decode(done)
end
local ids = {}
for i = 4, #ARGV, 3 do
  local id = redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[2], '*',
    'type', ARGV[i], 'data', ARGV[i + 1], 'at', ARGV[i + 2])
  if not id then
    return false  -- only the first can find no stream: nothing was added
  end
  ids[#ids + 1] = id
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(ids))
if redis.call('TTL', KEYS[2]) < 0 then  -- made just now: it lives as long as the stream
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  else
    redis.call('EXPIRE', KEYS[2], ARGV[3])
  end
end
return ids
