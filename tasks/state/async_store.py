"""``AsyncJobStore``: what a client reads of a job, with redis's asyncio client.

The read side of ``JobStore`` for services written with asyncio (``JobHandle.aresult``,
``aevents``, ``acancel``): the same keys (``JobStore.key``), the same JSON, no thread per
waiting client. Workers keep writing through ``JobStore``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from tandem.tasks.spec import JobResult, JobStatus
from tandem.tasks.state.record import text as _text
from tandem.tasks.state.store import (
    FINAL_LOOKAHEAD,
    JobStore,
    entry_types,
    final_ends,
    question_json,
    status_from_record,
)

AsyncRedisFactory = Callable[[], AsyncRedis]
"""Makes a new asyncio Redis client (one per operation: a client belongs to one event loop)."""


def event_from_entry(entry_id: Any, fields: dict[Any, Any]) -> dict[str, Any]:
    """A job event, ``{"id", "type", "data", "at"}``, from a stream entry (as ``JobStore.events``)."""
    decoded = {_text(k): _text(v) for k, v in fields.items()}
    return {
        "id": _text(entry_id),
        "type": decoded.get("type", ""),
        "data": json.loads(decoded.get("data", "{}")),
        "at": float(decoded.get("at", 0)),
    }


def async_redis_factory(sync: Redis) -> AsyncRedisFactory:
    """A factory of asyncio clients of the same server and database as the client ``sync``
    (TCP or Unix socket, with its credentials and TLS setting), of the same Sentinel master, or of
    the same Redis Cluster."""
    from redis.connection import SSLConnection, UnixDomainSocketConnection

    from tandem.broker_config.job_redis import async_twin_factory, is_cluster
    from tandem.broker_config.sentinel_clients import async_twin, is_sentinel_client

    if is_cluster(sync):
        return async_twin_factory(sync)
    if is_sentinel_client(sync):
        return async_twin(sync)

    pool = sync.connection_pool
    given = dict(pool.connection_kwargs)
    keep = ("db", "username", "password", "socket_timeout", "socket_connect_timeout", "client_name")
    kwargs: dict[str, Any] = {k: given[k] for k in keep if given.get(k) is not None}
    if issubclass(pool.connection_class, UnixDomainSocketConnection):
        kwargs["unix_socket_path"] = given.get("path")
    else:
        kwargs["host"] = given.get("host", "localhost")
        kwargs["port"] = given.get("port", 6379)
        if issubclass(pool.connection_class, SSLConnection):
            kwargs["ssl"] = True
    return lambda: AsyncRedis(**kwargs)


class AsyncJobStore:
    """Reads a job's status, result and events, and asks for its cancellation, without blocking."""

    def __init__(self, redis: AsyncRedis, keys: JobStore) -> None:
        self.redis = redis
        self.keys = keys

    async def status(self, job_id: str) -> JobStatus | None:
        """The job's status (with its pending calls while it awaits approval), or ``None`` for an
        unknown job."""
        raw = await self.redis.hgetall(self.keys.key(job_id, "state"))
        state = raw.get(b"state") or raw.get("state")
        parked = state in (b"awaiting_approval", "awaiting_approval")
        approval = await self.redis.get(self.keys.key(job_id, "approval")) if parked else None
        question = (
            await self.redis.hmget(self.keys.key(job_id, "question"), ["record", "seq"]) if parked else None
        )
        return status_from_record(job_id, raw, approval, question_json(question))

    async def result(self, job_id: str) -> JobResult | None:
        """The final result, once the job has ended."""
        raw = await self.redis.get(self.keys.key(job_id, "result"))
        return None if raw is None else JobResult.model_validate_json(raw)

    async def request_cancel(self, job_id: str) -> None:
        """Ask the job to stop at its next step (as ``JobStore.request_cancel``)."""
        pipe = self.redis.pipeline(transaction=False)
        # The store's key TTL where it has one, so a flag on a job that never runs expires too.
        pipe.set(self.keys.key(job_id, "cancel"), "1", ex=getattr(self.keys, "ttl", None))
        self.keys.machine.look_now(job_id, pipe)
        await pipe.execute()

    async def start_id(self, job_id: str, after: str) -> str:
        """The stream id to read after ``after``: ``"$"`` (only new events) is the newest entry's
        id, so that reading on after an outage skips nothing written in between."""
        return await self.last_event_id(job_id) if after == "$" else after

    async def last_event_id(self, job_id: str) -> str:
        """The id of the job's newest event, ``"0"`` when it has none."""
        newest = await self.redis.xrevrange(self.keys.key(job_id, "events"), count=1)
        return _text(newest[0][0]) if newest else "0"

    async def wait_event(self, job_id: str, last_id: str, seconds: float) -> str:
        """Wait up to ``seconds`` for an event after ``last_id``; the newest id seen."""
        batch = await self.redis.xread(
            {self.keys.key(job_id, "events"): last_id}, count=100, block=max(1, int(seconds * 1000))
        )
        for _stream, entries in batch or []:
            for entry_id, _fields in entries:
                last_id = _text(entry_id)
        return last_id

    async def final_is_last(self, job_id: str, event_id: str) -> bool:
        """``JobStore.final_is_last``: the ``final`` event ``event_id`` ends the job's stream."""
        key = self.keys.key(job_id, "events")
        after = await self.redis.xrange(key, min=f"({event_id}", count=FINAL_LOOKAHEAD)
        state = await self.redis.hget(self.keys.key(job_id, "state"), "state")
        return final_ends(entry_types(after), state)

    async def events(
        self, job_id: str, *, last_id: str = "0", block_ms: int = 1000, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The job's events from ``last_id`` on, waiting for new ones, until ``final`` (the same
        events, in the same order, as ``JobStore.events``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.keys.key(job_id, "events")
        while deadline is None or time.monotonic() < deadline:
            block = (
                block_ms
                if deadline is None
                else max(1, min(block_ms, int((deadline - time.monotonic()) * 1000)))
            )
            batch = await self.redis.xread({key: last_id}, count=100, block=block)
            for _stream, entries in batch or []:
                for entry_id, fields in entries:
                    event = event_from_entry(entry_id, fields)
                    last_id = event["id"]
                    yield event
                    if event["type"] == "final" and await self.final_is_last(job_id, event["id"]):
                        return
            # Nothing new: stop for an unknown job, or for one that has ended.
            if not batch and (await self.status(job_id) is None or await self.result(job_id) is not None):
                return
            await asyncio.sleep(0)
