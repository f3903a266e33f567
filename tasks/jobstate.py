"""``JobMachine``: a job's progress as one record in Redis, moved by atomic transitions.

The record (hash ``{prefix}:{<job>}:state``) holds the job's state (``running``, ``waiting`` or a
final state), its current step (``round``, ``kind``; ``calls`` for a tool step, ``status`` for
``finalize``), an ``epoch`` that grows at every claim of a step, the ``holder`` of the step's lease
and when that lease runs out (``lease_until``, on Redis's clock), the progress time, the deadline,
and the ``outbox``: the messages of the current step, written by the transition that made it
current and cleared once they were sent.

Every change is one Lua script over the job's keys, which all share the hash tag ``{<job>}``:

- ``claim`` takes the current step for a worker (step and round must match, no live lease); it
  bumps the epoch and counts a lease that ran out as a *lease expiry*;
- ``transition`` stores the step's memory writes and moves to the next step, only for the
  claim's epoch and holder (a step that lost its lease stores nothing); it writes the outbox;
- ``claim_call`` / ``call_started`` / ``call_done`` run one tool call of a ``tools`` step: its
  claim is counted (the attempt), ``call_started`` marks it right before the tool runs (what an
  ``at_most_once`` tool's later attempt checks), its result is stored once, and the call that
  counts the round's pending calls down to zero moves the job to ``collect``;
- a ``transition`` to a ``tools`` step may *park* the job (state ``awaiting_approval``): the calls
  that need a person's decision are ``held`` (never claimed, never sent again), the approval
  record (``approval`` key) is written with the move, and the deadline is pushed back by the
  longest wait; ``settle`` stores a batch of decisions (the approval record must be the one the
  decider read) and, once every call is decided, stores the rejected calls' results, counts them
  down and sends the approved ones (``tandem.tasks.approvals``);
- ``reschedule`` parks the step (state ``waiting``) until a transient failure may have passed;
- ``finish`` stores the final result (the first one wins), appends the ``final`` event, writes the
  job's Celery result (or marks it for delivery: ``tandem.tasks.results``) and expires the job's keys;
- ``reconcile`` (the reconciler's look at one job) says which messages to send again.

A message (a Celery task) only wakes a step up: a duplicated, stale, forged or wrong-round one
finds the record elsewhere and does nothing. Every key gets a TTL when it is written: a live job's
keys live until its deadline plus ``ttl_after``; an ended job's for ``TANDEM_MEMORY_TTL``. A script
sets the TTL only of the keys it may create (a write to an existing key keeps its TTL), so a step
costs no ``EXPIRE`` of keys it did not touch.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from tandem.tasks.store import JOB_PARTS, JobStore

LIVE_SHARDS = 16
"""The live-job index is this many sorted sets, so no single key is hot."""

_HOST = socket.gethostname()


def claim_token() -> str:
    """A fresh claim token: ``"<host>:<pid>:<random>"``. The record's ``holder`` (and a call's) thus
    names the worker process that holds the lease, for operators and the chaos figures."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


def token_pid(token: str) -> int | None:
    """The worker pid a claim token names (``None`` for an empty or foreign token)."""
    parts = token.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


LUA_PRELUDE = """
local FINAL = {completed=true, truncated=true, failed=true, cancelled=true}
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function fmt(x) return string.format('%.6f', x) end
local function expire_all(ttl)
  ttl = math.max(math.floor(ttl), 1)
  for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
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
"""
"""The Lua helpers every job script starts with (``now``, ``fmt``, TTLs); ``tandem.tasks.reopen``'s
scripts share them."""

# KEYS: the job's keys in JOB_PARTS order (state first). ARGV: spec, reasoner, round, kind,
# timeout, ttl_after, outbox, outbox id.
_CREATE = (
    LUA_PRELUDE
    + """
local existing = redis.call('HGET', KEYS[1], 'state')
if existing and existing ~= 'queued' then return 0 end
local t = now()
redis.call('DEL', KEYS[10])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'running', 'reasoner', ARGV[2], 'round', ARGV[3], 'kind', ARGV[4],
  'calls', 0, 'status', '', 'epoch', 0, 'holder', '', 'lease_until', 0, 'expiries', 0, 'retries', 0,
  'pending', 0, 'outbox', ARGV[7], 'outbox_id', ARGV[8], 'progress_at', fmt(t), 'created_at', fmt(t),
  'updated_at', fmt(t), 'deadline', fmt(t + tonumber(ARGV[5])), 'ttl_after', ARGV[6], 'wait_for', '',
  'wait_until', 0, 'last_error', '', 'error', '', 'tx', '')
local ttl = math.max(math.floor(tonumber(ARGV[5]) + tonumber(ARGV[6])), 1)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
"""
)

# ARGV: round, kind, token, lease seconds, max expiries.
_CLAIM = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'holder', 'lease_until', 'deadline',
  'wait_until', 'expiries', 'epoch')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended'} end
if s[2] ~= ARGV[1] or s[3] ~= ARGV[2] then return {'other'} end
local t = now()
if s[4] ~= '' and tonumber(s[5]) > t then return {'busy'} end
local expiries = tonumber(s[8])
if s[4] ~= '' then
  expiries = redis.call('HINCRBY', KEYS[1], 'expiries', 1)
  redis.call('HSET', KEYS[1], 'holder', '')
end
if t > tonumber(s[6]) then return {'deadline'} end
if expiries > tonumber(ARGV[5]) then return {'give-up', tostring(expiries)} end
local epoch = (tonumber(s[9]) or 0) + 1
redis.call('HSET', KEYS[1], 'epoch', epoch, 'holder', ARGV[3], 'lease_until', fmt(t + tonumber(ARGV[4])),
  'state', 'running', 'wait_for', '', 'wait_until', 0, 'progress_at', fmt(t), 'updated_at', fmt(t))
return {'ok', tostring(epoch)}
"""
)

# ARGV: token, lease seconds, call index ('' for the step's own lease).
_RENEW = (
    LUA_PRELUDE
    + """
local t = now()
if ARGV[3] == '' then
  if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
  redis.call('HSET', KEYS[1], 'lease_until', fmt(t + tonumber(ARGV[2])))
  return 1
end
if redis.call('HGET', KEYS[5], ARGV[3] .. ':holder') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[5], ARGV[3] .. ':until', fmt(t + tonumber(ARGV[2])))
return 1
"""
)

# ARGV: round, kind, epoch, token, tx, next round, next kind, next calls, next status, outbox,
# outbox id, memory writes (JSON [[field, value], ...]), then to park the job ('' for no): the
# approval record, the held calls (",2,3,"), the longest wait (s), when it ends (epoch s).
_TRANSITION = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'epoch', 'holder', 'tx', 'deadline',
  'ttl_after', 'calls')
if s[6] == ARGV[5] then return 1 end
if not s[1] or FINAL[s[1]] then return 0 end
if s[2] ~= ARGV[1] or s[3] ~= ARGV[2] or s[4] ~= ARGV[3] or s[5] ~= ARGV[4] then return 0 end
local writes = cjson.decode(ARGV[12])
for _, w in ipairs(writes) do redis.call('HSETNX', KEYS[3], w[1], w[2]) end
local t = now()
if #writes > 0 then expire_key(KEYS[3], t, s[7], s[8]) end
redis.call('HSET', KEYS[1], 'state', 'running', 'round', ARGV[6], 'kind', ARGV[7], 'calls', ARGV[8],
  'status', ARGV[9], 'pending', ARGV[8], 'holder', '', 'lease_until', 0, 'expiries', 0, 'retries', 0,
  'outbox', ARGV[10], 'outbox_id', ARGV[11], 'progress_at', fmt(t), 'updated_at', fmt(t), 'tx', ARGV[5],
  'wait_for', '', 'wait_until', 0, 'last_error', '', 'held', '')
if s[3] == 'collect' or tonumber(s[9] or 0) > 0 then redis.call('DEL', KEYS[5]) end
if ARGV[13] ~= '' then
  redis.call('SET', KEYS[9], ARGV[13])
  local deadline = tonumber(s[7]) + tonumber(ARGV[15])
  redis.call('HSET', KEYS[1], 'state', 'awaiting_approval', 'held', ARGV[14], 'parked_at', fmt(t),
    'park_bound', ARGV[15], 'approval_until', ARGV[16], 'deadline', fmt(deadline))
  -- Parking moves the deadline back: every key of the job must live as long (rare, so all of them).
  expire_all(live_ttl(t))
end
return 1
"""
)

# ARGV: outbox id.
_SENT = """
if redis.call('HGET', KEYS[1], 'outbox_id') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'outbox', '[]')
  return 1
end
return 0
"""

# ARGV: round, kind, epoch, token, delay, reason, error, outbox, outbox id.
_RESCHEDULE = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'epoch', 'holder', 'deadline')
if not s[1] or FINAL[s[1]] then return {'gone'} end
if s[2] ~= ARGV[1] or s[3] ~= ARGV[2] or s[4] ~= ARGV[3] or s[5] ~= ARGV[4] then return {'lost'} end
local t = now()
local until_ = t + tonumber(ARGV[5])
if until_ >= tonumber(s[6]) then return {'deadline'} end
redis.call('HINCRBY', KEYS[1], 'retries', 1)
redis.call('HSET', KEYS[1], 'state', 'waiting', 'wait_for', ARGV[6], 'wait_until', fmt(until_),
  'last_error', ARGV[7], 'holder', '', 'lease_until', 0, 'outbox', ARGV[8], 'outbox_id', ARGV[9],
  'progress_at', fmt(t), 'updated_at', fmt(t))
return {'ok', fmt(until_)}
"""
)

# ARGV: round, index, token, lease seconds, max expiries.
_CLAIM_CALL = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'deadline', 'calls', 'ttl_after')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended'} end
if s[2] ~= ARGV[1] or s[3] ~= 'tools' then return {'other'} end
local n = tonumber(ARGV[2])
if not n or n < 1 or n > tonumber(s[5]) then return {'other'} end
if redis.call('HEXISTS', KEYS[4], ARGV[1] .. ':' .. ARGV[2]) == 1 then return {'done'} end
if string.find(redis.call('HGET', KEYS[1], 'held') or '', ',' .. ARGV[2] .. ',', 1, true) then
  return {'held'}
end
local i = ARGV[2]
local h = redis.call('HMGET', KEYS[5], i .. ':holder', i .. ':until')
local t = now()
if h[1] and h[1] ~= '' and tonumber(h[2]) > t then return {'busy'} end
if h[1] and h[1] ~= '' then
  local e = redis.call('HINCRBY', KEYS[5], i .. ':expiries', 1)
  redis.call('HSET', KEYS[5], i .. ':holder', '')
  if e > tonumber(ARGV[5]) then return {'give-up', tostring(e)} end
end
if t > tonumber(s[4]) then return {'deadline'} end
local attempt = redis.call('HINCRBY', KEYS[5], i .. ':attempts', 1)
redis.call('HSET', KEYS[5], i .. ':holder', ARGV[3], i .. ':until', fmt(t + tonumber(ARGV[4])))
redis.call('HSET', KEYS[1], 'progress_at', fmt(t), 'updated_at', fmt(t))
if attempt == 1 then expire_key(KEYS[5], t, s[4], s[6]) end
return {'ok', tostring(attempt), redis.call('HGET', KEYS[5], i .. ':started') or ''}
"""
)

# ARGV: index, token. Marks the call started (its tool is about to run) while the token holds it.
_CALL_STARTED = """
if redis.call('HGET', KEYS[5], ARGV[1] .. ':holder') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[5], ARGV[1] .. ':started', '1')
return 1
"""

# ARGV: round, index, token, result, collect outbox, outbox id.
_CALL_DONE = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'kind', 'deadline', 'ttl_after')
if not s[1] or FINAL[s[1]] then return 0 end
if s[2] ~= ARGV[1] or s[3] ~= 'tools' then return 0 end
if redis.call('HGET', KEYS[5], ARGV[2] .. ':holder') ~= ARGV[3] then return 0 end
if redis.call('HSETNX', KEYS[4], ARGV[1] .. ':' .. ARGV[2], ARGV[4]) == 0 then return 0 end
redis.call('HSET', KEYS[5], ARGV[2] .. ':holder', '')
local t = now()
expire_key(KEYS[4], t, s[4], s[5])
local left = redis.call('HINCRBY', KEYS[1], 'pending', -1)
redis.call('HSET', KEYS[1], 'progress_at', fmt(t), 'updated_at', fmt(t))
if left <= 0 then
  redis.call('HSET', KEYS[1], 'kind', 'collect', 'holder', '', 'lease_until', 0, 'expiries', 0,
    'outbox', ARGV[5], 'outbox_id', ARGV[6])
  return 2
end
return 1
"""
)

# ARGV: round, the approval record as read, the record to store, '1' when every call is decided,
# the rejected calls' results (JSON [[index, result], ...]), the approved calls' messages, the
# collect step's messages, outbox id.
_SETTLE = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'round', 'parked_at', 'park_bound', 'deadline')
if not s[1] then return {'gone'} end
if FINAL[s[1]] then return {'ended', s[1]} end
if s[1] ~= 'awaiting_approval' or s[2] ~= ARGV[1] then return {'not-waiting', s[1], s[2]} end
if redis.call('GET', KEYS[9]) ~= ARGV[2] then return {'changed'} end
redis.call('SET', KEYS[9], ARGV[3], 'KEEPTTL')
if ARGV[4] ~= '1' then return {'stored'} end
for _, r in ipairs(cjson.decode(ARGV[5])) do
  if redis.call('HSETNX', KEYS[4], ARGV[1] .. ':' .. r[1], r[2]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'pending', -1)
  end
end
local t = now()
local unused = math.max(tonumber(s[4]) - (t - tonumber(s[3])), 0)
redis.call('HSET', KEYS[1], 'state', 'running', 'held', '', 'approval_until', 0,
  'deadline', fmt(tonumber(s[5]) - unused), 'outbox', ARGV[6], 'outbox_id', ARGV[8],
  'progress_at', fmt(t), 'updated_at', fmt(t))
local verdict = 'running'
if tonumber(redis.call('HGET', KEYS[1], 'pending')) <= 0 then
  redis.call('HSET', KEYS[1], 'kind', 'collect', 'holder', '', 'lease_until', 0, 'expiries', 0,
    'outbox', ARGV[7])
  verdict = 'collect'
end
expire_all(live_ttl(t))
return {verdict}
"""
)

# ARGV: result, status, error, ttl, force ('1': no step check), round, kind, epoch, token, the
# ``final`` event's data and time, the stream's MAXLEN, how the Celery result goes out ('script':
# written here to KEYS[11]; 'mark': the record keeps ARGV[14] as a ``deliver`` mark; '': not at all),
# then for 'script' its value and expiry (s), for 'mark' the mark.
_FINISH = (
    LUA_PRELUDE
    + """
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
expire_all(tonumber(ARGV[4]))
if first and ARGV[13] == 'script' then
  redis.call('SET', KEYS[11], ARGV[14], 'EX', math.max(tonumber(ARGV[15]), 1))
  redis.call('PUBLISH', KEYS[11], ARGV[14])
end
if first then return 1 end
return 0
"""
)

# ARGV: the mark the Celery result was delivered for.
_DELIVERED = """
if redis.call('HGET', KEYS[1], 'deliver') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'deliver', '')
  return 1
end
return 0
"""

# ARGV: stall seconds, max expiries, outbox grace seconds. A 'wait' verdict carries the time the job
# next needs a look: when a lease runs out, a stall or an outbox grace ends, a back-off is over, or
# the deadline comes, whichever is first. A job still ``queued`` (no worker created its record) for
# longer than the stall gets 'intake': its intake message is sent again from the stored spec.
_RECONCILE = (
    LUA_PRELUDE
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'kind', 'holder', 'lease_until', 'progress_at', 'deadline',
  'wait_until', 'outbox', 'round', 'calls', 'held', 'approval_until', 'updated_at', 'deliver')
if s[1] and FINAL[s[1]] and s[14] and s[14] ~= '' then return {'deliver', s[14]} end
if not s[1] or FINAL[s[1]] then return {'gone'} end
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
"""
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a step (``index`` 0) or on one tool call: the token its writes must
    carry, the epoch of the claim (steps) and the attempt (tool calls, from 1)."""

    job_id: str
    round: int
    kind: str
    token: str
    epoch: int = 0
    index: int = 0
    attempt: int = 1
    started: bool = False
    """For a tool call: an earlier attempt was marked started (its tool may have run)."""


@dataclass(frozen=True)
class ClaimRefused:
    """Why a step or call was not claimed: ``gone``, ``ended``, ``other`` (the job is elsewhere),
    ``busy`` (a live lease), ``done``, ``held`` (awaiting approval), ``early`` (still backing
    off), ``deadline``, ``give-up``."""

    reason: str


@dataclass(frozen=True)
class Reconciled:
    """The reconciler's verdict on one job: ``wait``, ``gone``, ``resend`` (the step ``kind`` of
    ``round``, and for a tool step the call ``indices``), ``parked`` (awaiting approval
    ``until`` then, Unix time), ``intake`` (send the intake message of a job still queued
    again), ``deliver`` (an ended job whose Celery result is not stored yet), ``deadline``,
    ``cancel`` or ``give-up``. A ``wait`` says when (Redis time) the job
    next needs a look: ``next_look``."""

    action: str
    kind: str = ""
    round: int = 0
    indices: tuple[int, ...] = ()
    until: float = 0.0
    next_look: float = field(default=0.0, compare=False)
    mark: str = ""
    """For ``deliver``: the mark of the Celery result still to store."""


@dataclass(frozen=True)
class Park:
    """How a transition parks its job for approval: the approval record (JSON), the calls held
    until it is decided, the longest wait (seconds; the deadline moves back by it) and its end
    (Unix time)."""

    record_json: str
    held: tuple[int, ...]
    bound: float
    until: float


Message = dict[str, Any]
"""An outbox entry: ``{"task": name, "args": [...], "countdown": seconds}``."""


@dataclass(frozen=True)
class FinalEntry:
    """The ``final`` event as the finish script appends it to the job's stream (redacted data)."""

    data: str
    at: str


@dataclass(frozen=True)
class CeleryWrite:
    """How the finish script handles the job's Celery result: writes ``value`` under ``key`` for
    ``expires`` seconds and publishes it (the backend is the store's Redis), or, with ``mark``
    only, leaves the mark for a later delivery."""

    key: str = ""
    value: str = ""
    expires: int = 0
    mark: str = ""


class JobMachine:
    """The atomic transitions of the jobs in one store (see the module docstring)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.redis: Redis = store.redis
        self._scripts = {
            name: self.redis.register_script(src)
            for name, src in {
                "create": _CREATE,
                "claim": _CLAIM,
                "renew": _RENEW,
                "transition": _TRANSITION,
                "sent": _SENT,
                "reschedule": _RESCHEDULE,
                "claim_call": _CLAIM_CALL,
                "call_started": _CALL_STARTED,
                "call_done": _CALL_DONE,
                "settle": _SETTLE,
                "finish": _FINISH,
                "delivered": _DELIVERED,
                "reconcile": _RECONCILE,
            }.items()
        }

    def _run(self, name: str, job_id: str, *args: Any) -> Any:
        return self._scripts[name](keys=self.store.keys(job_id), args=list(args))

    # -- the live-job index ----------------------------------------------------------------

    def shard_key(self, shard: int) -> str:
        """The key of one shard of the live-job index."""
        return f"{self.store.prefix}:live:{shard}"

    def shard_of(self, job_id: str) -> int:
        """The shard a job is indexed in."""
        return zlib.crc32(job_id.encode()) % LIVE_SHARDS

    def index(self, job_id: str, at: float, ttl: int) -> None:
        """Put the job in the live index (checked from ``at`` on)."""
        key = self.shard_key(self.shard_of(job_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(key, {job_id: at})
        pipe.expire(key, ttl)
        pipe.execute()

    def unindex(self, job_id: str) -> None:
        """Take the job out of the live index."""
        self.redis.zrem(self.shard_key(self.shard_of(job_id)), job_id)

    # -- transitions -----------------------------------------------------------------------

    def create(
        self,
        job_id: str,
        spec_json: str,
        reasoner: str,
        first: tuple[int, str],
        outbox: list[Message],
        *,
        timeout: float,
        ttl_after: int,
        outbox_id: str | None = None,
    ) -> bool:
        """Create the job's record at its first step with that step's messages in the outbox
        (under ``outbox_id``, a fresh one by default); ``False`` if the job exists already."""
        return bool(
            self._run(
                "create",
                job_id,
                spec_json,
                reasoner,
                first[0],
                first[1],
                f"{timeout:.3f}",
                ttl_after,
                json.dumps(outbox),
                outbox_id or uuid.uuid4().hex,
            )
        )

    def claim(
        self, job_id: str, round_no: int, kind: str, lease: float, max_expiries: int
    ) -> Claim | ClaimRefused:
        """Take step ``(round_no, kind)`` for this worker, or say why not."""
        token = claim_token()
        reply = self._run("claim", job_id, round_no, kind, token, f"{lease:.3f}", max_expiries)
        if _text(reply[0]) != "ok":
            return ClaimRefused(_text(reply[0]))
        return Claim(job_id, round_no, kind, token, epoch=int(_text(reply[1])))

    def claim_call(
        self, job_id: str, round_no: int, index: int, lease: float, max_expiries: int
    ) -> Claim | ClaimRefused:
        """Take tool call ``index`` of ``round_no``; the attempt is recorded before it runs."""
        token = claim_token()
        reply = self._run("claim_call", job_id, round_no, index, token, f"{lease:.3f}", max_expiries)
        if _text(reply[0]) != "ok":
            return ClaimRefused(_text(reply[0]))
        started = len(reply) > 2 and _text(reply[2]) != ""
        return Claim(
            job_id, round_no, "tools", token, index=index, attempt=int(_text(reply[1])), started=started
        )

    def call_started(self, claim: Claim) -> bool:
        """Mark the claimed call started, right before its tool runs; ``False`` (nothing marked) if
        the claim was lost. A later attempt of an ``at_most_once`` call runs its tool again only if
        no earlier attempt got this far."""
        return bool(self._run("call_started", claim.job_id, claim.index, claim.token))

    def renew(self, claim: Claim, lease: float) -> bool:
        """Extend the claim's lease; ``False`` once the claim was lost."""
        index = str(claim.index) if claim.index else ""
        return bool(self._run("renew", claim.job_id, claim.token, f"{lease:.3f}", index))

    def transition(
        self,
        claim: Claim,
        nxt: tuple[int, str, int, str],
        outbox: list[Message],
        memory_writes: list[tuple[str, str]],
        *,
        tx: str,
        park: Park | None = None,
    ) -> bool:
        """Store ``memory_writes`` and move from the claimed step to ``nxt`` (round, kind, calls,
        status) with ``outbox``; ``False`` (nothing stored) if the claim was lost. Running it again
        with the same ``tx`` returns ``True`` without changing anything. With ``park`` the job
        moves to ``awaiting_approval`` (see ``Park``)."""
        parking = (
            ["", "", 0, 0]
            if park is None
            else [
                park.record_json,
                "," + ",".join(map(str, park.held)) + ",",
                f"{park.bound:.3f}",
                f"{park.until:.6f}",
            ]
        )
        return bool(
            self._run(
                "transition",
                claim.job_id,
                claim.round,
                claim.kind,
                claim.epoch,
                claim.token,
                tx,
                nxt[0],
                nxt[1],
                nxt[2],
                nxt[3],
                json.dumps(outbox),
                tx,
                json.dumps(memory_writes),
                *parking,
            )
        )

    def outbox(self, job_id: str) -> tuple[str, list[Message]]:
        """The outbox id and the messages not yet known to be sent."""
        raw_id, raw = self.redis.hmget(self.store.key(job_id, "state"), ["outbox_id", "outbox"])
        return ("" if raw_id is None else _text(raw_id)), ([] if raw is None else json.loads(raw))

    def mark_sent(self, job_id: str, outbox_id: str) -> None:
        """Clear the outbox if it is still the one that was sent."""
        self._run("sent", job_id, outbox_id)

    def reschedule(
        self, claim: Claim, delay: float, reason: str, error: str, outbox: list[Message]
    ) -> str | float:
        """Park the claimed step until ``delay`` seconds from now (state ``waiting``); returns when
        (Redis time), or ``"deadline"`` (the job's deadline comes first), ``"lost"`` or ``"gone"``."""
        reply = self._run(
            "reschedule",
            claim.job_id,
            claim.round,
            claim.kind,
            claim.epoch,
            claim.token,
            f"{delay:.3f}",
            reason,
            error,
            json.dumps(outbox),
            uuid.uuid4().hex,
        )
        return float(_text(reply[1])) if _text(reply[0]) == "ok" else _text(reply[0])

    def call_done(
        self, claim: Claim, result_json: str, collect: list[Message], *, outbox_id: str | None = None
    ) -> int:
        """Store the call's result and count the round's pending calls down: 0 if the claim was
        lost (nothing stored), 1 if calls are still pending, 2 if the job moved to ``collect``
        (with ``collect`` in the outbox, under ``outbox_id`` if given)."""
        return int(
            self._run(
                "call_done",
                claim.job_id,
                claim.round,
                claim.index,
                claim.token,
                result_json,
                json.dumps(collect),
                outbox_id or uuid.uuid4().hex,
            )
        )

    def settle(
        self,
        job_id: str,
        round_no: int,
        read: str,
        record_json: str,
        *,
        complete: bool,
        rejected: list[tuple[int, str]],
        approved: list[Message],
        collect: list[Message],
    ) -> tuple[str, ...]:
        """Store the decisions of a parked job (``record_json``) if its approval record is still
        ``read`` and it awaits approval in ``round_no``; once ``complete``, store the ``rejected``
        calls' results, count them down, and move on: ``approved`` calls' messages in the outbox
        (or ``collect``'s when no call is pending). The deadline moves back by the time waited.

        Returns ``("stored",)``, ``("running",)``, ``("collect",)``, ``("changed",)`` (another
        decision came first: read again), ``("not-waiting", state, round)``, ``("ended", state)``
        or ``("gone",)``."""
        reply = self._run(
            "settle",
            job_id,
            round_no,
            read,
            record_json,
            "1" if complete else "0",
            json.dumps([[str(i), r] for i, r in rejected]),
            json.dumps(approved),
            json.dumps(collect),
            uuid.uuid4().hex,
        )
        return tuple(_text(x) for x in reply)

    def finish(
        self,
        job_id: str,
        result_json: str,
        status: str,
        error: str,
        ttl: int,
        claim: Claim | None = None,
        *,
        final: FinalEntry | None = None,
        celery: CeleryWrite | None = None,
    ) -> bool:
        """Store the final result and end the job: for ``claim``'s step only, or whatever the job
        does (``claim=None``: cancel, deadline, give-up). ``True`` for the first result stored.

        With the first result the same script appends the ``final`` event (``final``: its stream
        entry) and, with ``celery``, writes the job's Celery result (``CeleryWrite.key``) or leaves
        the ``deliver`` mark (``CeleryWrite.mark``) for ``deliver``/the reconciler."""
        if claim is None:
            args: list[Any] = ["1", "", "", "", ""]
        else:
            args = ["0", claim.round, claim.kind, claim.epoch, claim.token]
        entry = final or FinalEntry(json.dumps({"job_id": job_id, "status": status}), f"{time.time():.3f}")
        keys = self.store.keys(job_id)
        if celery is None:
            tail: list[Any] = ["", "", 0]
        elif celery.key:
            keys.append(celery.key)
            tail = ["script", celery.value, celery.expires]
        else:
            tail = ["mark", celery.mark, 0]
        head = [result_json, status, error, ttl, *args]
        reply = self._scripts["finish"](
            keys=keys,
            args=[*head, entry.data, entry.at, self.store.stream.maxlen, *tail],
        )
        return bool(reply)

    def delivered(self, job_id: str, mark: str) -> bool:
        """Clear the job's ``deliver`` mark once its Celery result is stored (``False``: the mark
        is another, or gone)."""
        return bool(self._run("delivered", job_id, mark))

    def reconcile(self, job_id: str, stall: float, max_expiries: int, outbox_grace: float) -> Reconciled:
        """Look at one job for the reconciler (see ``tandem.tasks.reconciler``)."""
        reply = [
            _text(x)
            for x in self._run("reconcile", job_id, f"{stall:.3f}", max_expiries, f"{outbox_grace:.3f}")
        ]
        if reply[0] == "parked":
            return Reconciled("parked", until=float(reply[1] or 0))
        if reply[0] == "deliver":
            return Reconciled("deliver", mark=reply[1])
        if reply[0] == "wait":
            return Reconciled("wait", next_look=float(reply[1]))
        if reply[0] != "resend":
            return Reconciled(reply[0])
        return Reconciled("resend", reply[1], int(reply[2]), tuple(int(x) for x in reply[3:]))

    def intake(self, job_id: str) -> str | None:
        """The spec ``submit`` sent for a job no worker has started yet (JSON), or ``None``."""
        raw = self.redis.get(self.store.key(job_id, "intake"))
        return None if raw is None else _text(raw)

    def record(self, job_id: str) -> dict[str, str]:
        """The raw record (empty for an unknown job)."""
        raw = self.redis.hgetall(self.store.key(job_id, "state"))
        return {_text(k): _text(v) for k, v in raw.items()}


__all__ = [
    "JOB_PARTS",
    "LIVE_SHARDS",
    "LUA_PRELUDE",
    "CeleryWrite",
    "Claim",
    "ClaimRefused",
    "FinalEntry",
    "JobMachine",
    "Message",
    "Park",
    "Reconciled",
    "claim_token",
    "token_pid",
]
