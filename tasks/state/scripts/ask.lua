-- A tool call asks a person a question: park the job on it (``tandem.tasks.control.questions``).
-- KEYS: the job's keys in JOB_PARTS order, then its question key (a hash: record, seq).
-- ARGV: round, call index, the call's claim token, the question record (JSON), the longest wait (s),
-- when it ends (epoch s), and optionally the state and pause kind to park in (default
-- ``awaiting_approval``/``question``; child jobs park in ``waiting_for_children``/``children`` with a
-- wait of 0: their wait counts towards the deadline, ``tandem.tasks.control.children``).
-- Only the call's holder may ask. A running job parks (state ``awaiting_approval``, ``pause_kind``
-- ``question``): the call is held (never claimed or sent again until answered), the pause is
-- counted (``pause_seq``: the record gets its number), and the deadline moves back by the wait.
-- A job already waiting on another pause gets 'busy': the call is released without a result, noted
-- in ``asking``, and asks again when it is sent again: by the answer to a question (``answer.lua``),
-- or by the decision that ends an approval (``settle.lua``).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'deadline', 'held')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended', s[1]} end
if s[2] ~= ARGV[1] or s[3] ~= 'tools' then return {'lost'} end
if redis.call('HGET', KEYS[5], ARGV[2] .. ':holder') ~= ARGV[3] then return {'lost'} end
local t = now()
redis.call('HSET', KEYS[5], ARGV[2] .. ':holder', '')
-- The call stopped at its question, on purpose: its next run is no interrupted at_most_once call.
redis.call('HDEL', KEYS[5], ARGV[2] .. ':started')
if s[1] ~= 'running' then
  -- Noted (with its round) so that the answer to the open question sends it again at once.
  local asking = redis.call('HGET', KEYS[1], 'asking') or ''
  local prefix = ARGV[1] .. '|'
  if string.sub(asking, 1, #prefix) ~= prefix then asking = prefix .. ',' end
  if not string.find(asking, ',' .. ARGV[2] .. ',', 1, true) then asking = asking .. ARGV[2] .. ',' end
  redis.call('HSET', KEYS[1], 'progress_at', fmt(t), 'asking', asking)
  return {'busy', s[1]}
end
local held = s[5] or ''
if held == '' then held = ',' end
held = held .. ARGV[2] .. ','
local seq = redis.call('HINCRBY', KEYS[1], 'pause_seq', 1)
-- The record as sent (never re-encoded here: Lua's JSON would turn an empty list into an object).
redis.call('DEL', KEYS[12])
redis.call('HSET', KEYS[12], 'record', ARGV[4], 'seq', seq)
redis.call('HSET', KEYS[1], 'state', ARGV[7] or 'awaiting_approval', 'pause_kind', ARGV[8] or 'question', 'held', held,
  'parked_at', fmt(t), 'park_bound', ARGV[5], 'approval_until', ARGV[6],
  'deadline', fmt(tonumber(s[4]) + tonumber(ARGV[5])), 'progress_at', fmt(t), 'updated_at', fmt(t))
-- Parking moves the deadline back: every key of the job must live as long.
expire_all(live_ttl(t))
return {'parked', tostring(seq)}
