"""``AsyncClient``: tandem's HTTP API from asyncio code, a driver of ``tandem.client.http.flows``.

Its methods are ``Client``'s, awaited (``events`` is an async iterator), with the same requests,
answers, errors and retries: both drive the same flows, and only the sending and the waiting are
this module's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from tandem.client.events import JobEvent
from tandem.client.http import calls
from tandem.client.http.calls import JobRef, Requests, job_id_of
from tandem.client.http.flows import Broken, Emit, Flow, Flows, Open, Outcome, Pause, Send, Step
from tandem.client.http.handles import AsyncRemoteJob
from tandem.client.http.models import Job, JobOutcome, JobState, ThreadJob
from tandem.client.http.options import STREAM_SILENCE, ClientOptions

T = TypeVar("T")


class _Stream:
    """The event stream a flow has open, if any."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.lines: AsyncIterator[str] | None = None

    async def aclose(self) -> None:
        if self.response is not None:
            await self.response.aclose()
        self.response, self.lines = None, None


class AsyncClient:
    """An asyncio client of ``tandem api`` at ``base_url``, sending ``token`` as a bearer token:
    ``Client``'s methods, awaited, and ``submit`` gives an ``AsyncRemoteJob`` (see ``Client``).
    ``transport``: an httpx asyncio transport to send through (``httpx.MockTransport`` in tests).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_for: float = 10.0,
        stream_silence: float = STREAM_SILENCE,
        max_streams: int = 100,
        max_calls: int = 100,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        options = ClientOptions(timeout, retry_for, stream_silence, max_streams, max_calls)
        self._flows = Flows(Requests(base_url, token, options))
        self._calls = httpx.AsyncClient(transport=transport, limits=options.limits(streams=False))
        self._streams = httpx.AsyncClient(transport=transport, limits=options.limits(streams=True))

    @property
    def base_url(self) -> str:
        """The API's URL."""
        return self._flows.requests.base_url

    def __repr__(self) -> str:
        return f"AsyncClient({self.base_url!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (every event stream it left open, too)."""
        await self._calls.aclose()
        await self._streams.aclose()

    # -- jobs ------------------------------------------------------------------------------

    async def submit(self, spec: Mapping[str, Any] | None = None, **fields: Any) -> AsyncRemoteJob:
        """``Client.submit``, awaited; the job's ``AsyncRemoteJob``."""
        job_id = await self._run(self._flows.submit(spec, fields))
        thread = {**(spec or {}), **fields}.get("thread_id")
        return AsyncRemoteJob(self, job_id, thread_id=thread if isinstance(thread, str) else None)

    async def job(self, job: JobRef) -> Job:
        """``Client.job``, awaited."""
        return await self._run(self._flows.job(job_id_of(job)))

    async def status(self, job: JobRef) -> JobState:
        """``Client.status``, awaited."""
        return await self._run(self._flows.status(job_id_of(job)))

    async def jobs(self, limit: int = 50) -> list[JobState]:
        """``Client.jobs``, awaited."""
        return await self._run(self._flows.jobs(limit))

    async def result(self, job: JobRef, timeout: float | None = None) -> JobOutcome:
        """``Client.result``, awaited."""
        return await self._run(self._flows.result(job_id_of(job), timeout))

    def events(self, job: JobRef, after: str = "0") -> AsyncIterator[JobEvent]:
        """``Client.events``, as an async iterator (``async for event in api.events(job)``)."""
        return self._iterate(self._flows.events(job_id_of(job), after))

    async def artifact(self, job: JobRef, handle: str) -> str:
        """``Client.artifact``, awaited."""
        return await self._run(self._flows.artifact(job_id_of(job), handle))

    async def cancel(self, job: JobRef) -> JobState:
        """``Client.cancel``, awaited."""
        return await self._run(self._flows.cancel(job_id_of(job)))

    async def decide(
        self,
        job: JobRef,
        decisions: list[dict[str, Any]] | bool,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """``Client.decide``, awaited."""
        return await self._run(self._flows.decide(job_id_of(job), decisions, pause_id, idempotency_key))

    async def approve(
        self, job: JobRef, *indices: int, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """``Client.approve``, awaited."""
        decisions = calls.decisions_for(indices, True, None)
        return await self.decide(job, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    async def reject(
        self,
        job: JobRef,
        *indices: int,
        reason: str | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """``Client.reject``, awaited."""
        decisions = calls.decisions_for(indices, False, reason)
        return await self.decide(job, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    async def answer(
        self, job: JobRef, answer: Any, *, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> Any:
        """``Client.answer``, awaited."""
        return await self._run(self._flows.answer(job_id_of(job), answer, pause_id, idempotency_key))

    async def resume(self, job: JobRef, max_rounds: int | None = None) -> JobState:
        """``Client.resume``, awaited."""
        return await self._run(self._flows.resume(job_id_of(job), max_rounds))

    async def fork(
        self, job: JobRef, round_no: int, goal: str | None = None, max_rounds: int | None = None
    ) -> AsyncRemoteJob:
        """``Client.fork``, awaited; the new job's ``AsyncRemoteJob``."""
        new_id = await self._run(self._flows.fork(job_id_of(job), round_no, goal, max_rounds))
        return AsyncRemoteJob(self, new_id)

    async def message(self, job: JobRef, text: str, *, idempotency_key: str | None = None) -> str:
        """``Client.message``, awaited."""
        return await self._run(self._flows.message(job_id_of(job), text, idempotency_key))

    async def follow_up(
        self, job: JobRef, goal: str, *, idempotency_key: str | None = None
    ) -> AsyncRemoteJob:
        """``Client.follow_up``, awaited; the new job's ``AsyncRemoteJob``."""
        new_id, thread_id = await self._run(self._flows.follow_up(job_id_of(job), goal, idempotency_key))
        return AsyncRemoteJob(self, new_id, thread_id=thread_id)

    async def thread(self, thread_id: str) -> list[ThreadJob]:
        """``Client.thread``, awaited."""
        return await self._run(self._flows.thread(thread_id))

    async def health(self) -> dict[str, Any]:
        """``Client.health``, awaited."""
        return await self._run(self._flows.health())

    # -- driving the flows -------------------------------------------------------------------

    async def _do(self, step: Step, stream: _Stream) -> Outcome:
        """One step of a flow, awaited (``Emit`` is the caller's)."""
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
            return None
        try:
            if isinstance(step, Send):
                return await self._calls.send(step.request)
            if isinstance(step, Open):
                await stream.aclose()
                response = await self._streams.send(step.request, stream=True)
                if response.status_code != 200:
                    await response.aread()
                    await response.aclose()
                    return response
                stream.response, stream.lines = response, response.aiter_lines()
                return response
            return None if stream.lines is None else await anext(stream.lines, None)
        except httpx.TransportError as exc:
            await stream.aclose()
            return Broken(exc)

    async def _run(self, flow: Flow[T]) -> T:
        """Do ``flow``'s steps; its value (a flow run here emits no events)."""
        stream = _Stream()
        outcome: Outcome = None
        try:
            while True:
                try:
                    step = flow.send(outcome)
                except StopIteration as end:
                    return end.value
                outcome = None if isinstance(step, Emit) else await self._do(step, stream)
        finally:
            await stream.aclose()
            flow.close()

    async def _iterate(self, flow: Flow[Any]) -> AsyncIterator[JobEvent]:
        """Do ``flow``'s steps; its events are yielded."""
        stream = _Stream()
        outcome: Outcome = None
        try:
            while True:
                try:
                    step = flow.send(outcome)
                except StopIteration:
                    return
                if isinstance(step, Emit):
                    yield step.event
                    outcome = None
                else:
                    outcome = await self._do(step, stream)
        finally:
            await stream.aclose()
            flow.close()
