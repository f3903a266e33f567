-- ARGV: outbox id, then '' (it was sent: clear it) or 'failed' (its send failed: mark it, so that
-- the reconciler sends it after the outbox grace rather than the stall).
if redis.call('HGET', KEYS[1], 'outbox_id') ~= ARGV[1] then return 0 end
if ARGV[2] == 'failed' then
  redis.call('HSET', KEYS[1], 'outbox_failed', ARGV[1])
else
  redis.call('HSET', KEYS[1], 'outbox', '[]')
end
return 1
