-- ARGV: round, the approval record as read, the record to store, '1' when every call is decided,
-- the rejected calls' results (JSON [[index, result], ...]), the approved calls' messages, the
-- collect step's messages, outbox id, the pause's sequence number the decision names, its
-- idempotency key ('' for none), the answer to keep under that key, and the round's calls'
-- messages by index (JSON; '' for none): a call of the round that asked a question while the
-- approval was open (``asking``, see ask.lua) is sent again with the approved ones.
-- KEYS: the job's keys in JOB_PARTS order, then its decisions key (a hash: key -> answer).
-- The pause check, the key check and the write are one atomic step: a decision for a pause that
-- ended, or one whose key was answered (or withdrawn) already, changes nothing.
--! with prelude.lua
local D = KEYS[#KEYS]
if ARGV[10] ~= '' then
  local prior = redis.call('HGET', D, ARGV[10])
  if prior then return {'repeat', prior} end
end
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'parked_at', 'park_bound', 'deadline', 'pause_seq')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended', s[1]} end
local seq = s[6] or '0'
if seq ~= ARGV[9] then return {'stale', seq, s[1], s[2]} end
if s[1] ~= 'awaiting_approval' or s[2] ~= ARGV[1] then return {'not-waiting', s[1], s[2]} end
if redis.call('GET', KEYS[9]) ~= ARGV[2] then return {'changed'} end
redis.call('SET', KEYS[9], ARGV[3], 'KEEPTTL')
if ARGV[10] ~= '' then
  redis.call('HSET', D, ARGV[10], ARGV[11])
  local ttl = redis.call('TTL', KEYS[1])
  redis.call('EXPIRE', D, ttl > 0 and ttl or 86400)
end
if ARGV[4] ~= '1' then return {'stored'} end
for _, r in ipairs(cjson.decode(ARGV[5])) do
  if redis.call('HSETNX', KEYS[4], ARGV[1] .. ':' .. r[1], r[2]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'pending', -1)
  end
end
local t = now()
local unused = math.max(tonumber(s[4]) - (t - tonumber(s[3])), 0)
local outbox = ARGV[6]
local asking = redis.call('HGET', KEYS[1], 'asking') or ''
local prefix = ARGV[1] .. '|'
if (ARGV[12] or '') ~= '' and string.sub(asking, 1, #prefix) == prefix then
  local messages, by_index, added = cjson.decode(ARGV[6]), cjson.decode(ARGV[12]), false
  for i in string.gmatch(string.sub(asking, #prefix + 1), '%d+') do
    if by_index[i] then
      table.insert(messages, by_index[i])
      added = true
    end
  end
  if added then outbox = cjson.encode(messages) end  -- (an empty table would encode as {})
end
redis.call('HSET', KEYS[1], 'state', 'running', 'held', '', 'approval_until', 0,
  'deadline', fmt(tonumber(s[5]) - unused), 'outbox', outbox, 'outbox_id', ARGV[8], 'asking', '',
  'progress_at', fmt(t), 'updated_at', fmt(t))
local verdict = 'running'
if tonumber(redis.call('HGET', KEYS[1], 'pending')) <= 0 then
  redis.call('HSET', KEYS[1], 'kind', 'collect', 'holder', '', 'lease_until', 0, 'expiries', 0,
    'outbox', ARGV[7])
  verdict = 'collect'
end
expire_all(live_ttl(t))
return {verdict}
