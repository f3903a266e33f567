-- ARGV: outbox id.
if redis.call('HGET', KEYS[1], 'outbox_id') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'outbox', '[]')
  return 1
end
return 0
