-- KEYS: the job's keys in JOB_PARTS order (state first), then the broker lists of the messages to
-- push. ARGV: spec, reasoner, round, kind, timeout, ttl_after, outbox, outbox id, the first event's
-- type ('' for none), data and time, the stream's length cap, the spec and memory versions the
-- record holds (the creating worker's: ``tandem.tasks.state.versions``), the number n of messages
-- to push and the n messages (``push_all``: the first step, queued with the record).
--! with prelude.lua
local existing = redis.call('HGET', KEYS[1], 'state')
if existing and existing ~= 'queued' then return 0 end
local t = now()
redis.call('DEL', KEYS[10])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'running', 'reasoner', ARGV[2], 'round', ARGV[3], 'kind', ARGV[4],
  'calls', 0, 'status', '', 'epoch', 0, 'holder', '', 'lease_until', 0, 'expiries', 0, 'retries', 0,
  'pending', 0, 'outbox', ARGV[7], 'outbox_id', ARGV[8], 'progress_at', fmt(t), 'created_at', fmt(t),
  'updated_at', fmt(t), 'deadline', fmt(t + tonumber(ARGV[5])), 'ttl_after', ARGV[6], 'wait_for', '',
  'wait_until', 0, 'last_error', '', 'error', '', 'tx', '', 'owner', owner_of(ARGV[1]),
  'spec_version', ARGV[13], 'memory_version', ARGV[14])
local ttl = math.max(math.floor(tonumber(ARGV[5]) + tonumber(ARGV[6])), 1)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
if ARGV[9] ~= '' then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[12], '*', 'type', ARGV[9], 'data', ARGV[10], 'at', ARGV[11])
  redis.call('EXPIRE', KEYS[6], ttl)
end
push_all(15)
return 1
