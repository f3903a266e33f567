"""What a client does about Redis outages: ride out a restart, and name the restart that erased a job.

The failure model. Redis goes away for a while: a restart (a few seconds; longer while it loads a
large append-only file), a failover, a network cut. With persistence the jobs survive it and the
workers go on where they were. A client that gave up at the first ``ConnectionError`` would leave
its caller guessing, and a caller that submits again runs the job twice. So a ``JobHandle`` call
repeats its Redis commands through one outage (``Reconnect``) and raises ``RedisUnavailable`` only
when Redis stayed unreachable for the call's whole window:

- a wait with a timeout (``result``, ``aresult``, ``events``, ``aevents``): until its own deadline;
- a wait without one: ``JobHandle.reconnect_wait`` seconds (300) of one outage;
- any other call (``status``, ``astatus``, ``cancel``, ``acancel``, ``job``):
  ``JobHandle.reconnect_call`` seconds (15).

A hung Redis (a network cut, a paused server: connections neither answer nor fail) is noticed by
the socket timeout of the command that waits on it: a handle's commands wait at most
``CLIENT_SOCKET_TIMEOUT`` (5 s; ``bounded``), not the workers' ``TANDEM_REDIS_SOCKET_TIMEOUT``, so
the windows hold there too (and ``reconnect_call = 0`` answers within those 5 s).

Every command repeated is a read, or a write that is idempotent (the cancel flag; the first
result stored wins), so a repeat after a lost reply changes nothing. A waiting call resumes from
what it had: a stream read goes on after the last event id it returned.

A restart without persistence erases the jobs: ``lost_error`` tells that from keys that expired,
by Redis's uptime (``INFO``): when Redis started after the client knew the job existed, the
restart erased it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from kombu.exceptions import OperationalError
from redis import BlockingConnectionPool, ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tandem.tasks.errors import JobLostError, RedisUnavailable
from tandem.tasks.state.store import JobStore
from tandem.toolkit.redaction import redact

T = TypeVar("T")

CONNECTION_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OperationalError)
"""What an outage raises: redis-py's connection errors (``BusyLoadingError`` while Redis loads its
file is one), its timeouts, and kombu's ``OperationalError`` (the broker, for a revoke)."""

FIRST_PAUSE = 0.1
"""Seconds before the first repeat of a command that failed; doubled after each failure..."""
LONGEST_PAUSE = 1.0
"""...up to this: a restart is noticed within a second of Redis answering again."""


CLIENT_SOCKET_TIMEOUT = 5.0
"""The longest a client handle's Redis command waits for its answer (seconds). A handle's commands
are quick (its stream reads block 1 s at most): a longer silence is a hung Redis."""

_bounded: weakref.WeakKeyDictionary[ConnectionPool, Redis] = weakref.WeakKeyDictionary()
_bounded_lock = threading.Lock()


def bounded(store: JobStore, timeout: float = CLIENT_SOCKET_TIMEOUT) -> JobStore:
    """``store`` over a client whose commands wait at most ``timeout`` seconds for an answer (one
    such client per connection pool, kept while the pool lives). A client whose socket timeout is
    shorter already, or unset (its owner's choice), is kept as it is."""
    pool = getattr(store.redis, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    current = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    if pool is None or not isinstance(kwargs, dict) or current is None or current <= timeout:
        return store
    with _bounded_lock:
        client = _bounded.get(pool)
        if client is None:
            from tandem.broker_config.sentinel_clients import is_sentinel_client, with_socket_timeout

            if is_sentinel_client(store.redis):  # a pool of the same Sentinels' master
                client = _bounded[pool] = with_socket_timeout(store.redis, timeout)
                return JobStore(client, store.prefix, store.ttl, stream=store.stream)
            extra = {"timeout": pool.timeout} if isinstance(pool, BlockingConnectionPool) else {}
            copy = type(pool)(
                connection_class=pool.connection_class,
                max_connections=pool.max_connections,
                **extra,
                **{**kwargs, "socket_timeout": timeout},
            )
            client = _bounded[pool] = Redis(connection_pool=copy)
    return JobStore(client, store.prefix, store.ttl, stream=store.stream)


def redis_address(redis: Any) -> str:
    """Where a redis-py client connects (``host:port/db`` or ``unix:path/db``), never its
    credentials; for a Redis Cluster, ``cluster:`` and its masters' ``host:port``; for a Sentinel
    master, ``sentinel:<service>@`` and the Sentinels' ``host:port``, then ``/db``)."""
    from tandem.broker_config.job_redis import is_cluster
    from tandem.broker_config.sentinel_clients import sentinel_address

    if is_cluster(redis):
        return "cluster:" + ",".join(f"{n.host}:{n.port}" for n in redis.get_primaries())
    if (found := sentinel_address(redis)) is not None:
        _, nodes, service, db, _ = found
        return f"sentinel:{service}@" + ",".join(f"{h}:{p}" for h, p in sorted(nodes)) + f"/{db}"
    kwargs: Mapping[str, Any] = getattr(getattr(redis, "connection_pool", None), "connection_kwargs", {})
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}/{db}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


class Reconnect:
    """Repeats a call through one Redis outage at a time, within a window.

    ``deadline`` (``time.monotonic``): an outage is ridden out until then, however it started.
    Without one, each outage may last ``window`` seconds from its first failure; a success ends
    it. ``RedisUnavailable`` after that names ``address``, the outage's length and what to check.
    """

    def __init__(
        self,
        address: str,
        *,
        window: float,
        deadline: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.window = window
        self.deadline = deadline
        self._sleep = sleep
        self._clock = clock
        self._since: float | None = None
        self._pause = FIRST_PAUSE

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, repeated while it fails for want of Redis (see the class)."""
        while True:
            started = self._clock()
            try:
                value = fn()
            except RedisUnavailable:  # an inner call's window is over: not repeated again here
                raise
            except CONNECTION_ERRORS as exc:
                self._sleep(self.failed(exc, started))
                continue
            self._since = None
            return value

    async def acall(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``call`` for a coroutine function: the pauses are ``asyncio.sleep``."""
        while True:
            started = self._clock()
            try:
                value = await fn()
            except RedisUnavailable:
                raise
            except CONNECTION_ERRORS as exc:
                await asyncio.sleep(self.failed(exc, started))
                continue
            self._since = None
            return value

    def recover(self, exc: Exception, probe: Callable[[], Any]) -> None:
        """After ``exc`` broke a longer read (a stream being followed): wait until ``probe`` (a
        ``PING``) succeeds, within the window, so the read can start again where it was."""
        self._sleep(self.failed(exc))
        self.call(probe)

    async def arecover(self, exc: Exception, probe: Callable[[], Awaitable[Any]]) -> None:
        """``recover`` for asyncio."""
        await asyncio.sleep(self.failed(exc))
        await self.acall(probe)

    def failed(self, exc: Exception, started: float | None = None) -> float:
        """Count a failure of a try begun at ``started`` (redis-py may have spent seconds on its
        own retries before it raised): the seconds to pause before the next try, or
        ``RedisUnavailable`` when the window is over."""
        now = self._clock()
        if self._since is None:
            self._since, self._pause = now if started is None else started, FIRST_PAUSE
        limit = self.deadline if self.deadline is not None else self._since + self.window
        if now >= limit:
            raise self.error(exc, now - self._since)
        pause, self._pause = min(self._pause, limit - now), min(self._pause * 2, LONGEST_PAUSE)
        return pause

    def error(self, exc: Exception, seconds: float) -> RedisUnavailable:
        """The error at the end of the window."""
        ended = f"the {self.window:g} s reconnect window"
        if self.deadline is not None:
            ended = "the wait's timeout"
        last = redact(str(exc)).rstrip(".")
        return RedisUnavailable(
            f"Redis at {self.address} could not be reached for {seconds:.0f} s ({ended} is over); "
            f"last error: {last}. The job may still be running: do not submit it again on this error "
            "alone. Check that redis-server is running and reachable at that address (TANDEM_REDIS_URL; "
            "TANDEM_RESULT_BACKEND for Celery's results), then ask again (status() or result())"
        )


def lost_error(job_id: str, info: Mapping[str, Any] | None, known_for: float) -> JobLostError:
    """The error for a job that existed ``known_for`` seconds ago and that Redis no longer holds
    (no record, no result), saying why from Redis's ``INFO`` (``None``: it could not be read)."""
    if info is None:
        return JobLostError(
            f"job {job_id!r} is lost: Redis holds nothing of it any more (no record, no result): its "
            "keys expired (TANDEM_MEMORY_TTL), were deleted, or a restart erased them (Redis's INFO "
            "could not be read to tell). Submit it again"
        )
    uptime = float(info.get("uptime_in_seconds", known_for + 1))
    if uptime < known_for:
        aof = str(info.get("aof_enabled", "0")) == "1"
        how = (
            "with append-only persistence, yet without the job's keys (appendfsync everysec loses "
            "the last second of writes in a crash)"
            if aof
            else "without persistence (appendonly no), which erased the job's record, spec and messages"
        )
        return JobLostError(
            f"job {job_id!r} is lost: Redis restarted {uptime:.0f} s ago, after the job was "
            f"submitted or seen ({known_for:.0f} s ago), {how}. Submit it again; run Redis with "
            "--appendonly yes (docker compose does) so jobs survive a restart"
        )
    return JobLostError(
        f"job {job_id!r} is lost: Redis holds nothing of it any more (no record, no result): its "
        "keys expired (TANDEM_MEMORY_TTL) or were deleted. Submit it again"
    )


def restart_note(info: Mapping[str, Any] | None, horizon: float) -> str:
    """For an unknown job id: a note that Redis, which runs without persistence, restarted less than
    ``horizon`` seconds ago (a job submitted before then was erased); ``""`` otherwise."""
    if not info or str(info.get("aof_enabled", "0")) == "1":
        return ""
    uptime = float(info.get("uptime_in_seconds", horizon))
    if uptime >= horizon:
        return ""
    return (
        f" (note: Redis runs without persistence (appendonly no) and restarted {uptime:.0f} s ago: "
        "a job submitted before then was erased)"
    )


def server_info(redis: Any) -> dict[str, Any] | None:
    """Redis's ``INFO`` (``uptime_in_seconds``, ``aof_enabled``, ...), or ``None`` when it cannot be
    read (a managed Redis may refuse ``INFO``)."""
    try:
        return dict(redis.info())
    except Exception:  # any failure only means the error cannot say why
        return None
