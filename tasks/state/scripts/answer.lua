-- Store the answer to a job's question and send its call again (``tandem.tasks.control.questions``).
-- KEYS: the job's keys in JOB_PARTS order, its question key, its decisions key (idempotency key ->
-- answer, shared with decisions).
-- ARGV: the pause number the answer names, its idempotency key ('' for none), the reply to keep
-- under that key, the question record as read, the record to store, the calls hash field of the
-- answer, the answer (JSON), the outbox (the asking call's message), outbox id, round, call index,
-- and the messages of every call of the round by index (JSON), for the calls that asked meanwhile;
-- optionally the state and pause kind the job must wait in (default ``awaiting_approval``/``question``).
-- The pause check, the key check and the write are one atomic step: an answer for a pause that
-- ended, or whose key was answered (or withdrawn) already, changes nothing.
--! with prelude.lua
local D = KEYS[13]
if ARGV[2] ~= '' then
  local prior = redis.call('HGET', D, ARGV[2])
  if prior then return {'repeat', prior} end
end
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'parked_at', 'park_bound', 'deadline',
  'pause_seq', 'pause_kind', 'held')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended', s[1]} end
local seq = s[6] or '0'
if seq ~= ARGV[1] then return {'stale', seq, s[1], s[7] or ''} end
if s[1] ~= (ARGV[13] or 'awaiting_approval') or s[7] ~= (ARGV[14] or 'question') or s[2] ~= ARGV[10] then
  return {'not-waiting', s[1], s[2]}
end
if redis.call('HGET', KEYS[12], 'record') ~= ARGV[4] then return {'changed'} end
redis.call('HSET', KEYS[12], 'record', ARGV[5])
redis.call('HSET', KEYS[5], ARGV[6], ARGV[7])
if ARGV[2] ~= '' then
  redis.call('HSET', D, ARGV[2], ARGV[3])
  local ttl = redis.call('TTL', KEYS[1])
  redis.call('EXPIRE', D, ttl > 0 and ttl or 86400)
end
local t = now()
local unused = math.max(tonumber(s[4]) - (t - tonumber(s[3])), 0)
local held = (string.gsub(s[8] or '', ',' .. ARGV[11] .. ',', ','))
if held == ',' then held = '' end
-- Calls of this round that asked while this question was open go again too (``ask.lua``).
local outbox = ARGV[8]
local asking = redis.call('HGET', KEYS[1], 'asking') or ''
local prefix = ARGV[10] .. '|'
if string.sub(asking, 1, #prefix) == prefix then
  local messages, by_index = cjson.decode(ARGV[8]), cjson.decode(ARGV[12])
  for i in string.gmatch(string.sub(asking, #prefix + 1), '%d+') do
    if i ~= ARGV[11] and by_index[i] then table.insert(messages, by_index[i]) end
  end
  outbox = cjson.encode(messages)
end
redis.call('HSET', KEYS[1], 'state', 'running', 'pause_kind', '', 'held', held, 'approval_until', 0,
  'deadline', fmt(tonumber(s[5]) - unused), 'outbox', outbox, 'outbox_id', ARGV[9], 'asking', '',
  'progress_at', fmt(t), 'updated_at', fmt(t))
expire_all(live_ttl(t))
return {'running'}
