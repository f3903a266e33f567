"""Step leases: a step whose worker died is taken over by another worker within seconds.

With late acks on Redis, a message held by a worker that was SIGKILLed only returns to its queue
after the broker's visibility timeout (by default longer than a step may run: many minutes). So
every running step also holds a *lease*: a Redis key with a short TTL that a heartbeat thread
renews every third of ``lease_seconds``, plus an entry in the ``leases`` sorted set (score: when
the lease runs out) and the message options needed to send the step again.

Every worker runs a ``Watchdog`` thread. When a lease runs out (no heartbeat: the process is
gone), the first watchdog to claim it sends the step again, with the same task id, chord and
group, so the job continues. Steps are idempotent (see ``tandem.tasks.turns``): if the original message
is redelivered later, it finds the step done and is ignored.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from redis import Redis

log = logging.getLogger("tandem.leases")

# Take the lease and register it for takeover in one round trip (and atomically: a worker dying
# between the two can no longer leave a lease that no watchdog knows of). The expiry is on
# Redis's clock, like ``server_time``.
_ACQUIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local now = redis.call('TIME')
local expiry = tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[5])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[2], string.format('%.6f', expiry), ARGV[3])
return 1
"""

_CLAIM = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
end
return 0
"""

# Only the owner, or anyone once no one holds the lease, clears the step's entries: a worker whose
# lease was taken over must not unprotect the worker that took the step over.
_RELEASE = """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
if owner then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
return 1
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], 'XX', ARGV[4], ARGV[3])
  return 1
end
return 0
"""


def server_time(redis: Redis) -> float:
    """Redis's clock, in seconds: one clock for all workers, whatever their hosts' clocks say."""
    seconds, micros = redis.time()
    return float(seconds) + micros / 1e6


class LeaseKeys:
    """The Redis keys shared by leases and watchdogs under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.leases = f"{prefix}:leases"
        self.dispatch = f"{prefix}:leases:dispatch"
        self.takeovers = f"{prefix}:leases:takeovers"
        self.prefix = prefix

    def lease(self, step_id: str) -> str:
        """The key holding the owner token of ``step_id``."""
        return f"{self.prefix}:lease:{step_id}"


class StepLease:
    """Exclusive, renewed ownership of one step while it runs. Use as a context manager after
    ``acquire()`` returned ``True``."""

    def __init__(
        self, redis: Redis, keys: LeaseKeys, step_id: str, seconds: float, dispatch: dict[str, Any]
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.step_id = step_id
        self.seconds = seconds
        self.dispatch = dispatch
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        """Take the lease unless another live worker holds it; start the heartbeat."""
        acquired = self.redis.eval(
            _ACQUIRE,
            3,
            self.keys.lease(self.step_id),
            self.keys.leases,
            self.keys.dispatch,
            self.token,
            int(self.seconds * 1000),
            self.step_id,
            json.dumps(self.dispatch),
            self.seconds,
        )
        if not acquired:
            return False
        self._thread = threading.Thread(target=self._beat, name=f"tandem-lease-{self.step_id}", daemon=True)
        self._thread.start()
        return True

    def _beat(self) -> None:
        interval = max(self.seconds / 3, 0.2)
        while not self._stop.wait(interval):
            try:
                expiry = server_time(self.redis) + self.seconds
                held = self.redis.eval(
                    _RENEW,
                    2,
                    self.keys.lease(self.step_id),
                    self.keys.leases,
                    self.token,
                    int(self.seconds * 1000),
                    self.step_id,
                    expiry,
                )
                if not held:
                    log.warning("lease on %s was lost; another worker may take the step over", self.step_id)
                    return
            except Exception:  # a broken connection must not kill the step; the next beat retries
                log.exception("lease heartbeat for %s failed", self.step_id)

    def release(self) -> None:
        """Stop the heartbeat and give the lease up (the step finished, well or not)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.redis.eval(
            _RELEASE,
            4,
            self.keys.lease(self.step_id),
            self.keys.leases,
            self.keys.dispatch,
            self.keys.takeovers,
            self.token,
            self.step_id,
        )

    def __enter__(self) -> StepLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Watchdog:
    """Sends again the steps whose lease ran out. One daemon thread per worker process.

    ``send(dispatch)`` re-sends a step from its recorded dispatch dict. A step taken over more
    than ``max_takeovers`` times is handed to ``give_up(step_id, dispatch)`` instead.
    """

    def __init__(
        self,
        redis: Redis,
        keys: LeaseKeys,
        seconds: float,
        send: Callable[[dict[str, Any]], None],
        give_up: Callable[[str, dict[str, Any]], None],
        *,
        max_takeovers: int = 5,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.seconds = seconds
        self.send = send
        self.give_up = give_up
        self.max_takeovers = max_takeovers
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> int:
        """Take over every expired lease once; return how many steps were sent again."""
        now = server_time(self.redis)
        sent = 0
        for raw in self.redis.zrangebyscore(self.keys.leases, "-inf", now):
            step_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            # Hold the entry for two lease periods so the re-sent step can start before it expires.
            attempt = int(
                self.redis.eval(
                    _CLAIM, 2, self.keys.leases, self.keys.takeovers, step_id, now, now + 2 * self.seconds
                )
            )
            if not attempt:
                continue
            raw_dispatch = self.redis.hget(self.keys.dispatch, step_id)
            if raw_dispatch is None:
                self.redis.zrem(self.keys.leases, step_id)
                continue
            dispatch = json.loads(raw_dispatch)
            if attempt > self.max_takeovers:
                log.error("step %s was taken over %d times: giving up", step_id, attempt - 1)
                self.redis.zrem(self.keys.leases, step_id)
                self.give_up(step_id, dispatch)
                continue
            log.warning(
                "lease on step %s ran out (worker gone?): sending it again (takeover %d)", step_id, attempt
            )
            self.send(dispatch)
            sent += 1
        return sent

    def start(self) -> None:
        """Sweep every third of a lease period in a daemon thread."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(max(self.seconds / 3, 0.2)):
                try:
                    self.sweep()
                except Exception:
                    log.exception("lease watchdog sweep failed")

        self._thread = threading.Thread(target=loop, name="tandem-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sweeping."""
        self._stop.set()
