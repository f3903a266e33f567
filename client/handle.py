"""``JobHandle``: a submitted job, followed and steered through Redis and the broker (the direct
client; ``tandem.client.submission`` makes one). Its ``a``-methods are for asyncio code:
``await handle.aresult()``, ``async for e in handle.aevents()``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from functools import partial
from typing import Any

from celery import Celery

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.client.events import JobEvent, read_event
from tandem.client.handle_approvals import HandleApprovals
from tandem.client.handle_messages import HandleMessages
from tandem.client.handle_questions import HandleQuestions
from tandem.client.outages import (
    CONNECTION_ERRORS,
    Reconnect,
    bounded,
    lost_error,
    redis_address,
    restart_note,
    server_info,
)
from tandem.client.sending import ask
from tandem.tasks.errors import (
    JobLostError,
    JobTimeout,
    RedisUnavailable,
    ResumeRefused,
    UnknownArtifactError,
    UnknownJobError,
)
from tandem.tasks.spec import FINAL_STATES, JobResult, JobStatus
from tandem.tasks.state.artifacts import TOTAL_FIELD
from tandem.tasks.state.async_store import AsyncJobStore, AsyncRedisFactory, async_redis_factory
from tandem.tasks.state.keys import CLIENT_PARTS, JOB_PARTS
from tandem.tasks.state.results import ResultDelivery
from tandem.tasks.state.store import JobStore

log = logging.getLogger("tandem.client")


class JobHandle(HandleApprovals, HandleQuestions, HandleMessages):
    """A submitted job: its ``id`` (the Celery id of ``tandem.infer``), status, events and result.

    The ``a``-methods are for asyncio code: they wait on redis's asyncio client (a new client of
    the store's server per call, from ``aredis``; by default one like the store's), never in a
    thread, so a service can follow thousands of jobs at once.

    Every call rides out a Redis outage (a restart, a failover) by repeating its reads (see
    ``tandem.client.outages``): a wait with a timeout until its deadline, a wait without one for
    ``reconnect_wait`` seconds of one outage, any other call for ``reconnect_call`` seconds; then
    ``RedisUnavailable``. Once the handle has known the job to exist (it submitted it, or saw its
    record), the job's disappearance is ``JobLostError``, naming a restart that erased it.
    """

    reconnect_call: float = 15.0
    """Seconds ``status``, ``cancel`` (and their ``a``-twins) keep trying to reach Redis."""
    reconnect_wait: float = 300.0
    """Seconds of one outage a wait with no timeout (``result``, ``events``, ...) rides out."""
    owner: str | None = None
    """The tenant this handle asks for in ``resume``, ``fork`` and decisions when they name none
    (``None``: ``default``); workers refuse another tenant's job as unknown."""

    def __init__(
        self,
        job_id: str,
        store: JobStore,
        app: Celery,
        *,
        submitted: bool = False,
        aredis: AsyncRedisFactory | None = None,
    ) -> None:
        self.id = job_id
        self._store = bounded(store)  # a hung Redis is noticed within the handle's windows
        self._app = app
        self._submitted = submitted
        self._submitted_at = time.time()
        self._known_at: float | None = self._submitted_at if submitted else None
        self._aredis = aredis

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def _reconnect(self, deadline: float | None = None, *, wait: bool = False) -> Reconnect:
        """The outage window of one call: until ``deadline``, else ``reconnect_wait`` seconds for a
        wait and ``reconnect_call`` for any other call."""
        window = self.reconnect_wait if wait else self.reconnect_call
        return Reconnect(redis_address(self._store.redis), window=window, deadline=deadline)

    def _saw(self) -> None:
        """The job exists: from now on its disappearance is a loss (``JobLostError``)."""
        if self._known_at is None:
            self._known_at = time.time()

    def status(self) -> JobStatus:
        """Where the job stands: ``queued`` until a worker takes it, ``failed`` with the reason for
        a spec the worker refused; ``UnknownJobError`` for an id that no store, result or submit
        knows, ``JobLostError`` (one of them) for a job this handle submitted or saw that Redis no
        longer holds (a restart without persistence erased it, or its keys expired);
        ``RedisUnavailable`` when Redis stays unreachable for ``reconnect_call`` seconds."""
        return self._reconnect().call(self._status)

    def _status(self) -> JobStatus:
        stored = self._store.status(self.id)
        if stored is not None:
            self._saw()
            if stored.state != "queued":
                return stored
        # Queued, or unknown to the store: the intake may have refused it (its answer comes
        # before the ``queued`` marker of ``submit`` is removed).
        refused = self._celery_result()
        if refused is not None:
            return JobStatus(
                job_id=self.id, state=refused.status, error=refused.error, step="intake", owner=refused.owner
            )
        if stored is not None:
            return stored
        if self._known_at is not None:  # submitted (``submit`` wrote its record first) or seen
            raise self._lost()
        note = restart_note(server_info(self._store.redis), self._store.ttl)
        raise UnknownJobError(
            f"no job {self.id!r} is known: it was never submitted, or it ended more than "
            f"TANDEM_RESULT_EXPIRES seconds ago{note}"
        )

    def _lost(self) -> JobLostError:
        """The error for a job this handle knew that Redis no longer holds, saying why when
        Redis tells (``tandem.client.outages.lost_error``)."""
        known_for = time.time() - (self._known_at or self._submitted_at)
        return lost_error(self.id, server_info(self._store.redis), known_for)

    def _vanished(self) -> bool:
        """True for a job this handle knew whose record and result are no longer in Redis, and
        that Celery's backend has no result for either."""
        if self._known_at is None:
            return False
        keys = (self._store.key(self.id, "state"), self._store.key(self.id, "result"))
        return not self._store.redis.exists(*keys) and self._celery_result() is None

    def _celery_result(self) -> JobResult | None:
        """The job's result as Celery's backend holds it (how a refused spec is answered)."""
        celery_result = self._app.AsyncResult(self.id)
        value = celery_result.result if celery_result.ready() else None
        if isinstance(value, dict) and "status" in value:
            return JobResult.model_validate(value)
        return None

    def result(self, timeout: float | None = None, poll: float = 0.05) -> JobResult:
        """Wait for the final result; ``JobTimeout`` after ``timeout`` seconds, ``JobLostError``
        (checked every second) when Redis no longer holds a job this handle submitted or saw.

        A Redis outage is ridden out until the timeout (with none, for ``reconnect_wait``
        seconds): ``RedisUnavailable`` when Redis is still unreachable then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        reach = self._reconnect(deadline, wait=True)
        next_check = time.monotonic() + 1.0
        while True:
            found = reach.call(self._poll_result)
            if found is not None:
                return found
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 1.0
                if reach.call(self._vanished):
                    raise self._lost()
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"job {self.id} has not ended after {timeout:g} s (state: {self._state()})")
            time.sleep(poll)

    def _poll_result(self) -> JobResult | None:
        """The job's result if it has ended, from the store or (a job not running) from Celery."""
        found = self._store.result(self.id)
        if found is None and not self._running():
            found = self._celery_result()
        return found

    def _running(self) -> bool:
        """True while the store has the job running: Celery's result (a refused spec's answer, or
        the end of a run before a resume) does not answer for it then."""
        raw = self._store.redis.hget(self._store.key(self.id, "state"), "state")
        state = None if raw is None else (raw.decode() if isinstance(raw, bytes) else str(raw))
        if state is not None:
            self._saw()
        return state is not None and state != "queued" and state not in FINAL_STATES

    def _state(self) -> str:
        try:
            return self.status().state
        except JobLostError:
            return "lost"
        except UnknownJobError:
            return "unknown"
        except RedisUnavailable:
            return "unknown: Redis is unreachable"

    def events(self, *, after: str = "0", timeout: float | None = None) -> Iterator[JobEvent]:
        """The job's events as typed ``JobEvent`` models, live, until the ``final`` event.

        ``after`` is a stream id: ``"0"`` (the default) starts at the job's first event, ``"$"``
        at the next new one, and an event's ``id`` resumes right after that event.
        Stops after ``timeout`` seconds if given. A Redis outage is ridden out as by ``result``,
        and the stream is read on after the last event given: none is lost or given twice.
        ``JobLostError`` when the job this handle submitted or saw vanishes from Redis.
        """
        return self._follow(after, timeout)

    def _follow(self, after: str, timeout: float | None) -> Iterator[JobEvent]:
        deadline = None if timeout is None else time.monotonic() + timeout
        reach = self._reconnect(deadline, wait=True)
        last_id = reach.call(lambda: self._start_id(after))
        last_type = ""
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                for event in self._store.events(self.id, last_id=last_id, timeout=left):
                    self._saw()
                    last_id, last_type = event.id, event.type
                    yield event
            except CONNECTION_ERRORS as exc:
                reach.recover(exc, self._store.redis.ping)
                continue
            break
        # The stream ended without ``final`` before the timeout: the job may have no record any more.
        early = deadline is None or time.monotonic() < deadline
        if last_type != "final" and early and reach.call(self._vanished):
            raise self._lost()

    def _start_id(self, after: str) -> str:
        """The stream id to read after: ``"$"`` becomes the newest entry's id, so that reading on
        after an outage skips nothing written between the start and the outage."""
        if after != "$":
            return after
        newest = self._store.redis.xrevrange(self._store.key(self.id, "events"), count=1)
        if not newest:
            return "0"
        entry_id = newest[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def artifact(self, handle: str) -> str:
        """The whole text of the job's artifact ``handle``: a tool output over
        ``TANDEM_ARTIFACT_BYTES``, kept whole (a ``tool_result`` event's ``artifact.handle``).
        ``UnknownArtifactError`` when the job holds no such artifact (not one of its handles, or
        its keys expired); ``RedisUnavailable`` as ``status``."""
        text = self._reconnect().call(lambda: self._store.artifacts(self.id).get(handle))
        if text is None:
            raise UnknownArtifactError(
                f"job {self.id!r} holds no artifact {handle!r}: use a handle of its tool_result events "
                "(their 'artifact'), while the job's records last (TANDEM_MEMORY_TTL)"
            )
        return text

    def cancel(self) -> None:
        """Stop the job, and every child job it started (theirs too), at their next step.

        Steps still queued find the flag when a worker takes them and end at once, without
        calling a model or a tool; the job's result is ``cancelled``. (Queued steps are not
        revoked by id: every step of a job shares the job id, and a revoked chord part would
        turn the job's Celery result into a chord error instead of the cancelled JobResult.)
        Each write is repeated through a Redis outage of up to ``reconnect_call`` seconds (each is
        idempotent), then ``RedisUnavailable``.
        """
        reach = self._reconnect()
        reach.call(lambda: self._store.request_cancel(self.id))
        try:
            state = self.status().state
        except UnknownJobError:  # lost or unknown: nothing runs it
            return
        if state == "queued":
            self._cancel_queued(reach)

    def _cancel_queued(self, reach: Reconnect) -> None:
        """No worker has started the job: it ends here, and its intake message is revoked.

        Its Celery result is stored by this client if its Redis user may write Celery's results,
        else by the workers' reconciler (``ResultDelivery.for_client``; the job's own result and
        ``final`` event are written here either way). The revoke is best effort: a worker that
        takes the message finds the job ended and does nothing, so a failed broadcast (a client
        whose Redis user may not broadcast to workers' control queues, see docs/security.md, or a
        broker outage) loses nothing."""
        queued = reach.call(lambda: self._store.status(self.id))
        owner = queued.owner if queued is not None else DEFAULT_TENANT
        reach.call(
            lambda: self._store.finish(
                JobResult(
                    job_id=self.id, status="cancelled", error="cancelled before it started", owner=owner
                ),
                ttl=_seconds(self._app.conf.result_expires),
                delivery=ResultDelivery.for_client(self._app),
                parts=[p for p in JOB_PARTS if p in CLIENT_PARTS],  # those its Redis user may write
            )
        )
        try:
            self._app.control.revoke(self.id)
        except Exception as exc:
            log.info("job %s: intake message not revoked (%s); a worker taking it ends", self.id, exc)

    # -- resume and fork ----------------------------------------------------------------------

    def resume(
        self, max_rounds: int | None = None, *, timeout: float = 30.0, owner: str | None = None
    ) -> JobHandle:
        """Continue this failed, cancelled or truncated job from its last stored step, under the
        same id (``tandem.resume``: stored model replies and tool results are reused, never
        redone); ``max_rounds`` raises its round budget. Returns this handle: ``result()`` then
        waits for the new end. ``ResumeRefused`` says why not (nothing changed then). ``owner``:
        the tenant asking (``default`` if none): another tenant's job is refused as unknown."""
        kwargs: dict[str, Any] = {"job_id": self.id}
        owner = owner if owner is not None else self.owner
        if owner is not None:
            kwargs["owner"] = owner
        if max_rounds is not None:
            kwargs["max_rounds"] = max_rounds
        self._ask("tandem.resume", kwargs, timeout)
        return self

    def fork(
        self,
        round: int,
        goal: str | None = None,
        *,
        max_rounds: int | None = None,
        timeout: float = 30.0,
        owner: str | None = None,
    ) -> JobHandle:
        """Start a new job holding rounds ``0..round-1`` of this ended job, running on from round
        ``round`` with the same spec (the goal replaced by ``goal``, the budget by ``max_rounds``,
        if given) through ``tandem.fork``; its handle. This job is untouched. ``ResumeRefused``
        says why not. ``owner``: the tenant asking (``default`` if none); the fork keeps the
        job's owner, and another tenant's job is refused as unknown."""
        kwargs: dict[str, Any] = {"job_id": self.id, "round": round}
        owner = owner if owner is not None else self.owner
        if owner is not None:
            kwargs["owner"] = owner
        if goal is not None:
            kwargs["goal"] = goal
        if max_rounds is not None:
            kwargs["max_rounds"] = max_rounds
        reply = self._ask("tandem.fork", kwargs, timeout)
        return self._sibling(str(reply["fork_id"]))

    def _sibling(self, job_id: str) -> JobHandle:
        """The handle of another job of this store and app, for the same tenant (a fork, a follow-up)."""
        handle = JobHandle(job_id, self._store, self._app, aredis=self._aredis)
        handle.owner = self.owner
        return handle

    def _ask(self, task: str, kwargs: dict[str, Any], timeout: float) -> dict[str, Any]:
        doing = "the fork" if task == "tandem.fork" else "the resume"
        reply = ask(self._app, task, kwargs, timeout, doing)  # never a bare Celery time-out
        if not reply.get("accepted"):
            error = reply.get("error") if isinstance(reply, dict) else repr(reply)
            reason = reply.get("reason", "invalid") if isinstance(reply, dict) else "invalid"
            raise ResumeRefused(str(error), str(reason))
        return reply

    # -- asyncio ------------------------------------------------------------------------------

    @asynccontextmanager
    async def _astore(self) -> AsyncIterator[AsyncJobStore]:
        factory = self._aredis or async_redis_factory(self._store.redis)
        client = factory()
        try:
            yield AsyncJobStore(client, self._store)
        finally:
            await client.aclose()  # type: ignore[attr-defined]  # redis>=5; the stubs predate it

    async def astatus(self) -> JobStatus:
        """``status`` for asyncio (a job the store does not know is asked of Celery, in a thread)."""
        reach = self._reconnect()
        async with self._astore() as store:
            found = await reach.acall(lambda: store.status(self.id))
        if found is not None:
            self._saw()
            return found
        return await asyncio.to_thread(self.status)

    async def aartifact(self, handle: str) -> str:
        """``artifact`` for asyncio."""
        reach = self._reconnect()
        async with self._astore() as store:
            raw = await reach.acall(lambda: store.redis.hget(self._store.key(self.id, "artifacts"), handle))
        if raw is None or handle == TOTAL_FIELD:
            raise UnknownArtifactError(
                f"job {self.id!r} holds no artifact {handle!r}: use a handle of its tool_result events "
                "(their 'artifact'), while the job's records last (TANDEM_MEMORY_TTL)"
            )
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    async def aresult(self, timeout: float | None = None) -> JobResult:
        """``result`` for asyncio: waits on the job's event stream (woken by its ``final``
        event), not by polling; ``JobTimeout`` after ``timeout`` seconds. Rides out a Redis
        outage as ``result`` does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        reach = self._reconnect(deadline, wait=True)
        async with self._astore() as store:
            last_id = await reach.acall(lambda: store.last_event_id(self.id))
            while True:
                found = await reach.acall(lambda: self._apoll_result(store))
                if found is not None:
                    return found
                left = 1.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    status = await reach.acall(lambda: store.status(self.id))
                    state = (status or JobStatus(job_id=self.id)).state
                    raise JobTimeout(f"job {self.id} has not ended after {timeout:g} s (state: {state})")
                last_id = await reach.acall(partial(store.wait_event, self.id, last_id, min(left, 1.0)))

    async def _apoll_result(self, store: AsyncJobStore) -> JobResult | None:
        """The job's result if it has ended; ``JobLostError`` when a job this handle knew is gone."""
        found = await store.result(self.id)
        if found is not None:
            return found
        if await store.status(self.id) is not None:
            self._saw()
            return None
        # Not started, or refused at intake (which ends with a Celery result only): asked of
        # Celery at most once a second, in a thread (it has no asyncio API).
        found = await asyncio.to_thread(self._celery_result)
        if found is None and self._known_at is not None:
            raise await asyncio.to_thread(self._lost)
        return found

    async def aevents(self, *, after: str = "0", timeout: float | None = None) -> AsyncIterator[JobEvent]:
        """``events`` for asyncio: the same typed events in the same order, until ``final``; a
        Redis outage is ridden out the same way, reading on after the last event given."""
        deadline = None if timeout is None else time.monotonic() + timeout
        reach = self._reconnect(deadline, wait=True)
        async with self._astore() as store:
            last_id = await reach.acall(lambda: store.start_id(self.id, after))
            last_type = ""
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                try:
                    async for event in store.events(self.id, last_id=last_id, timeout=left):
                        self._saw()
                        last_id, last_type = event["id"], event["type"]
                        yield read_event(event["id"], event["type"], event["data"], event["at"])
                except CONNECTION_ERRORS as exc:
                    await reach.arecover(exc, store.redis.ping)
                    continue
                break
        early = deadline is None or time.monotonic() < deadline
        if last_type != "final" and early and await asyncio.to_thread(reach.call, self._vanished):
            raise await asyncio.to_thread(self._lost)

    async def aresume(self, max_rounds: int | None = None, *, timeout: float = 30.0) -> JobHandle:
        """``resume`` for asyncio; this handle."""
        return await asyncio.to_thread(self.resume, max_rounds, timeout=timeout)

    async def afork(
        self, round: int, goal: str | None = None, *, max_rounds: int | None = None, timeout: float = 30.0
    ) -> JobHandle:
        """``fork`` for asyncio; the new job's handle."""
        return await asyncio.to_thread(self.fork, round, goal, max_rounds=max_rounds, timeout=timeout)

    async def acancel(self) -> None:
        """``cancel`` for asyncio (the job's flag is set with the asyncio client; its child jobs'
        flags, and the end and revoke of a job no worker has started yet, in a thread)."""
        reach = self._reconnect()
        async with self._astore() as store:
            await reach.acall(lambda: store.request_cancel(self.id))
            # Its descendants' flags (the walk of the children indexes), in a thread.
            await asyncio.to_thread(reach.call, lambda: self._store.request_cancel(self.id))
            status = await reach.acall(lambda: store.status(self.id))
        if status is None:
            try:
                status = await asyncio.to_thread(self.status)
            except UnknownJobError:  # lost or unknown: nothing runs it
                return
        if status.state == "queued":
            await asyncio.to_thread(self._cancel_queued, reach)


def _seconds(expires: Any) -> int:
    """Celery's ``result_expires`` (seconds or a ``timedelta``; unset: a day) in whole seconds."""
    if isinstance(expires, timedelta):
        return max(1, int(expires.total_seconds()))
    return int(expires or 86400)


__all__ = ["JobHandle"]
