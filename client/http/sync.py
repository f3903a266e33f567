"""``Client``: tandem's HTTP API from blocking code, a driver of ``tandem.client.http.flows``."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from tandem.client.events import JobEvent
from tandem.client.http import calls
from tandem.client.http.calls import JobRef, Requests, job_id_of
from tandem.client.http.flows import Broken, Emit, Flow, Flows, Open, Outcome, Pause, Send, Step
from tandem.client.http.handles import RemoteJob
from tandem.client.http.models import Job, JobOutcome, JobState, ThreadJob
from tandem.client.http.options import STREAM_SILENCE, ClientOptions

T = TypeVar("T")


class _Stream:
    """The event stream a flow has open, if any."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.lines: Iterator[str] = iter(())

    def close(self) -> None:
        if self.response is not None:
            self.response.close()
        self.response, self.lines = None, iter(())


class Client:
    """A blocking client of ``tandem api`` at ``base_url`` (``http://`` or ``https://``), sending
    ``token`` (one of the API's ``TANDEM_API_TOKENS``) as ``Authorization: Bearer <token>``.

    ``submit`` gives a ``RemoteJob``: the job's ``id`` and these methods with the id filled in.
    Every method that names a job takes its id or its handle.

    Reads ride out a blip: a read that gets no answer, or a 502/503, is asked again for up to
    ``retry_for`` seconds; an event stream that drops, or stays silent (no event, no heartbeat)
    for ``stream_silence`` seconds, resumes after its last event (the API's ``Last-Event-ID``),
    for up to ``retry_for`` seconds without an answer. Writes (submit, cancel, decisions, answers,
    messages, resume, fork, follow-up) are sent once: their errors are raised as they come.
    ``timeout``: seconds a request may take. The client holds up to ``max_streams`` event streams
    open at once (what the API lets one token hold, ``TANDEM_API_MAX_STREAMS``, 100 by default)
    and up to ``max_calls`` other requests, each pool its own, so open streams never hold up a
    call; a request that finds its pool full for ``timeout`` seconds raises ``PoolExhausted``
    (see ``tandem.client.http.options``). ``transport``: an httpx transport to send through
    (``httpx.MockTransport`` in tests); the requests are built here either way.
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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        options = ClientOptions(timeout, retry_for, stream_silence, max_streams, max_calls)
        self._flows = Flows(Requests(base_url, token, options))
        self._calls = httpx.Client(transport=transport, limits=options.limits(streams=False))
        self._streams = httpx.Client(transport=transport, limits=options.limits(streams=True))

    @property
    def base_url(self) -> str:
        """The API's URL."""
        return self._flows.requests.base_url

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (every event stream it left open, too)."""
        self._calls.close()
        self._streams.close()

    # -- jobs ------------------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any] | None = None, **fields: Any) -> RemoteJob:
        """Submit a job (a job spec: ``goal``, ``reasoner``, ``max_rounds``, ...; ``fields`` are
        merged over ``spec``); its handle."""
        job_id = self._run(self._flows.submit(spec, fields))
        thread = {**(spec or {}), **fields}.get("thread_id")
        return RemoteJob(self, job_id, thread_id=thread if isinstance(thread, str) else None)

    def job(self, job: JobRef) -> Job:
        """The job: its state, its outcome once it ended, the calls awaiting a decision."""
        return self._run(self._flows.job(job_id_of(job)))

    def status(self, job: JobRef) -> JobState:
        """Where the job stands."""
        return self._run(self._flows.status(job_id_of(job)))

    def jobs(self, limit: int = 50) -> list[JobState]:
        """The recent jobs, newest first (at most 200)."""
        return self._run(self._flows.jobs(limit))

    def result(self, job: JobRef, timeout: float | None = None) -> JobOutcome:
        """Wait for the job to end (following its events, not polling) and return its outcome;
        ``WaitTimeout`` after ``timeout`` seconds (``None``: no limit)."""
        return self._run(self._flows.result(job_id_of(job), timeout))

    def events(self, job: JobRef, after: str = "0") -> Iterator[JobEvent]:
        """The job's events after event id ``after`` (``"0"``: all of them), as they come, until
        its ``final`` event: the typed models of ``tandem.client.events`` (``JobHandle.events()``'s).
        A dropped stream is resumed after the last event given."""
        return self._iterate(self._flows.events(job_id_of(job), after))

    def artifact(self, job: JobRef, handle: str) -> str:
        """The whole text of the job's artifact ``handle`` (a tool output over
        ``TANDEM_ARTIFACT_BYTES``; a ``tool_result`` event's ``artifact.handle``); ``NotFound`` for
        an unknown handle, or a job this token may not see."""
        return self._run(self._flows.artifact(job_id_of(job), handle))

    def cancel(self, job: JobRef) -> JobState:
        """Ask the job to stop; ``Conflict`` once it has ended."""
        return self._run(self._flows.cancel(job_id_of(job)))

    def decide(
        self,
        job: JobRef,
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
        return self._run(self._flows.decide(job_id_of(job), decisions, pause_id, idempotency_key))

    def approve(
        self, job: JobRef, *indices: int, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Approve the calls ``indices`` (none: every undecided call) of pause ``pause_id`` (``None``:
        the current one)."""
        decisions = calls.decisions_for(indices, True, None)
        return self.decide(job, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    def reject(
        self,
        job: JobRef,
        *indices: int,
        reason: str | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Reject the calls ``indices`` (none: every undecided call) of pause ``pause_id`` (``None``:
        the current one), telling the model ``reason``."""
        decisions = calls.decisions_for(indices, False, reason)
        return self.decide(job, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    def answer(
        self, job: JobRef, answer: Any, *, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> Any:
        """Answer the question the job waits on (pause ``pause_id``; ``None``: the current one,
        read first and named) with ``answer``, a JSON value that fits the question's
        ``answer_schema`` (text for a question without one); the answer as stored.
        ``idempotency_key`` (a fresh one if not given): the same key sent again gets the first
        reply. ``StalePauseError`` when the pause is not current, ``InvalidRequest`` (422
        ``invalid_answer``) when the answer does not fit (the message names the field),
        ``Conflict`` when refused otherwise (nothing changed); ``Unavailable`` (504) when no worker
        answered: the answer was withdrawn and never applies."""
        return self._run(self._flows.answer(job_id_of(job), answer, pause_id, idempotency_key))

    def resume(self, job: JobRef, max_rounds: int | None = None) -> JobState:
        """Go on with a failed, cancelled or truncated job from its last stored step."""
        return self._run(self._flows.resume(job_id_of(job), max_rounds))

    def fork(
        self, job: JobRef, round_no: int, goal: str | None = None, max_rounds: int | None = None
    ) -> RemoteJob:
        """Start a new job from the job's rounds ``0..round_no-1`` (a new goal if given); its handle."""
        return RemoteJob(self, self._run(self._flows.fork(job_id_of(job), round_no, goal, max_rounds)))

    def message(self, job: JobRef, text: str, *, idempotency_key: str | None = None) -> str:
        """Send ``text`` into the running job as a message from the person; its ``message_id``.
        The job's leading model reads it at the start of its next round, once. ``idempotency_key``
        (a fresh one if not given): the same key sent again gets the first answer and adds
        nothing. ``Conflict`` (409 ``job_ended``) once the job has ended; ``Unavailable`` (504)
        when no worker took it in time: it was withdrawn and never reaches the job."""
        return self._run(self._flows.message(job_id_of(job), text, idempotency_key))

    def follow_up(self, job: JobRef, goal: str, *, idempotency_key: str | None = None) -> RemoteJob:
        """Start a new job in the ended job's thread with ``goal``; its handle. It reads the thread
        so far (each earlier job's goal, the person's messages and its answer). ``Conflict`` (409
        ``job_state``) while the job runs."""
        new_id, thread_id = self._run(self._flows.follow_up(job_id_of(job), goal, idempotency_key))
        return RemoteJob(self, new_id, thread_id=thread_id)

    def thread(self, thread_id: str) -> list[ThreadJob]:
        """The jobs of thread ``thread_id`` (a first job's id, or a ``thread_id`` a spec named), in
        order; ``NotFound`` when none of them is the token's tenant's."""
        return self._run(self._flows.thread(thread_id))

    def health(self) -> dict[str, Any]:
        """The API's ``/healthz``."""
        return self._run(self._flows.health())

    # -- driving the flows -------------------------------------------------------------------

    def _do(self, step: Step, stream: _Stream) -> Outcome:
        """One step of a flow, blocking (``Emit`` is the caller's)."""
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            return None
        try:
            if isinstance(step, Send):
                return self._calls.send(step.request)
            if isinstance(step, Open):
                stream.close()
                response = self._streams.send(step.request, stream=True)
                if response.status_code != 200:
                    response.read()
                    response.close()
                    return response
                stream.response, stream.lines = response, response.iter_lines()
                return response
            return next(stream.lines, None)
        except httpx.TransportError as exc:
            stream.close()
            return Broken(exc)

    def _drive(self, flow: Flow[T]) -> Generator[JobEvent, None, T]:
        """Do ``flow``'s steps; its events are yielded, its value returned."""
        stream = _Stream()
        outcome: Outcome = None
        try:
            while True:
                try:
                    step = flow.send(outcome)
                except StopIteration as end:
                    return end.value
                if isinstance(step, Emit):
                    yield step.event
                    outcome = None
                else:
                    outcome = self._do(step, stream)
        finally:
            stream.close()
            flow.close()

    def _run(self, flow: Flow[T]) -> T:
        drive = self._drive(flow)
        while True:
            try:
                next(drive)
            except StopIteration as end:
                return end.value

    def _iterate(self, flow: Flow[Any]) -> Iterator[JobEvent]:
        yield from self._drive(flow)
