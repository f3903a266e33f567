-- ARGV: round, kind, epoch, token, tx, next round, next kind, next calls, next status, outbox,
-- outbox id, memory writes (JSON [[field, value], ...]), then to park the job ('' for no): the
-- approval record, the held calls (",2,3,"), the longest wait (s), when it ends (epoch s).
-- Parking counts the job's pauses (``pause_seq``, kept across resume): the new count is the pause's
-- sequence number, which a decision names. Then the stream's length cap, the
-- number n of messages to push, the n messages (``push_all``: to the n broker lists ending KEYS, the
-- step's successors, queued with the commit), then the step's events as (type, data, at) triples:
-- appended with the commit, so they are in the stream exactly when the step is stored (a commit
-- run again with the same tx returns before writing or pushing anything). A ``round_started`` among
-- them is the claimed round's: it is written only if the record's ``opened`` (the last round whose
-- round_started is in the stream) is below that round, and ``opened`` moves to it, so a round that
-- a streamed reply opened with its first token (``append_delta.lua``) is not announced twice.
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'epoch', 'holder', 'tx', 'deadline',
  'ttl_after', 'calls', 'opened')
if s[6] == ARGV[5] then return 1 end
if not s[1] or FINAL[s[1]] then return 0 end
if s[2] ~= ARGV[1] or s[3] ~= ARGV[2] or s[4] ~= ARGV[3] or s[5] ~= ARGV[4] then return 0 end
local events_at = 19 + tonumber(ARGV[18])  -- the step's events come after the pushed messages
local opens, opened = false, s[10] or ''
for i = events_at, #ARGV, 3 do
  if ARGV[i] == 'round_started' and (tonumber(s[10]) or -1) < tonumber(ARGV[1]) then
    opens, opened = true, ARGV[1]
  end
end
local writes = cjson.decode(ARGV[12])
for _, w in ipairs(writes) do redis.call('HSETNX', KEYS[3], w[1], w[2]) end
local t = now()
if #writes > 0 then expire_key(KEYS[3], t, s[7], s[8]) end
redis.call('HSET', KEYS[1], 'state', 'running', 'round', ARGV[6], 'kind', ARGV[7], 'calls', ARGV[8],
  'status', ARGV[9], 'pending', ARGV[8], 'holder', '', 'lease_until', 0, 'expiries', 0, 'retries', 0,
  'outbox', ARGV[10], 'outbox_id', ARGV[11], 'progress_at', fmt(t), 'updated_at', fmt(t), 'tx', ARGV[5],
  'wait_for', '', 'wait_until', 0, 'last_error', '', 'held', '', 'opened', opened)
if s[3] == 'collect' or tonumber(s[9] or 0) > 0 then redis.call('DEL', KEYS[5]) end
local pushes = push_all(18)
for i = events_at, #ARGV, 3 do
  if ARGV[i] ~= 'round_started' or opens then
    redis.call('XADD', KEYS[6], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[17], '*',
      'type', ARGV[i], 'data', ARGV[i + 1], 'at', ARGV[i + 2])
  end
end
if ARGV[13] ~= '' then
  redis.call('SET', KEYS[9], ARGV[13])
  local deadline = tonumber(s[7]) + tonumber(ARGV[15])
  redis.call('HSET', KEYS[1], 'state', 'awaiting_approval', 'pause_kind', 'approval', 'held', ARGV[14], 'parked_at', fmt(t),
    'park_bound', ARGV[15], 'approval_until', ARGV[16], 'deadline', fmt(deadline))
  redis.call('HINCRBY', KEYS[1], 'pause_seq', 1)
  -- Parking moves the deadline back: every key of the job must live as long (rare, so all of them;
  -- the broker lists after them are not the job's).
  expire_all(live_ttl(t), #KEYS - pushes)
end
return 1
