-- A round's first model_delta, written after the round's round_started unless the stream has that
-- already: the job's record says which round was announced last (``opened``, moved here and by the
-- commit that writes a round_started: ``transition.lua``). So a round's tokens never come before
-- its round_started, and a step run again (its worker died, a retry after a broken stream, a fenced
-- worker still streaming) does not announce its round twice. An ended job gets the delta only.
-- KEYS: the job's record, its events stream. ARGV: the round, the stream's length cap, then
-- (type, data, at) of the round_started and of the delta. Returns the ids written; false when
-- there is no stream (nothing written: the caller creates it).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'opened')
local ids = {}
if s[1] and not FINAL[s[1]] and (tonumber(s[2]) or -1) < tonumber(ARGV[1]) then
  local id = redis.call('XADD', KEYS[2], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[2], '*',
    'type', ARGV[3], 'data', ARGV[4], 'at', ARGV[5])
  if not id then return false end
  redis.call('HSET', KEYS[1], 'opened', ARGV[1])
  ids[1] = id
end
local id = redis.call('XADD', KEYS[2], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[2], '*',
  'type', ARGV[6], 'data', ARGV[7], 'at', ARGV[8])
if not id then return false end
ids[#ids + 1] = id
return ids
