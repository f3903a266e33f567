-- A batch of a model call's tokens (one model_delta), fenced by its step's claim, and for the first
-- batch of a round the round's round_started before it, in one round trip.
-- Fence: a delta from a step whose claim is older than the record's (its ``epoch`` is below the
-- record's: another worker took the step over, or the job moved on) or from a job that ended or is
-- gone is not written, so a worker cut off past its lease (paused, partitioned) never puts tokens
-- amid or after the takeover's. Without an epoch (a reasoner run in-process) nothing is fenced.
-- Opening: the job's record says which round was announced last (``opened``, moved here and by the
-- commit that writes a round_started: ``transition.lua``), so a round's tokens never come before its
-- round_started, and a step run again does not announce its round twice. An ended job gets no
-- round_started.
-- KEYS: the job's record, its events stream. ARGV: the claim's epoch ('': no fence), the stream's
-- length cap, (type, data, at) of the delta, then optionally the round to open and (type, data, at)
-- of its round_started. Returns the ids written; 'fenced' (nothing written); false when there is no
-- stream (nothing written: the caller creates it).
--! with prelude.lua
local s = redis.call('HMGET', KEYS[1], 'state', 'opened', 'epoch')
if ARGV[1] ~= '' and (not s[1] or FINAL[s[1]] or (tonumber(s[3]) or 0) > tonumber(ARGV[1])) then
  return 'fenced'
end
local ids = {}
if ARGV[6] and s[1] and not FINAL[s[1]] and (tonumber(s[2]) or -1) < tonumber(ARGV[6]) then
  local id = redis.call('XADD', KEYS[2], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[2], '*',
    'type', ARGV[7], 'data', ARGV[8], 'at', ARGV[9])
  if not id then return false end
  redis.call('HSET', KEYS[1], 'opened', ARGV[6])
  ids[1] = id
end
local id = redis.call('XADD', KEYS[2], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[2], '*',
  'type', ARGV[3], 'data', ARGV[4], 'at', ARGV[5])
if not id then return false end
ids[#ids + 1] = id
return ids
