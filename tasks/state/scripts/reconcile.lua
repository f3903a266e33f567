-- ARGV: stall seconds, max expiries, outbox grace seconds. A 'wait' verdict carries the time the job
-- next needs a look: when a lease runs out, a stall or an outbox grace ends, a back-off is over, or
-- the deadline comes, whichever is first. A job still ``queued`` (no worker created its record) for
-- longer than the stall gets 'intake': its intake message is sent again from the stored spec.
-- ARGV[4] to ARGV[7]: the versions the worker reads (see ``readable``). A live job whose formats it
-- does not read gets {'newer' or 'older', spec version, memory version} and is left as it is: a
-- worker that reads them looks after it (an ended job's Celery result is delivered whatever its
-- formats: it is copied, not read).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'kind', 'holder', 'lease_until', 'progress_at', 'deadline',
  'wait_until', 'outbox', 'round', 'calls', 'held', 'approval_until', 'updated_at', 'deliver',
  'spec_version', 'memory_version')
if s[1] and FINAL[s[1]] and s[14] and s[14] ~= '' then return {'deliver', s[14]} end
if not s[1] or FINAL[s[1]] then return {'gone'} end
local unread = readable(4, false, s[15], s[16])
if unread then return unread end
local t = now()
local stall = tonumber(ARGV[1])
if s[1] == 'queued' then
  if redis.call('EXISTS', KEYS[10]) == 0 then return {'gone'} end
  local since = tonumber(s[5]) or tonumber(s[13]) or t
  if t - since <= stall then return {'wait', fmt(since + stall)} end
  redis.call('HSET', KEYS[1], 'progress_at', fmt(t))
  return {'intake'}
end
local idle = t - tonumber(s[5])
local deadline = tonumber(s[6])
if t > deadline then return {'deadline'} end
local live = s[3] ~= '' and tonumber(s[4]) > t
if redis.call('EXISTS', KEYS[8]) == 1 and not live then
  -- A cancelled tool step ends once no call runs: a call under way stores its result first.
  local running = false
  if s[2] == 'tools' then
    for i = 1, tonumber(s[10]) do
      local h = redis.call('HMGET', KEYS[5], i .. ':holder', i .. ':until')
      if h[1] and h[1] ~= '' and tonumber(h[2]) > t then running = true break end
    end
  end
  if not running then return {'cancel'} end
end
local quiet = stall
if s[8] ~= '[]' then quiet = math.min(stall, tonumber(ARGV[3])) end
local function wait(at) return {'wait', fmt(math.min(at, deadline))} end
if s[2] == 'tools' then
  local out = {'resend', s[2], s[9]}
  local nxt = tonumber(s[5]) + quiet
  for i = 1, tonumber(s[10]) do
    local k = tostring(i)
    local held = string.find(s[11] or '', ',' .. k .. ',', 1, true)
    if not held and redis.call('HEXISTS', KEYS[4], s[9] .. ':' .. k) == 0 then
      local h = redis.call('HMGET', KEYS[5], k .. ':holder', k .. ':until')
      if h[1] and h[1] ~= '' then
        if tonumber(h[2]) <= t then
          redis.call('HSET', KEYS[5], k .. ':holder', '')
          local e = redis.call('HINCRBY', KEYS[5], k .. ':expiries', 1)
          if e > tonumber(ARGV[2]) then return {'give-up', k} end
          table.insert(out, k)
        else
          nxt = math.min(nxt, tonumber(h[2]))
        end
      elseif idle > quiet then
        table.insert(out, k)
      end
    end
  end
  if #out > 3 then
    redis.call('HSET', KEYS[1], 'progress_at', fmt(t))
    return out
  end
  if s[1] == 'awaiting_approval' then return {'parked', s[12]} end
  if s[1] == 'waiting_for_children' then return {'children', fmt(math.min(nxt, deadline))} end
  return wait(nxt)
end
if live then return wait(tonumber(s[4])) end
if s[3] ~= '' then
  local e = redis.call('HINCRBY', KEYS[1], 'expiries', 1)
  redis.call('HSET', KEYS[1], 'holder', '', 'progress_at', fmt(t))
  if e > tonumber(ARGV[2]) then return {'give-up', ''} end
  return {'resend', s[2], s[9]}
end
if s[1] == 'waiting' then
  if t < tonumber(s[7]) + stall then return wait(tonumber(s[7]) + stall) end
elseif not (idle > quiet) then
  return wait(tonumber(s[5]) + quiet)
end
redis.call('HSET', KEYS[1], 'progress_at', fmt(t))
return {'resend', s[2], s[9]}
