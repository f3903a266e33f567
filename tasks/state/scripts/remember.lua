-- KEYS: the job's state key, its decisions key (a hash: idempotency key -> answer).
-- ARGV: the idempotency key, the answer to keep if the key has none yet.
-- Returns the answer kept under the key: this one, or the one written first (by ``settle``, a
-- refusal, or a client withdrawing a decision no worker applied in time).
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
  local ttl = redis.call('PTTL', KEYS[1])
  local kept = redis.call('PTTL', KEYS[2])
  if ttl <= 0 then ttl = 86400000 end
  if kept < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
end
return redis.call('HGET', KEYS[2], ARGV[1])
