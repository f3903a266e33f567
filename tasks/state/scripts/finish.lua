-- ARGV: result, status, error, ttl, force ('1': no step check), round, kind, epoch, token, the
-- ``final`` event's data and time, the stream's MAXLEN, how the Celery result goes out ('script':
-- written here to KEYS[12]; 'mark': the record keeps ARGV[14] as a ``deliver`` mark; '': not at all),
-- then for 'script' its value and expiry (s), for 'mark' the mark; ARGV[16]: the indexes in KEYS of
-- the job's keys to expire, comma-separated ('': all of them; a client's end names only the keys
-- its Redis user may write, docs/security.md).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'epoch', 'holder')
if s[1] and FINAL[s[1]] then return 0 end
if ARGV[5] ~= '1' then
  if not s[1] then return 0 end
  if s[2] ~= ARGV[6] or s[3] ~= ARGV[7] or s[4] ~= ARGV[8] or s[5] ~= ARGV[9] then return 0 end
end
local first = redis.call('SET', KEYS[7], ARGV[1], 'NX')
local t = now()
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'error', ARGV[3], 'kind', 'finalize', 'holder', '',
  'lease_until', 0,
  'outbox', '[]', 'wait_for', '', 'wait_until', 0, 'progress_at', fmt(t), 'updated_at', fmt(t))
if first then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[12], '*', 'type', 'final', 'data', ARGV[10], 'at', ARGV[11])
  if ARGV[13] == 'mark' then redis.call('HSET', KEYS[1], 'deliver', ARGV[14]) end
end
if ARGV[16] and ARGV[16] ~= '' then
  local ttl = math.max(math.floor(tonumber(ARGV[4])), 1)
  for i in string.gmatch(ARGV[16], '%d+') do redis.call('EXPIRE', KEYS[tonumber(i)], ttl) end
else
  expire_all(tonumber(ARGV[4]))
end
if first and ARGV[13] == 'script' then
  redis.call('SET', KEYS[12], ARGV[14], 'EX', math.max(tonumber(ARGV[15]), 1))
  redis.call('PUBLISH', KEYS[12], ARGV[14])
end
if first then return 1 end
return 0
