-- ``JobStore.mark_queued``: a job's ``queued`` record, written once, with its TTL in the same step (a
-- record never lives without one, even for a round trip), and the spec of its intake message.
-- KEYS: the record, the intake. ARGV: the TTL, reasoner, owner, time, the spec version's field and
-- value, the intake ('' for none). Fields the record has already are kept, and so is its TTL.
-- Returns 1 when this call wrote the record, 0 when the job had one.
local written = redis.call('HSETNX', KEYS[1], 'state', 'queued')
redis.call('HSETNX', KEYS[1], 'reasoner', ARGV[2])
redis.call('HSETNX', KEYS[1], 'owner', ARGV[3])
redis.call('HSETNX', KEYS[1], 'updated_at', ARGV[4])
redis.call('HSETNX', KEYS[1], ARGV[5], ARGV[6])
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
if ARGV[7] ~= '' then redis.call('SET', KEYS[2], ARGV[7], 'EX', ARGV[1], 'NX') end
return written
