"""``HostCapacity``: fleet-wide limits of one model host, held in Redis and shared by every worker.

A model host (an ``API_BASE``, or a provider's model when there is none) has up to three limits,
set per role by ``TANDEM_<ROLE>_MAX_IN_FLIGHT``, ``_RPM`` and ``_TPM``:

* **in-flight slots**: a sorted set of the calls under way, scored by when their lease runs out.
  A worker renews the leases of its calls (``SlotKeeper``); a dead worker's slots run out and
  free themselves.
* **request and token budgets per minute**: two paced token buckets
  (``tandem.tasks.hosts.rate_buckets``: what a host sees over any 1 s and any 60 s): a *burst* of
  ``burst_seconds`` worth of the limit (``TANDEM_RATE_BURST_SECONDS``) at most, then a
  continuous refill; a refused call is told its own *turn*. A call is debited its *estimated*
  tokens when it starts and corrected by its real usage when it ends; a call larger than the
  burst goes when the bucket holds the burst, and a reply larger than estimated, like such a
  call, drives the bucket below zero: later calls wait for the debt.
* **a shared back-off window**: any worker that gets a 429 or 503 sets ``until`` (from the
  host's ``Retry-After``); no call starts before it passes. Then exactly one call, the probe,
  may go; the others wait for its outcome. A successful probe closes the window; a failed one
  opens the next.

Every decision is one Lua script on Redis's clock, so workers on hosts with skewed clocks agree.
``acquire`` answers a ``Grant`` or a ``Wait`` (what for, until when); ``release`` returns the
slot with the call's usage. A step that waits for a slot registers as a *waiter*: a release
that frees a slot hands back the oldest waiter's dispatch, for its caller to send at once.

Keys (all of one host share the hash tag ``{host}``, so each script touches one cluster slot;
every key has a TTL)::

    {prefix}:cap:{host}:slots     ZSET  call token -> lease expiry
    {prefix}:cap:{host}:budget    HASH  req, tok, at (levels at time ``at``), rturn, tturn (next turns)
    {prefix}:cap:{host}:backoff   HASH  until, probe, probe_until
    {prefix}:cap:{host}:waiters   ZSET  waiter id -> order
    {prefix}:cap:{host}:waiting   HASH  waiter id -> dispatch JSON
    {prefix}:cap:{host}:fallback  ZSET  waiter id -> when its re-queued copy comes back
    {prefix}:cap:{host}:stats     HASH  requests, tokens, rate_limited, backoff_seconds, probes
    {prefix}:cap:hosts            HASH  host -> limits JSON (for ``tandem hosts``)
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from redis import Redis

from tandem.broker_config import Settings
from tandem.tasks.hosts.rate_buckets import CHECK_LUA, REFILL_LUA, bucket

log = logging.getLogger("tandem.capacity")

WaitReason = Literal["in_flight", "rpm", "tpm", "backoff", "probe"]

KEY_TTL = 86400
"""Seconds every capacity key lives after its last write."""
PROBE_POLL = 1.0
"""Seconds between looks at a probe's outcome while another worker's probe is under way."""

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS: slots, budget, backoff, stats
# ARGV: token, max_in_flight (0: none), rpm, tpm, estimated tokens, lease seconds, ttl, probe poll,
#       burst seconds
_ACQUIRE = (
    _NOW
    + """
local ttl = tonumber(ARGV[7])
local burst = tonumber(ARGV[9])
local function deny(reason, at)
  return {0, reason, string.format('%.6f', at), string.format('%.6f', now)}
end
local probe = 0
local until_ = tonumber(redis.call('HGET', KEYS[3], 'until') or '0')
if until_ > 0 then
  if now < until_ then return deny('backoff', until_) end
  local probing = tonumber(redis.call('HGET', KEYS[3], 'probe_until') or '0')
  if probing > now then
    return deny('probe', math.min(probing, now + tonumber(ARGV[8])))
  end
  probe = 1
end
local max = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if max > 0 and redis.call('ZCARD', KEYS[1]) >= max then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return deny('in_flight', tonumber(first[2]))
end
"""
    + REFILL_LUA
    + """
local est = tonumber(ARGV[5])
"""
    + CHECK_LUA
    + """
if req ~= nil then req = req - 1 end
if tok ~= nil then tok = tok - est end
store_buckets()
redis.call('ZADD', KEYS[1], string.format('%.6f', now + tonumber(ARGV[6])), ARGV[1])
redis.call('EXPIRE', KEYS[1], ttl)
if probe == 1 then
  redis.call('HSET', KEYS[3], 'probe', ARGV[1], 'probe_until', string.format('%.6f', now + tonumber(ARGV[6])))
  redis.call('EXPIRE', KEYS[3], ttl)
  redis.call('HINCRBY', KEYS[4], 'probes', 1)
end
redis.call('HINCRBY', KEYS[4], 'requests', 1)
redis.call('EXPIRE', KEYS[4], ttl)
return {1, probe, string.format('%.6f', now)}
"""
)

# KEYS: slots, budget, backoff, stats, waiters, waiting
# ARGV: token, max_in_flight, rpm, tpm, tokens used minus estimated, lease seconds (unused), ttl,
#       back-off seconds (0: the call was not rate limited), success (1/0), used tokens, burst seconds.
# Returns the dispatches of the waiters woken by the freed slot(s).
_RELEASE = (
    _NOW
    + """
local ttl = tonumber(ARGV[7])
local burst = tonumber(ARGV[11])
redis.call('ZREM', KEYS[1], ARGV[1])
"""
    + REFILL_LUA
    + """
local correction = tonumber(ARGV[5])
if tok ~= nil and correction ~= 0 then tok = tok - correction; store_buckets() end
if tonumber(ARGV[10]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'tokens', tonumber(ARGV[10]))
  redis.call('EXPIRE', KEYS[4], ttl)
end
local wait = tonumber(ARGV[8])
local until_ = tonumber(redis.call('HGET', KEYS[3], 'until') or '0')
if wait > 0 then
  local new_until = math.max(until_, now + wait)
  redis.call('HSET', KEYS[3], 'until', string.format('%.6f', new_until))
  redis.call('HDEL', KEYS[3], 'probe', 'probe_until')
  redis.call('EXPIRE', KEYS[3], math.ceil(new_until - now) + ttl)
  redis.call('HINCRBY', KEYS[4], 'rate_limited', 1)
  local added = new_until - math.max(until_, now)
  redis.call('HINCRBYFLOAT', KEYS[4], 'backoff_seconds', string.format('%.6f', added))
  redis.call('EXPIRE', KEYS[4], ttl)
  return {}
end
if until_ > 0 then
  if ARGV[9] == '1' and now >= until_ then
    redis.call('DEL', KEYS[3])
  elseif redis.call('HGET', KEYS[3], 'probe') == ARGV[1] then
    redis.call('HDEL', KEYS[3], 'probe', 'probe_until')  -- a failed probe lets the next one go
  end
  if now < until_ then return {} end
end
local max = tonumber(ARGV[2])
local free = 1
if max > 0 then free = max - redis.call('ZCARD', KEYS[1]) end
if free < 1 then return {} end
local woken = {}
local popped = redis.call('ZPOPMIN', KEYS[5], free)
for i = 1, #popped, 2 do
  local dispatch = redis.call('HGET', KEYS[6], popped[i])
  redis.call('HDEL', KEYS[6], popped[i])
  if dispatch then table.insert(woken, dispatch) end
end
return woken
"""
)

# KEYS: slots, waiters, waiting, fallback
# ARGV: waiter id, dispatch JSON, order score, max_in_flight, fallback seconds, ttl
# Returns {slot free now (1/0), schedule a fallback copy (1/0)}.
_WAIT = (
    _NOW
    + """
local ttl = tonumber(ARGV[6])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)  -- copies already back: forget them
local schedule = 0
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
  redis.call('ZADD', KEYS[4], string.format('%.6f', now + tonumber(ARGV[5])), ARGV[1])
  redis.call('EXPIRE', KEYS[4], ttl)
  schedule = 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local max = tonumber(ARGV[4])
if max <= 0 or redis.call('ZCARD', KEYS[1]) < max then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  return {1, schedule}
end
return {0, schedule}
"""
)

# KEYS: slots; ARGV: new expiry offset (seconds), token...
_RENEW = (
    _NOW
    + """
local expiry = string.format('%.6f', now + tonumber(ARGV[1]))
local renewed = 0
for i = 2, #ARGV do renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', expiry, ARGV[i]) end
return renewed
"""
)


@dataclass(frozen=True)
class HostLimits:
    """The fleet-wide limits of one model host (``None``: that limit is off); ``burst_seconds``
    is how many seconds' worth of ``rpm``/``tpm`` may go at once (see ``bucket``)."""

    host: str
    max_in_flight: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    burst_seconds: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.burst_seconds <= 30:
            raise ValueError(f"burst_seconds must be between 0 and 30, not {self.burst_seconds!r}")

    def to_json(self) -> str:
        """The limits as stored in the hosts registry."""
        return json.dumps(
            {
                "max_in_flight": self.max_in_flight,
                "rpm": self.rpm,
                "tpm": self.tpm,
                "burst_seconds": self.burst_seconds,
            },
            sort_keys=True,
        )


@dataclass(frozen=True)
class Grant:
    """Permission to call the host once: give it back with ``HostCapacity.release``."""

    token: str
    estimated_tokens: int
    probe: bool = False
    """True when this call is the one probe allowed after a back-off window."""


@dataclass(frozen=True)
class Wait:
    """No capacity now: try again at ``until`` (Redis's clock, seconds since the epoch)."""

    host: str
    reason: WaitReason
    until: float
    now: float

    @property
    def seconds(self) -> float:
        """How long to wait from now (never negative)."""
        return max(0.0, self.until - self.now)

    def describe(self) -> str:
        """What the step waits for, in words for a status line."""
        what = {
            "in_flight": "a free in-flight slot",
            "rpm": "the request budget per minute",
            "tpm": "the token budget per minute",
            "backoff": "the end of the host's back-off window (it answered 429/503)",
            "probe": "the outcome of the probe call after a back-off window",
        }[self.reason]
        return f"model host {self.host!r}: waiting for {what}"


@dataclass
class HostSnapshot:
    """What ``tandem hosts`` shows of one host."""

    host: str
    limits: dict[str, int | None]
    in_flight: int
    waiting: int
    requests_available: float | None
    """Requests in the bucket now (at most ``requests_burst``)."""
    tokens_available: float | None
    """Tokens in the bucket now (at most ``tokens_burst``; below 0: a debt later calls wait for)."""
    backoff_until: float | None
    probe: bool
    stats: dict[str, float] = field(default_factory=dict)
    now: float = 0.0
    requests_burst: float | None = None
    """The request bucket's size (``bucket``); ``None``: no request budget."""
    tokens_burst: float | None = None
    """The token bucket's size; ``None``: no token budget."""


def _keys(prefix: str, host: str) -> dict[str, str]:
    tag = "{" + host.replace("{", "(").replace("}", ")") + "}"
    parts = ("slots", "budget", "backoff", "waiters", "waiting", "fallback", "stats")
    return {part: f"{prefix}:cap:{tag}:{part}" for part in parts}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HostCapacity:
    """The limits of one host, checked and debited atomically in Redis.

    ``lease_seconds`` is how long a slot outlives its worker: calls in progress are renewed by
    the process's ``SlotKeeper``, so a slot lapses only when its worker stopped renewing.
    """

    def __init__(self, redis: Redis, prefix: str, limits: HostLimits, lease_seconds: float = 30.0) -> None:
        self.redis = redis
        self.prefix = prefix
        self.limits = limits
        self.lease_seconds = lease_seconds
        self.keys = _keys(prefix, limits.host)
        self.registry = f"{prefix}:cap:hosts"
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._wait = redis.register_script(_WAIT)
        self._renew = redis.register_script(_RENEW)
        self._registered_at = 0.0

    @property
    def host(self) -> str:
        """The host these limits belong to."""
        return self.limits.host

    def _args(self) -> list[int]:
        lim = self.limits
        return [lim.max_in_flight or 0, lim.rpm or 0, lim.tpm or 0]

    @property
    def _burst(self) -> str:
        return f"{self.limits.burst_seconds:.6f}"

    def _register(self) -> None:
        """List the host for ``tandem hosts`` (once an hour per process: it costs a round trip)."""
        if time.monotonic() - self._registered_at < 3600 and self._registered_at:
            return
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.registry, self.host, self.limits.to_json())
        pipe.expire(self.registry, KEY_TTL)
        pipe.execute()
        self._registered_at = time.monotonic()

    def acquire(self, estimated_tokens: int) -> Grant | Wait:
        """A slot and the budget for a call of about ``estimated_tokens``, or when to try again."""
        self._register()
        k = self.keys
        token = uuid.uuid4().hex
        estimate = max(0, int(estimated_tokens))
        reply = self._acquire(
            keys=[k["slots"], k["budget"], k["backoff"], k["stats"]],
            args=[token, *self._args(), estimate, self.lease_seconds, KEY_TTL, PROBE_POLL, self._burst],
        )
        if int(reply[0]) == 1:
            return Grant(token=token, estimated_tokens=estimate, probe=int(reply[1]) == 1)
        reason: Any = _text(reply[1])
        return Wait(host=self.host, reason=reason, until=float(_text(reply[2])), now=float(_text(reply[3])))

    def release(
        self,
        grant: Grant,
        *,
        used_tokens: int | None = None,
        success: bool = True,
        back_off: float | None = None,
    ) -> list[dict[str, Any]]:
        """Give the slot back and debit the real usage (``None``: the estimate stands).

        ``back_off`` (seconds, from a 429/503's ``Retry-After``) opens the fleet's back-off window.
        Returns the dispatches of the waiters woken by the freed slot: the caller sends them.
        """
        k = self.keys
        used = grant.estimated_tokens if used_tokens is None else max(0, int(used_tokens))
        reply = self._release(
            keys=[k["slots"], k["budget"], k["backoff"], k["stats"], k["waiters"], k["waiting"]],
            args=[
                grant.token,
                *self._args(),
                used - grant.estimated_tokens,
                self.lease_seconds,
                KEY_TTL,
                max(0.0, back_off or 0.0) if back_off is not None else 0,
                1 if success else 0,
                used if used_tokens is not None else 0,
                self._burst,
            ],
        )
        return [json.loads(_text(d)) for d in reply or []]

    def wait_for_slot(
        self, waiter_id: str, dispatch: dict[str, Any], *, priority: int = 0, fallback: float = 30.0
    ) -> tuple[bool, bool]:
        """Queue a step for the next free slot: ``release`` hands back ``dispatch``.

        Higher ``priority`` (0-9) goes first (one level counts as an hour of waiting). Returns
        ``(free_now, schedule_fallback)``: a slot freed meanwhile (send the step at once), and
        whether the caller should also re-queue a copy in ``fallback`` seconds (only one such copy
        is pending per waiter, so wake-ups never multiply the step's messages).
        """
        k = self.keys
        order = time.time() - 3600.0 * priority
        free, schedule = self._wait(
            keys=[k["slots"], k["waiters"], k["waiting"], k["fallback"]],
            args=[
                waiter_id,
                json.dumps(dispatch),
                f"{order:.6f}",
                self.limits.max_in_flight or 0,
                fallback,
                KEY_TTL,
            ],
        )
        return int(free) == 1, int(schedule) == 1

    def renew(self, tokens: list[str]) -> int:
        """Push the leases of calls still under way ``lease_seconds`` ahead; how many were renewed."""
        if not tokens:
            return 0
        return int(self._renew(keys=[self.keys["slots"]], args=[self.lease_seconds, *tokens]))

    def now(self) -> float:
        """Redis's clock, the clock of every ``until``."""
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1e6

    def snapshot(self) -> HostSnapshot:
        """In-flight calls, waiters, budget levels and back-off, as of now."""
        return snapshot(self.redis, self.prefix, self.limits)


def snapshot(redis: Redis, prefix: str, limits: HostLimits) -> HostSnapshot:
    """What one host's capacity keys hold now (read-only)."""
    keys = _keys(prefix, limits.host)
    seconds, micros = redis.time()
    now = float(seconds) + micros / 1e6
    pipe = redis.pipeline(transaction=False)
    pipe.zcount(keys["slots"], f"({now}", "+inf")
    pipe.zcard(keys["waiters"])
    pipe.hgetall(keys["budget"])
    pipe.hgetall(keys["backoff"])
    pipe.hgetall(keys["stats"])
    in_flight, waiting, budget, backoff, stats = pipe.execute()
    budget = {_text(a): float(_text(b)) for a, b in budget.items()}
    backoff = {_text(a): _text(b) for a, b in backoff.items()}
    elapsed = max(0.0, now - budget.get("at", now))

    def level(name: str, per_minute: int | None) -> float | None:
        if not per_minute:
            return None
        shape = bucket(per_minute, limits.burst_seconds, whole=name == "req")
        turns = budget.get("rturn" if name == "req" else "tturn", 0.0) > now  # outstanding
        cap = shape.cap if turns else shape.burst
        return min(cap, budget.get(name, shape.burst) + elapsed * shape.rate)

    def size(per_minute: int | None, whole: bool) -> float | None:
        return bucket(per_minute, limits.burst_seconds, whole=whole).burst if per_minute else None

    until = float(backoff["until"]) if "until" in backoff else None
    return HostSnapshot(
        host=limits.host,
        limits={"max_in_flight": limits.max_in_flight, "rpm": limits.rpm, "tpm": limits.tpm},
        in_flight=int(in_flight),
        waiting=int(waiting),
        requests_available=level("req", limits.rpm),
        tokens_available=level("tok", limits.tpm),
        backoff_until=until,
        probe=float(backoff.get("probe_until", 0) or 0) > now,
        stats={_text(a): float(_text(b)) for a, b in stats.items()},
        now=now,
        requests_burst=size(limits.rpm, True),
        tokens_burst=size(limits.tpm, False),
    )


def host_snapshots(redis: Redis, settings: Settings) -> list[HostSnapshot]:
    """Every host some worker registered limits for, plus this process's configured ones."""
    hosts = {h.host: h for h in known_hosts(redis, settings.prefix)}
    for role in ("thinker", "actor"):
        host, max_in_flight, rpm, tpm = settings.host_limits(role)
        if host not in hosts and any(v is not None for v in (max_in_flight, rpm, tpm)):
            hosts[host] = HostLimits(host, max_in_flight, rpm, tpm, settings.rate_burst_seconds)
    return [snapshot(redis, settings.prefix, limits) for _, limits in sorted(hosts.items())]


def known_hosts(redis: Redis, prefix: str) -> list[HostLimits]:
    """The hosts any worker has registered limits for, by name."""
    raw = redis.hgetall(f"{prefix}:cap:hosts")
    hosts = []
    for name, data in sorted((_text(a), _text(b)) for a, b in raw.items()):
        values = json.loads(data)
        hosts.append(
            HostLimits(
                name,
                values.get("max_in_flight"),
                values.get("rpm"),
                values.get("tpm"),
                float(values.get("burst_seconds", 1.0)),  # registered before bursts: the default
            )
        )
    return hosts


class SlotKeeper:
    """One daemon thread per process that renews the slot leases of the calls under way."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._held: dict[str, tuple[HostCapacity, str]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def hold(self, capacity: HostCapacity, grant: Grant) -> None:
        """Renew ``grant``'s lease until ``drop``."""
        with self._lock:
            self._held[grant.token] = (capacity, grant.token)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="tandem-slot-keeper", daemon=True)
                self._thread.start()

    def drop(self, grant: Grant) -> None:
        """Stop renewing ``grant``'s lease."""
        with self._lock:
            self._held.pop(grant.token, None)

    def stop(self) -> None:
        """End the thread (tests)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                by_host: dict[int, tuple[HostCapacity, list[str]]] = {}
                for capacity, token in self._held.values():
                    by_host.setdefault(id(capacity), (capacity, []))[1].append(token)
            for capacity, tokens in by_host.values():
                try:
                    capacity.renew(tokens)
                except Exception:  # a Redis hiccup: the next round renews; leases outlast a few
                    log.warning("could not renew %d slot lease(s) of %s", len(tokens), capacity.host)
