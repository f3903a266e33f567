-- A person's message into a running job (``tandem.message``), stored once, atomically.
-- KEYS: the job's state, memory and events keys, then its messages hash (idempotency keys ->
-- answers, and the message counter ``seq``).
-- ARGV: idempotency key ('' for none), the job's opening step kind ('thinker' for a dual job,
-- 'actor' otherwise), the text (redacted), the job id, the most messages a job may get, the
-- event stream's length cap.
-- The message goes to the next round whose leading model call has not started: round 0 for a job
-- not started yet, the current one when its opening step is queued and unclaimed or summarizing
-- its older rounds first (``compact_<kind>``), else the next. It is written into the memory as
-- that round's ``person`` message (the model step reads the whole memory after its claim, which
-- this script cannot interleave with), with a ``message_received`` event; the answer is kept under
-- the key, so a repeated key gets the first answer and adds nothing. An ended or unknown job
-- gets a refusal and nothing is written.
--! with prelude.lua
local M = KEYS[4]
if ARGV[1] ~= '' then
  local prior = redis.call('HGET', M, 'key:' .. ARGV[1])
  if prior then return {'repeat', prior} end
end
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'holder')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended', s[1]} end
local r = tonumber(s[2]) or 0
if s[1] == 'queued' then
  r = 0  -- not started yet: its first model call reads it
elseif s[3] == 'compact_' .. ARGV[2] and s[1] ~= 'awaiting_approval' then
  -- the opening model call has not started: its compaction reads no person's message, the call does
elseif s[1] == 'awaiting_approval' or s[3] ~= ARGV[2] or (s[4] or '') ~= '' then
  r = r + 1
end
local seq = tonumber(redis.call('HGET', M, 'seq') or '0') + 1
if seq > tonumber(ARGV[5]) then return {'full', tostring(seq - 1)} end
redis.call('HSET', M, 'seq', seq)
local id = ARGV[4] .. ':message:' .. string.format('%04d', seq)
local round = string.format('%d', r)
local t = now()
redis.call('HSETNX', KEYS[2], round .. ':person:' .. id,
  cjson.encode({role = 'person', content = ARGV[3], round = r, message_id = id}))
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'type', 'message_received',
  'data', cjson.encode({message_id = id, round = r, text = ARGV[3]}), 'at', string.format('%.3f', t))
local answer = cjson.encode({job_id = ARGV[4], accepted = true, message_id = id, round = r})
if ARGV[1] ~= '' then redis.call('HSET', M, 'key:' .. ARGV[1], answer) end
local ttl = redis.call('TTL', KEYS[1])
if ttl <= 0 then ttl = 86400 end
for i = 2, 4 do
  if redis.call('TTL', KEYS[i]) < 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return {'ok', answer}
