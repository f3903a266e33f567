"""The one rule of reads (``tandem.client.http.retries``), checked on every read of the flows, event
streams included, with no I/O at all: each flow is driven here by hand, on a clock of its own, and
gets the outcomes a link, a proxy or the API would give.

Every read rides out no answer, a silent or dropped stream, a 502 and a 503, for ``retry_for``
seconds; every other answer (429, 504, 404, 500, the client's own full pool) is raised after one
request; a write is sent once whatever it gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tandem.client.http import (
    ClientError,
    ConnectionFailed,
    NotFound,
    PoolExhausted,
    RateLimited,
    ServerError,
    Unavailable,
)
from tandem.client.http.calls import Requests
from tandem.client.http.flows import LINE, Broken, Emit, Flow, Flows, Open, Outcome, Pause, Send
from tandem.client.http.options import ClientOptions
from tandem.client.http.retries import Patience, rides_out

BASE = "http://api.test"
RETRY_FOR = 5.0
ENDED = {"id": "j1", "status": {"job_id": "j1", "state": "completed"}}
BODIES: dict[str, Any] = {
    "/v1/jobs/j1": {
        **ENDED,
        "status": {"job_id": "j1", "state": "awaiting_approval", "pause_id": "p1"},
        "approval": {"pause_id": "p1"},
    },
    "/v1/jobs/done": {**ENDED, "result": {"job_id": "done", "status": "completed", "deliverable": "42"}},
    "/v1/jobs": {"jobs": [{"job_id": "j1", "state": "queued"}]},
    "/v1/threads/t0": {"jobs": [{"job_id": "j1"}]},
    "/healthz": {"ok": True},
    "/v1/jobs/j1/decisions": {"decisions": [{"index": 1, "approve": True}]},
}
EVENTS = [
    {"id": "1-0", "type": "round_started", "at": 1.0, "round": 0, "max_rounds": 3},
    {"id": "2-0", "type": "final", "at": 2.0, "job_id": "j1", "status": "completed", "deliverable": "42"},
]
STREAM = [line for e in EVENTS for line in (f"id: {e['id']}", f"data: {json.dumps(e)}", "")]


def error(status: int, code: str, retry_after: str | None = None) -> httpx.Response:
    body = {"error": {"code": code, "message": "a test answer"}}
    return httpx.Response(status, json=body, headers={"Retry-After": retry_after} if retry_after else {})


RIDDEN: dict[str, Callable[[], Outcome]] = {
    "502": lambda: httpx.Response(502, text="<html>502 Bad Gateway</html>"),
    "503": lambda: error(503, "redis_unavailable", "0.25"),
    "refused": lambda: Broken(httpx.ConnectError("connection refused")),
    "silent": lambda: Broken(httpx.ReadTimeout("timed out")),
    "cut": lambda: Broken(httpx.RemoteProtocolError("peer closed connection")),
}
"""What a read rides out: a load balancer's 502, the API's 503, and no answer at all."""

KEPT: dict[str, tuple[Callable[[], Outcome], type[ClientError]]] = {
    "429": (lambda: error(429, "too_many_streams", "5"), RateLimited),
    "504": (lambda: error(504, "no_worker_answered"), Unavailable),
    "404": (lambda: error(404, "unknown_job"), NotFound),
    "500": (lambda: httpx.Response(500, text="<html>oops</html>"), ServerError),
    "pool": (lambda: Broken(httpx.PoolTimeout("no free connection")), PoolExhausted),
}
"""What a read raises at once, and as what."""

READS: dict[str, tuple[Callable[[Flows], Flow[Any]], Callable[[Any], bool]]] = {
    "job": (lambda f: f.job("j1"), lambda job: job.id == "j1"),
    "status": (lambda f: f.status("j1"), lambda state: state.state == "awaiting_approval"),
    "jobs": (lambda f: f.jobs(5), lambda jobs: jobs[0].job_id == "j1"),
    "thread": (lambda f: f.thread("t0"), lambda jobs: jobs[0].job_id == "j1"),
    "health": (lambda f: f.health(), lambda health: health == {"ok": True}),
    "result": (lambda f: f.result("done", None), lambda outcome: outcome.deliverable == "42"),
    "approve's read of the pause": (
        lambda f: f.decide("j1", True, None, "k"),
        lambda decisions: decisions == [{"index": 1, "approve": True}],
    ),
    "events": (lambda f: f.events("j1"), lambda last: last == "2-0"),
}
"""Every read of the flows (``events`` opens a stream; ``approve`` reads the pause before it writes)."""


class Link:
    """Drives one flow by hand: the first ``faults`` requests get ``fault()``, every later one its
    answer (``BODIES``; an event stream: 200 and ``STREAM``); a stream whose ``drops`` is set
    answers 200 and then drops that way before its first line, ``faults`` times."""

    def __init__(self, fault: Callable[[], Outcome], faults: int, *, drops: bool = False) -> None:
        self.fault, self.faults, self.drops = fault, faults, drops
        self.now = 0.0
        self.sent: list[httpx.Request] = []
        self.pauses: list[float] = []
        self.emitted: list[str] = []
        self.lines: Iterator[Outcome] = iter(())

    def flows(self, retry_for: float = RETRY_FOR) -> Flows:
        return Flows(Requests(BASE, "a-token", ClientOptions(retry_for=retry_for)), clock=lambda: self.now)

    def answer(self, request: httpx.Request) -> Outcome:
        self.sent.append(request)
        failing = len(self.sent) <= self.faults
        if request.url.path.endswith("/events"):
            if failing and self.drops:
                self.lines = iter([self.fault()])
                return httpx.Response(200)
            self.lines = iter(STREAM)
        if failing:
            return self.fault()
        if request.url.path.endswith("/events"):
            return httpx.Response(200)
        return httpx.Response(200, json=BODIES[request.url.path])

    def run(self, flow: Flow[Any]) -> Any:
        outcome: Outcome = None
        while True:
            try:
                step = flow.send(outcome)
            except StopIteration as end:
                return end.value
            outcome = None
            if isinstance(step, Pause):
                self.pauses.append(step.seconds)
                self.now += step.seconds
            elif isinstance(step, Emit):
                self.emitted.append(step.event.id)
            elif isinstance(step, Send | Open):
                outcome = self.answer(step.request)
            else:
                assert step is LINE, step
                outcome = next(self.lines, None)


def paths(link: Link) -> list[str]:
    return [f"{r.method} {r.url.path}" for r in link.sent]


@pytest.mark.parametrize("fault", RIDDEN)
@pytest.mark.parametrize("read", READS)
def test_every_read_rides_out_no_answer_a_502_and_a_503(read: str, fault: str) -> None:
    start, check = READS[read]
    link = Link(RIDDEN[fault], faults=2)
    got = link.run(start(link.flows()))
    assert check(got), got
    first = paths(link)[0]
    assert paths(link)[:3] == [first] * 3 and first.startswith("GET ")  # asked twice more, the same
    assert len(link.pauses) == 2 and sum(link.pauses) < RETRY_FOR
    if read == "events":
        assert link.emitted == ["1-0", "2-0"]


@pytest.mark.parametrize("fault", ["silent", "cut", "refused"])
def test_a_stream_that_drops_after_its_answer_is_opened_again(fault: str) -> None:
    link = Link(RIDDEN[fault], faults=2, drops=True)
    assert link.run(link.flows().events("j1")) == "2-0"
    assert paths(link) == ["GET /v1/jobs/j1/events"] * 3 and link.emitted == ["1-0", "2-0"]


@pytest.mark.parametrize("answer", KEPT)
@pytest.mark.parametrize("read", READS)
def test_every_other_answer_to_a_read_is_raised_after_one_request(read: str, answer: str) -> None:
    fault, kind = KEPT[answer]
    link = Link(fault, faults=1)
    with pytest.raises(kind):
        link.run(READS[read][0](link.flows()))
    assert len(link.sent) == 1 and link.pauses == []


@pytest.mark.parametrize("fault", ["503", "refused"])
@pytest.mark.parametrize("read", READS)
def test_a_read_gives_up_after_retry_for_with_what_it_last_got(read: str, fault: str) -> None:
    link = Link(RIDDEN[fault], faults=10_000)
    with pytest.raises(Unavailable if fault == "503" else ConnectionFailed) as raised:
        link.run(READS[read][0](link.flows(retry_for=2.0)))
    assert len(link.sent) >= 3 and link.now >= 2.0 and link.now < 2.0 + 1.0
    if fault == "refused":
        assert f"the tandem API at {BASE} does not answer" in str(raised.value)


@pytest.mark.parametrize("fault", [*RIDDEN, *KEPT])
def test_a_write_is_sent_once_whatever_it_gets(fault: str) -> None:
    outcome = RIDDEN[fault] if fault in RIDDEN else KEPT[fault][0]
    link = Link(outcome, faults=1)
    with pytest.raises(ClientError):
        link.run(link.flows().cancel("j1"))
    assert paths(link) == ["POST /v1/jobs/j1/cancel"] and link.pauses == []


@pytest.mark.parametrize(
    ("failure", "ridden"),
    [
        pytest.param(ConnectionFailed("no answer"), True, id="no-answer"),
        pytest.param(ServerError("x", status=502), True, id="502"),
        pytest.param(Unavailable("x", status=503), True, id="503-unavailable"),
        pytest.param(Unavailable("x", status=504), False, id="504"),
        pytest.param(RateLimited("x", status=429), False, id="429"),
        pytest.param(ServerError("x", status=500), False, id="500"),
        pytest.param(NotFound("x", status=404), False, id="404"),
        pytest.param(PoolExhausted("x"), False, id="own-pool-full"),
    ],
)
def test_the_rule_as_a_table(failure: ClientError, ridden: bool) -> None:
    assert rides_out(failure) is ridden


def test_patience_asks_again_until_the_window_is_over_and_a_write_never() -> None:
    now = [100.0]
    read = Patience(2.0, lambda: now[0])
    down = Unavailable("down", status=503, retry_after=0.25)
    assert read.wait(down) == 0.25  # the first failure opens the window
    now[0] = 101.9
    assert read.wait(Unavailable("down", status=503)) == 0.5
    assert read.wait(Unavailable("down", status=503, retry_after=30)) == 1.0  # at most a second
    now[0] = 102.0
    with pytest.raises(Unavailable):
        read.wait(down)
    read.answered()  # an answer: a new window
    assert read.wait(down) == 0.25
    with pytest.raises(Unavailable):
        Patience(0.0, lambda: now[0]).wait(down)
    with pytest.raises(RateLimited):  # not ridden out, however long the window
        Patience(60.0, lambda: now[0]).wait(RateLimited("busy", status=429, retry_after=5))
