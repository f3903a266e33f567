"""The client's operations as flows with no I/O, which ``Client`` and ``AsyncClient`` both drive.

A flow is a generator: it yields the step it needs done and takes the outcome back, and it makes
every decision itself: which request to build, what an answer means, whether a read is asked
again, when a dropped event stream resumes and from which event, when a wait is over. A driver
only does the steps: ``Client`` blocking (``httpx.Client``, ``time.sleep``), ``AsyncClient``
awaited (``httpx.AsyncClient``, ``asyncio.sleep``). The two cannot drift, because there is
nothing in them to drift.

The steps and what the driver sends back:

- ``Send(request)``: the answer (``httpx.Response``, its body read), or ``Broken`` when none came;
- ``Open(request)``: an event stream's answer; a 200 is left open (its body not read), any other
  status is read whole; or ``Broken``;
- ``LINE``: the open stream's next line (``str``), ``None`` at its end, or ``Broken``;
- ``Pause(seconds)``: ``None`` once the time has passed;
- ``Emit(event)``: ``None`` once the caller has the event (only ``events`` emits).

The failure model: every read (a ``GET``, an event stream's opening and its reading alike) follows
the one rule of ``tandem.client.http.retries``: no answer, or a 502/503, is asked again for up to
``retry_for`` seconds from its first failure, anything else is raised as it comes. An event stream
that drops, or stays silent past ``stream_silence``, is opened again after its last event
(``Last-Event-ID``). Writes are sent once. A request that found the client's own pool full
(``Broken`` on ``httpx.PoolTimeout``) is ``PoolExhausted``, which no rule rides out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import httpx

from tandem.client.events import JobEvent
from tandem.client.http import calls
from tandem.client.http.calls import Call, Requests
from tandem.client.http.errors import ClientError, WaitTimeout
from tandem.client.http.models import Job, JobOutcome, JobState, ThreadJob
from tandem.client.http.retries import Patience
from tandem.client.http.sse import SseParser

T = TypeVar("T")


@dataclass(frozen=True)
class Send:
    """Send ``request`` and read its answer."""

    request: httpx.Request


@dataclass(frozen=True)
class Open:
    """Send an event stream's ``request``; keep a 200 open for ``LINE``s."""

    request: httpx.Request


@dataclass(frozen=True)
class Line:
    """Read the open stream's next line."""


LINE = Line()


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class Emit:
    """Hand ``event`` to the caller."""

    event: JobEvent


@dataclass(frozen=True)
class Broken:
    """A request or a stream that got no answer: the transport's ``error``."""

    error: Exception


Step: TypeAlias = Send | Open | Line | Pause | Emit
Outcome: TypeAlias = httpx.Response | Broken | str | None
Flow: TypeAlias = Generator[Step, Outcome, T]


def quietly(flow: Flow[T]) -> Flow[T]:
    """``flow`` with its events kept from the caller, for a flow that follows events for itself."""
    outcome: Outcome = None
    while True:
        try:
            step = flow.send(outcome)
        except StopIteration as end:
            return end.value
        outcome = None if isinstance(step, Emit) else (yield step)


class Flows:
    """Every operation of the API as a flow, for ``requests``' API (see the module docstring);
    ``clock``: monotonic seconds."""

    def __init__(self, requests: Requests, clock: Callable[[], float] = time.monotonic) -> None:
        self.requests = requests
        self.options = requests.options
        self.clock = clock

    def _failure(self, outcome: Outcome, streams: bool) -> ClientError:
        """What a request's ``outcome`` that is not its answer means: the error of its status, the
        client's own full pool (of streams or of calls), or an API that does not answer."""
        if isinstance(outcome, httpx.Response):
            return calls.decode_error(outcome)
        assert isinstance(outcome, Broken), outcome
        if isinstance(outcome.error, httpx.PoolTimeout):
            return self.options.pool_exhausted(streams)
        return calls.unreachable(self.requests.base_url, outcome.error)

    def call(self, call: Call, read: Callable[[httpx.Response], Any] = calls.decode) -> Flow[Any]:
        """Send ``call``; its answer as ``read`` reads it (its JSON by default), or its
        ``ClientError``. A read is asked again through a blip (``retries``), a write never is."""
        patience = Patience(self.options.retry_for if call.safe else 0.0, self.clock)
        request = self.requests.build(call)
        while True:
            outcome = yield Send(request)
            if isinstance(outcome, httpx.Response) and outcome.is_success:
                return read(outcome)
            yield Pause(patience.wait(self._failure(outcome, streams=False)))

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> Flow[str]:
        """``POST /v1/jobs``; the new job's id."""
        return str((yield from self.call(calls.submit_call(spec, fields)))["id"])

    def job(self, job_id: str) -> Flow[Job]:
        """``GET /v1/jobs/{id}``."""
        return Job.model_validate((yield from self.call(Call("GET", calls.job_path(job_id)))))

    def status(self, job_id: str) -> Flow[JobState]:
        """The ``status`` of ``GET /v1/jobs/{id}``."""
        return (yield from self.job(job_id)).status

    def jobs(self, limit: int) -> Flow[list[JobState]]:
        """``GET /v1/jobs``."""
        body = yield from self.call(Call("GET", "/v1/jobs", params={"limit": limit}))
        return [JobState.model_validate(j) for j in body["jobs"]]

    def result(self, job_id: str, timeout: float | None) -> Flow[JobOutcome]:
        """The job's outcome once it ended: read the job, and while it runs follow its events to
        the ``final`` one (no polling); ``WaitTimeout`` after ``timeout`` seconds."""
        deadline = None if timeout is None else self.clock() + timeout
        after = "0"
        while True:
            job = yield from self.job(job_id)
            if job.result is not None and job.status.ended:
                return job.result
            after = yield from quietly(self.events(job_id, after, deadline))
            if deadline is not None and self.clock() >= deadline:
                job = yield from self.job(job_id)
                if job.result is not None and job.status.ended:
                    return job.result
                state = job.status.state
                raise WaitTimeout(f"job {job_id!r} had not ended after {timeout:g} s (it is {state})")

    def events(self, job_id: str, after: str = "0", deadline: float | None = None) -> Flow[str]:
        """Emit the job's events after event ``after`` until its ``final`` one (or ``deadline``,
        monotonic time), resuming a dropped stream after the last event emitted; a stream that
        ends without ``final`` asks whether the job ended. Returns the last event's id."""
        parser = SseParser(last_id=after)
        patience = Patience(self.options.retry_for, self.clock)
        while True:
            opened = yield Open(self.requests.stream(job_id, parser.last_id, deadline, self.clock()))
            if isinstance(opened, httpx.Response) and opened.status_code == 200:
                patience.answered()
                while True:
                    line = yield LINE
                    if not isinstance(line, str):
                        break  # the stream ended, or dropped (``Broken``)
                    event = parser.feed(line)
                    if event is not None:
                        yield Emit(event)
                        if event.type == "final":
                            return parser.last_id
                    elif deadline is not None and self.clock() >= deadline:
                        return parser.last_id  # a heartbeat after the deadline
                if line is None:  # ended without its final event: ended, or cut where a frame ended
                    if (yield from self.job(job_id)).status.ended:
                        return parser.last_id  # every event was read (it opened after the final one)
                    continue
                opened = line
            if deadline is not None and self.clock() >= deadline:
                return parser.last_id
            yield Pause(patience.wait(self._failure(opened, streams=True)))

    def artifact(self, job_id: str, handle: str) -> Flow[str]:
        """``GET /v1/jobs/{id}/artifacts/{handle}``: the artifact's whole text."""
        call = Call("GET", calls.artifact_path(job_id, handle))
        return str((yield from self.call(call, calls.decode_text)))

    def cancel(self, job_id: str) -> Flow[JobState]:
        """``POST /v1/jobs/{id}/cancel``; the job's state."""
        body = yield from self.call(Call("POST", calls.job_path(job_id, "/cancel")))
        return JobState.model_validate(body["status"])

    def decide(
        self,
        job_id: str,
        decisions: list[dict[str, Any]] | bool,
        pause_id: str | None,
        idempotency_key: str | None,
    ) -> Flow[list[dict[str, Any]]]:
        """``POST /v1/jobs/{id}/decisions`` for pause ``pause_id`` (``None``: the job's current
        pause, read first and named); the pause's decisions so far."""
        if pause_id is None:
            pause_id = calls.current_pause((yield from self.call(Call("GET", calls.job_path(job_id)))))
        body = yield from self.call(calls.decide_call(job_id, decisions, pause_id, idempotency_key))
        return list(body["decisions"])

    def answer(
        self, job_id: str, answer: Any, pause_id: str | None, idempotency_key: str | None
    ) -> Flow[Any]:
        """``POST /v1/jobs/{id}/answers`` for pause ``pause_id`` (``None``: the question the job
        waits on, read first and named); the answer as stored."""
        if pause_id is None:
            pause_id = calls.current_question((yield from self.call(Call("GET", calls.job_path(job_id)))))
        body = yield from self.call(calls.answer_call(job_id, answer, pause_id, idempotency_key))
        return body["answer"]

    def resume(self, job_id: str, max_rounds: int | None) -> Flow[JobState]:
        """``POST /v1/jobs/{id}/resume``; the job's state."""
        body = yield from self.call(calls.resume_call(job_id, max_rounds))
        return JobState.model_validate(body["status"])

    def fork(self, job_id: str, round_no: int, goal: str | None, max_rounds: int | None) -> Flow[str]:
        """``POST /v1/jobs/{id}/fork``; the new job's id."""
        return str((yield from self.call(calls.fork_call(job_id, round_no, goal, max_rounds)))["id"])

    def message(self, job_id: str, text: str, idempotency_key: str | None) -> Flow[str]:
        """``POST /v1/jobs/{id}/messages``; the message's id."""
        body = yield from self.call(calls.message_call(job_id, text, idempotency_key))
        return str(body["message_id"])

    def follow_up(self, job_id: str, goal: str, idempotency_key: str | None) -> Flow[tuple[str, str]]:
        """``POST /v1/jobs/{id}/follow-up``; the new job's id and its thread's."""
        body = yield from self.call(calls.follow_up_call(job_id, goal, idempotency_key))
        return str(body["id"]), str(body.get("thread_id") or job_id)

    def thread(self, thread_id: str) -> Flow[list[ThreadJob]]:
        """``GET /v1/threads/{id}``."""
        body = yield from self.call(Call("GET", calls.thread_path(thread_id)))
        return [ThreadJob.model_validate(j) for j in body["jobs"]]

    def health(self) -> Flow[dict[str, Any]]:
        """``GET /healthz``."""
        return dict((yield from self.call(Call("GET", "/healthz"))))
