-- ARGV: index, token. Marks the call started (its tool is about to run) while the token holds it.
if redis.call('HGET', KEYS[5], ARGV[1] .. ':holder') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[5], ARGV[1] .. ':started', '1')
return 1
