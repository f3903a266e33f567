-- A job joins a thread's index, once.
-- KEYS: the thread's index (a sorted set: job id -> when it joined).
-- ARGV: job id, when it joined (Unix time), the index's TTL in seconds from now (at least).
-- A job already in the index keeps its place; the index lives at least as long as its newest job.
redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1])
if redis.call('TTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return redis.call('ZCARD', KEYS[1])
