"""The request and token budgets of a model host (``TANDEM_<ROLE>_RPM``, ``_TPM``): paced buckets.

What a host sees, with a limit of ``L`` per minute and a burst of ``S`` seconds
(``TANDEM_RATE_BURST_SECONDS``):

* **any 60 s window** holds at most ``L`` (requests, or tokens as debited: estimates corrected
  by the reported usage; a single call larger than the burst may pass it once by its excess);
* **any 1 s window** holds at most the burst plus a second's worth (``RPM=60``, the default
  burst: one request), and, while calls come back late for their turns, ``GRACE`` seconds' worth
  more (``RPM=60``: two);
* sustained, calls go at the refill rate, a little under ``L`` (``RPM=60``: 59.5 a minute).

Each budget is a token bucket on Redis's clock. Its *burst* is ``S`` seconds' worth of the limit
(a request budget: whole requests, at least one): what it holds at most when idle. It refills
continuously at ``(L - burst) / (60 + GRACE)`` a second (a request budget gets one request back:
the request in a one-request bucket is the first of its window, not an extra). A call needs what
it costs in the bucket (one request; its estimated tokens, at most the burst) and is debited what
it costs. Over a window of ``T`` seconds a host thus gets less than
``burst + rate * (T + GRACE)``: for ``T = 60`` that is ``L`` (requests: less than ``L + 1``).

**Turns.** A refused call is told when to come back: when the bucket will hold what it needs, but
never before the turn handed to the call refused before it (each turn one call's cost of refill
after the last), so calls sent back together come back one by one, each finding its share.
While turns are outstanding the bucket may hold ``GRACE`` seconds of refill beyond its burst:
a call that comes back up to ``GRACE`` seconds late (broker, countdowns, a busy worker) still
finds the refill it waited for. A bucket that held only its burst would drop that refill while
full, and every call behind the late one would then come a little early and miss its turn.
"""

from __future__ import annotations

import math
from typing import NamedTuple

GRACE = 0.5
"""Seconds of refill a bucket holds beyond its burst while turns are outstanding: how late a call
may come back for its turn without losing it."""


class Bucket(NamedTuple):
    """A budget's bucket: its ``burst`` (the most it holds when idle), its ``rate`` (refill a
    second) and its ``cap`` (``burst`` plus ``GRACE`` seconds of refill: the most it holds while
    turns are outstanding)."""

    burst: float
    rate: float
    cap: float


def bucket(per_minute: int, burst_seconds: float, *, whole: bool) -> Bucket:
    """The bucket of a budget of ``per_minute`` with ``burst_seconds`` of burst (``BUDGET_LUA``
    computes the same); ``whole``: a request budget, spent one whole request a call."""
    if whole:
        burst = float(max(1, math.floor(per_minute * burst_seconds / 60)))
        rate = (per_minute - burst + 1) / (60 + GRACE)
    else:
        burst = per_minute * burst_seconds / 60
        rate = (per_minute - burst) / (60 + GRACE)
    return Bucket(burst, rate, burst + GRACE * rate)


# Refill both buckets of KEYS[2] to ``now``. Needs ``now``, ``ttl``, ``burst`` (seconds) and the
# limits in ARGV[3] (rpm) and ARGV[4] (tpm), 0 when off. Leaves ``req``/``tok`` (nil: that budget
# is off), ``req_burst``, ``req_rate``, ``tok_burst``, ``tok_rate``, the stored fields ``b`` and
# ``store_buckets()``.
REFILL_LUA = f"""
local grace = {GRACE!r}
local rpm, tpm = tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[2], 'req', 'tok', 'at', 'rturn', 'tturn')
local elapsed = math.max(0, now - tonumber(b[3] or now))
local req, tok, req_burst, req_rate, tok_burst, tok_rate = nil, nil, 0, 0, 0, 0
local function cap(size, rate, next_turn)
  if tonumber(next_turn or 0) > now then return size + grace * rate end
  return size
end
if rpm > 0 then
  req_burst = math.max(1, math.floor(rpm * burst / 60))
  req_rate = (rpm - req_burst + 1) / (60 + grace)
  req = math.min(cap(req_burst, req_rate, b[4]), tonumber(b[1] or req_burst) + elapsed * req_rate)
end
if tpm > 0 then
  tok_burst = tpm * burst / 60
  tok_rate = (tpm - tok_burst) / (60 + grace)
  tok = math.min(cap(tok_burst, tok_rate, b[5]), tonumber(b[2] or tok_burst) + elapsed * tok_rate)
end
local function store_buckets()
  if req == nil and tok == nil then return end
  redis.call('HSET', KEYS[2], 'at', string.format('%.6f', now))
  if req ~= nil then redis.call('HSET', KEYS[2], 'req', string.format('%.17g', req)) end
  if tok ~= nil then redis.call('HSET', KEYS[2], 'tok', string.format('%.17g', tok)) end
  redis.call('EXPIRE', KEYS[2], ttl)
end
"""

# After REFILL_LUA: refuse a call of ``est`` tokens that the budgets cannot pay now, with its turn
# (``deny(reason, until)`` is the caller's). The turn is one microsecond (the clock's grain) late,
# so the bucket holds enough then despite rounding.
CHECK_LUA = """
local function turn(reason, slot, field, ready, spacing)
  local at = math.max(ready, tonumber(b[slot] or 0))
  redis.call('HSET', KEYS[2], field, string.format('%.6f', at + spacing))
  redis.call('EXPIRE', KEYS[2], ttl)
  return deny(reason, at + 0.000001)
end
if req ~= nil and req < 1 then return turn('rpm', 4, 'rturn', now + (1 - req) / req_rate, 1 / req_rate) end
if tok ~= nil then
  local need = math.min(est, tok_burst)
  if tok < need then return turn('tpm', 5, 'tturn', now + (need - tok) / tok_rate, est / tok_rate) end
end
"""
