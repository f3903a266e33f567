"""``AsyncClient``: tandem's HTTP API from asyncio code (see the package docstring)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

import httpx

from tandem.client.http import calls
from tandem.client.http.calls import Call
from tandem.client.http.errors import ClientError, Unavailable, WaitTimeout
from tandem.client.http.models import Event, Job, JobOutcome, JobState, ThreadJob
from tandem.client.http.sse import SseParser, stream_headers


class AsyncClient:
    """An asyncio client of ``tandem api`` at ``base_url`` (``token``: one of the API's
    ``TANDEM_API_TOKENS``, if it wants one).

    Reads ride out a blip: a read that gets no answer, or a 502/503, is asked again for up to
    ``retry_for`` seconds; an event stream that drops resumes after its last event (the API's
    ``Last-Event-ID``), for up to ``retry_for`` seconds without an answer. Writes (submit, cancel,
    decisions, resume, fork) are sent once: their errors are raised as they come.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_for: float = 10.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retry_for = retry_for
        self._http = http or httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    # -- jobs ------------------------------------------------------------------------------

    async def submit(self, spec: Mapping[str, Any] | None = None, **fields: Any) -> str:
        """Submit a job (a job spec: ``goal``, ``reasoner``, ``max_rounds``, ...); its id."""
        return str((await self._send(calls.submit_call(spec, fields)))["id"])

    async def job(self, job_id: str) -> Job:
        """The job: its state, its outcome once it ended, the calls awaiting a decision."""
        return Job.model_validate(await self._send(Call("GET", calls.job_path(job_id))))

    async def status(self, job_id: str) -> JobState:
        """Where the job stands."""
        return (await self.job(job_id)).status

    async def jobs(self, limit: int = 50) -> list[JobState]:
        """The recent jobs, newest first (at most 200)."""
        body = await self._send(Call("GET", "/v1/jobs", params={"limit": limit}))
        return [JobState.model_validate(j) for j in body["jobs"]]

    async def result(self, job_id: str, timeout: float | None = None) -> JobOutcome:
        """Wait for the job to end (following its events, not polling) and return its outcome;
        ``WaitTimeout`` after ``timeout`` seconds (``None``: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        after = "0"
        while True:
            job = await self.job(job_id)
            if job.result is not None and job.status.ended:
                return job.result
            async for event in self._follow(job_id, after, deadline):
                after = event.id
                if event.type == "final":
                    break
            if deadline is not None and time.monotonic() >= deadline:
                job = await self.job(job_id)
                if job.result is not None and job.status.ended:
                    return job.result
                state = job.status.state
                raise WaitTimeout(f"job {job_id!r} had not ended after {timeout:g} s (it is {state})")

    def events(self, job_id: str, after: str = "0") -> AsyncIterator[Event]:
        """The job's events after event id ``after`` (``"0"``: all of them), as they come, until
        its ``final`` event; a dropped stream is resumed after the last event seen."""
        return self._follow(job_id, after, None)

    async def cancel(self, job_id: str) -> JobState:
        """Ask the job to stop; ``Conflict`` once it has ended."""
        return JobState.model_validate(
            (await self._send(Call("POST", calls.job_path(job_id, "/cancel"))))["status"]
        )

    async def decide(
        self,
        job_id: str,
        decisions: list[dict[str, Any]] | bool,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Decide the tool calls of pause ``pause_id``: ``[{"index": 1, "approve": True}, {"index": 2,
        "approve": False, "reason": "..."}]`` (``"args"`` edits a call), or ``True``/``False`` for
        every undecided call; the pause's decisions so far. Without ``pause_id`` the job's current
        pause is read first and named, so a decision that arrives after it ended is refused.
        ``idempotency_key`` (a fresh one if not given): the same key sent again gets the first
        answer. ``StalePauseError`` when the pause is not current, ``Conflict`` when refused
        otherwise (nothing changed); ``Unavailable`` (504) when no worker answered: the decision
        was withdrawn and never applies."""
        if pause_id is None:
            pause_id = calls.current_pause(await self._send(Call("GET", calls.job_path(job_id))))
        body = await self._send(calls.decide_call(job_id, decisions, pause_id, idempotency_key))
        return list(body["decisions"])

    async def answer(
        self, job_id: str, answer: Any, *, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> Any:
        """Answer the question job ``job_id`` waits on (pause ``pause_id``; ``None``: the current
        one, read first and named) with ``answer``, a JSON value that fits the question's
        ``answer_schema`` (text for a question without one); the answer as stored.
        ``idempotency_key`` (a fresh one if not given): the same key sent again gets the first
        reply. ``StalePauseError`` when the pause is not current, ``InvalidRequest`` (422
        ``invalid_answer``) when the answer does not fit (the message names the field),
        ``Conflict`` when refused otherwise (nothing changed); ``Unavailable`` (504) when no worker
        answered: the answer was withdrawn and never applies."""
        if pause_id is None:
            pause_id = calls.current_question(await self._send(Call("GET", calls.job_path(job_id))))
        return (await self._send(calls.answer_call(job_id, answer, pause_id, idempotency_key)))["answer"]

    async def approve(
        self, job_id: str, *indices: int, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Approve the calls ``indices`` (none: every undecided call) of pause ``pause_id`` (``None``:
        the current one)."""
        decisions = calls.decisions_for(indices, True, None)
        return await self.decide(job_id, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    async def reject(
        self,
        job_id: str,
        *indices: int,
        reason: str | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Reject the calls ``indices`` (none: every undecided call) of pause ``pause_id`` (``None``:
        the current one), telling the model ``reason``."""
        decisions = calls.decisions_for(indices, False, reason)
        return await self.decide(job_id, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    async def resume(self, job_id: str, max_rounds: int | None = None) -> JobState:
        """Go on with a failed, cancelled or truncated job from its last stored step."""
        return JobState.model_validate((await self._send(calls.resume_call(job_id, max_rounds)))["status"])

    async def fork(
        self, job_id: str, round_no: int, goal: str | None = None, max_rounds: int | None = None
    ) -> str:
        """Start a new job from the job's rounds ``0..round_no-1`` (a new goal if given); its id."""
        return str((await self._send(calls.fork_call(job_id, round_no, goal, max_rounds)))["id"])

    async def message(self, job_id: str, text: str, *, idempotency_key: str | None = None) -> str:
        """Send ``text`` into the running job as a message from the person; its ``message_id``.
        The job's leading model reads it at the start of its next round, once. ``idempotency_key``
        (a fresh one if not given): the same key sent again gets the first answer and adds
        nothing. ``Conflict`` (409 ``job_ended``) once the job has ended; ``Unavailable`` (504)
        when no worker took it in time: it was withdrawn and never reaches the job."""
        return str((await self._send(calls.message_call(job_id, text, idempotency_key)))["message_id"])

    async def follow_up(self, job_id: str, goal: str, *, idempotency_key: str | None = None) -> str:
        """Start a new job in the ended job's thread with ``goal``; its id. It reads the thread so
        far (each earlier job's goal, the person's messages and its answer). ``Conflict`` (409
        ``job_state``) while the job runs."""
        return str((await self._send(calls.follow_up_call(job_id, goal, idempotency_key)))["id"])

    async def thread(self, thread_id: str) -> list[ThreadJob]:
        """The jobs of thread ``thread_id`` (a first job's id, or a ``thread_id`` a spec named), in
        order; ``NotFound`` when none of them is the token's tenant's."""
        body = await self._send(Call("GET", calls.thread_path(thread_id)))
        return [ThreadJob.model_validate(j) for j in body["jobs"]]

    async def health(self) -> dict[str, Any]:
        """The API's ``/healthz``."""
        return dict(await self._send(Call("GET", "/healthz")))

    # -- sending ---------------------------------------------------------------------------

    async def _send(self, call: Call) -> Any:
        give_up = time.monotonic() + (self.retry_for if call.safe else 0.0)
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
                if not (call.safe and response.status_code in calls.RETRY_STATUSES):
                    return calls.decode(response)
                failure: ClientError = calls.decode_error(response)
            except httpx.TransportError as exc:
                failure = calls.unreachable(self.base_url, exc)
            if time.monotonic() >= give_up:
                raise failure
            await asyncio.sleep(min(1.0, failure.retry_after or 0.5))

    async def _follow(self, job_id: str, after: str, deadline: float | None) -> AsyncIterator[Event]:
        """The events after ``after`` until the ``final`` one (or ``deadline``), resuming a
        dropped stream; a stream that ends without ``final`` checks whether the job ended."""
        parser = SseParser(last_id=after)
        path = calls.job_path(job_id, "/events")
        down_since: float | None = None
        while True:
            try:
                timeout = calls.read_timeout(deadline, time.monotonic())
                async with self._http.stream(
                    "GET",
                    self.base_url + path,
                    headers=stream_headers(self.token, parser.last_id),
                    timeout=timeout,
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise calls.decode_error(response)
                    down_since = None
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                            if event.type == "final":
                                return
                        elif deadline is not None and time.monotonic() >= deadline:
                            return  # a heartbeat after the deadline
                if (await self.job(job_id)).status.ended:
                    return  # every event was read (the stream opened after the final event)
            except (httpx.TransportError, Unavailable) as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    return
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > self.retry_for:
                    raise calls.unreachable(self.base_url, exc) from None
                await asyncio.sleep(0.5)
