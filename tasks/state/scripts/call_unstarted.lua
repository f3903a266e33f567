-- ARGV: index, token. Takes back the call's start mark and lets its lease go (its tool did not
-- run: the mark did not reach the replicas in time), while the token holds it. The holder is
-- cleared, so the next claim counts no lease expiry.
if redis.call('HGET', KEYS[5], ARGV[1] .. ':holder') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[5], ARGV[1] .. ':started')
redis.call('HSET', KEYS[5], ARGV[1] .. ':holder', '', ARGV[1] .. ':until', '0')
return 1
