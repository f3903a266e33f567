-- KEYS: the job's state key, its decisions key (a hash: idempotency key -> answer).
-- ARGV: the idempotency key, the answer to keep if the key has none yet.
-- Returns the answer kept under the key: this one, or the one written first (by ``settle``, a
-- refusal, or a client withdrawing a decision no worker applied in time). Only commands a
-- client's Redis user may run (docs/security.md): a client withdraws with this script.
-- A job with no record (unknown, or expired) gets no key written: the answer is only given back.
if redis.call('EXISTS', KEYS[1]) == 0 then return ARGV[2] end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
  local ttl = redis.call('TTL', KEYS[1])
  if ttl <= 0 then ttl = 86400 end
  if redis.call('TTL', KEYS[2]) < ttl then redis.call('EXPIRE', KEYS[2], ttl) end
end
return redis.call('HGET', KEYS[2], ARGV[1])
