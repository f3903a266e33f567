-- The Lua helpers every job script starts with (``now``, ``fmt``, TTLs); ``tandem.tasks.state.reopen``'s
-- scripts share them.
local FINAL = {completed=true, truncated=true, failed=true, cancelled=true}
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function fmt(x) return string.format('%.6f', x) end
-- The tenant that owns a job, read from its spec (JSON): the record's ``owner`` field.
local function owner_of(spec)
  local ok, s = pcall(cjson.decode, spec)
  if ok and type(s) == 'table' and type(s.owner) == 'string' and s.owner ~= '' then return s.owner end
  return 'default'
end
-- ``last``: the last key that is the job's (default: all of KEYS; a commit's broker lists follow).
local function expire_all(ttl, last)
  ttl = math.max(math.floor(ttl), 1)
  for i = 1, last or #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
end
-- A commit queues its successors: the n = ARGV[at] messages after it, each LPUSHed to one of the
-- broker lists that end KEYS, in order. Returns n.
local function push_all(at)
  local n = tonumber(ARGV[at])
  for i = 1, n do redis.call('LPUSH', KEYS[#KEYS - n + i], ARGV[at + i]) end
  return n
end
-- A live job's TTL from its record's deadline and ttl_after, for every key of the job: only the
-- rare transitions that move the deadline (park, settle, reopen) use it.
local function live_ttl(t)
  local f = redis.call('HMGET', KEYS[1], 'deadline', 'ttl_after')
  return math.max((tonumber(f[1]) or t) - t, 0) + (tonumber(f[2]) or 86400)
end
-- The same TTL for one key (deadline and ttl_after read with the script's own HMGET): only a key a
-- script may create gets it, since writes to an existing key keep its TTL.
local function expire_key(key, t, deadline, ttl_after)
  local ttl = math.max((tonumber(deadline) or t) - t, 0) + (tonumber(ttl_after) or 86400)
  redis.call('EXPIRE', key, math.max(math.floor(ttl), 1))
end
-- The step's view, when its claim asks for one (``tandem.tasks.state.views.ViewAsk``: ARGV from
-- ``first`` on: the messages' mode, the number n of record fields, the fields, the results flag,
-- the message keys): {spec, cancel flag, record values, messages, the round's tool results}.
local function view_of(first, round)
  local mode = ARGV[first]
  if mode == nil then return nil end
  local n = tonumber(ARGV[first + 1])
  local record, messages, results = {}, {}, {}
  if n > 0 then record = redis.call('HMGET', KEYS[1], unpack(ARGV, first + 2, first + 1 + n)) end
  if mode == '*' then
    messages = redis.call('HVALS', KEYS[3])
  elseif mode == 'k' then
    messages = redis.call('HMGET', KEYS[3], unpack(ARGV, first + 3 + n))
  end
  if ARGV[first + 2 + n] == '1' then
    local fields = {}
    for i = 1, tonumber(redis.call('HGET', KEYS[1], 'calls') or 0) do fields[i] = round .. ':' .. i end
    if #fields > 0 then results = redis.call('HMGET', KEYS[4], unpack(fields)) end
  end
  return {redis.call('GET', KEYS[2]), redis.call('EXISTS', KEYS[8]), record, messages, results}
end
-- The version check of a job's formats (``tandem.tasks.state.versions``): its record's
-- ``spec_version`` and ``memory_version``, as the caller's HMGET of KEYS[1] read them (0 when
-- missing: a record from before they were kept) against what the worker reads, ARGV[at] to ARGV[at + 3] (the oldest and newest spec version, the
-- oldest and newest memory version). nil when the worker reads them; else {'newer' or 'older',
-- spec version, memory version}, and nothing is written. With ``raise``, a job the worker reads
-- has its memory version raised to the worker's newest: the worker writes in its own format from
-- now on, so a worker that cannot read that format hands the job back from then on.
local function readable(at, raise, spec_field, memory_field)
  local spec, memory = tonumber(spec_field) or 0, tonumber(memory_field) or 0
  local newest_memory = tonumber(ARGV[at + 3])
  local fit = nil
  if spec > tonumber(ARGV[at + 1]) or memory > newest_memory then
    fit = 'newer'
  elseif spec < tonumber(ARGV[at]) or memory < tonumber(ARGV[at + 2]) then
    fit = 'older'
  end
  if fit then return {fit, tostring(spec), tostring(memory)} end
  if raise and memory < newest_memory then redis.call('HSET', KEYS[1], 'memory_version', newest_memory) end
  return nil
end
