-- ARGV: the mark the Celery result was delivered for.
if redis.call('HGET', KEYS[1], 'deliver') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'deliver', '')
  return 1
end
return 0
