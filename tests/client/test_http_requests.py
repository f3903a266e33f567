"""The exact requests both HTTP clients build, and how both ride out a link's faults, on
``httpx.MockTransport`` (it sees each request as the client built it: URL, token, body).

One table drives ``Client`` and ``AsyncClient`` alike: every method sends the same requests and
reads the same answers, because both drive the same flows (``tandem.client.http.flows``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from tandem.client.events import Final, RoundStarted
from tandem.client.http import (
    AsyncClient,
    AsyncRemoteJob,
    Client,
    ConnectionFailed,
    RemoteJob,
    Unavailable,
)
from tandem.workers.embedded import free_port

BASE = "http://api.test:8000/base"
TOKEN = "a-token-0123456789"
ENDED = {"id": "j1", "status": {"job_id": "j1", "state": "completed"}}
PARKED = {
    "id": "j1",
    "status": {"job_id": "j1", "state": "awaiting_approval", "pause_id": "q1", "pause_kind": "question"},
    "approval": {"pause_id": "p1", "decided_by": None},
}


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


FINAL = {"id": "2-0", "type": "final", "at": 1.0, "job_id": "j1", "status": "completed", "deliverable": "42"}
ROUND = {"id": "1-0", "type": "round_started", "at": 1.0, "round": 0, "max_rounds": 3}

ANSWERS: dict[tuple[str, str], Any] = {
    ("POST", "/v1/jobs"): {"id": "j1", "status": {"job_id": "j1", "state": "queued"}},
    ("GET", "/v1/jobs"): {"jobs": [{"job_id": "j1", "state": "queued"}]},
    ("GET", "/v1/jobs/j1"): PARKED,
    ("GET", "/v1/jobs/done"): {
        **ENDED,
        "result": {"job_id": "done", "status": "completed", "deliverable": "42"},
    },
    ("GET", "/v1/jobs/a%2Fb"): ENDED,
    ("POST", "/v1/jobs/j1/cancel"): {"status": {"job_id": "j1", "state": "cancelled"}},
    ("POST", "/v1/jobs/j1/decisions"): {"decisions": [{"index": 2, "approve": True}]},
    ("POST", "/v1/jobs/j1/answers"): {"answer": {"city": "Oslo"}},
    ("POST", "/v1/jobs/j1/resume"): {"status": {"job_id": "j1", "state": "queued"}},
    ("POST", "/v1/jobs/j1/fork"): {"id": "f1"},
    ("POST", "/v1/jobs/j1/messages"): {"message_id": "j1:message:0001"},
    ("POST", "/v1/jobs/j1/follow-up"): {"id": "n1", "thread_id": "t0"},
    ("GET", "/v1/threads/t0"): {"jobs": [{"job_id": "j1"}, {"job_id": "n1"}]},
    ("GET", "/healthz"): {"ok": True},
}


def answer(request: httpx.Request) -> httpx.Response:
    path = request.url.raw_path.decode().split("?")[0].removeprefix("/base")
    if path.endswith("/events"):
        return httpx.Response(200, content=sse(ROUND, FINAL), headers={"content-type": "text/event-stream"})
    if "/artifacts/" in path:  # the artifact's text as it is, not JSON
        return httpx.Response(200, content="€ 42\n".encode(), headers={"content-type": "text/plain"})
    return httpx.Response(200 if request.method == "GET" else 202, json=ANSWERS[(request.method, path)])


Sent = tuple[str, str, Any]
"""A request as sent: method, full URL, JSON body (``None``: none)."""

ROWS: list[tuple[str, tuple[Any, ...], dict[str, Any], list[Sent], Callable[[Any], bool]]] = [
    (
        "submit",
        ({"goal": "g"},),
        {"max_rounds": 3},
        [("POST", f"{BASE}/v1/jobs", {"goal": "g", "max_rounds": 3})],
        lambda job: isinstance(job, RemoteJob | AsyncRemoteJob) and job.id == "j1",
    ),
    ("job", ("a/b",), {}, [("GET", f"{BASE}/v1/jobs/a%2Fb", None)], lambda job: job.id == "j1"),
    ("status", ("j1",), {}, [("GET", f"{BASE}/v1/jobs/j1", None)], lambda s: s.state == "awaiting_approval"),
    ("jobs", (), {"limit": 5}, [("GET", f"{BASE}/v1/jobs?limit=5", None)], lambda js: js[0].job_id == "j1"),
    ("result", ("done",), {}, [("GET", f"{BASE}/v1/jobs/done", None)], lambda r: r.deliverable == "42"),
    (
        "events",
        ("j1",),
        {"after": "0-5"},
        [("GET", f"{BASE}/v1/jobs/j1/events", None)],
        lambda es: [type(e) for e in es] == [RoundStarted, Final] and es[1].result().deliverable == "42",
    ),
    ("cancel", ("j1",), {}, [("POST", f"{BASE}/v1/jobs/j1/cancel", None)], lambda s: s.state == "cancelled"),
    (
        "artifact",
        ("a/b", "r0-c1-0123456789"),
        {},
        [("GET", f"{BASE}/v1/jobs/a%2Fb/artifacts/r0-c1-0123456789", None)],
        lambda text: text == "€ 42\n",
    ),
    (
        "decide",
        ("j1", True),
        {"pause_id": "p0", "idempotency_key": "k"},
        [
            (
                "POST",
                f"{BASE}/v1/jobs/j1/decisions",
                {"decisions": True, "idempotency_key": "k", "pause_id": "p0"},
            )
        ],
        lambda d: d == [{"index": 2, "approve": True}],
    ),
    (
        "approve",
        ("j1", 2),
        {"idempotency_key": "k"},
        [
            ("GET", f"{BASE}/v1/jobs/j1", None),  # the current pause, read and named
            (
                "POST",
                f"{BASE}/v1/jobs/j1/decisions",
                {"decisions": [{"index": 2, "approve": True}], "idempotency_key": "k", "pause_id": "p1"},
            ),
        ],
        lambda d: d == [{"index": 2, "approve": True}],
    ),
    (
        "reject",
        ("j1", 2),
        {"reason": "no", "pause_id": "p0", "idempotency_key": "k"},
        [
            (
                "POST",
                f"{BASE}/v1/jobs/j1/decisions",
                {
                    "decisions": [{"index": 2, "approve": False, "reason": "no"}],
                    "idempotency_key": "k",
                    "pause_id": "p0",
                },
            )
        ],
        lambda d: isinstance(d, list),
    ),
    (
        "answer",
        ("j1", {"city": "Oslo"}),
        {"idempotency_key": "k"},
        [
            ("GET", f"{BASE}/v1/jobs/j1", None),  # the question's pause, read and named
            (
                "POST",
                f"{BASE}/v1/jobs/j1/answers",
                {"answer": {"city": "Oslo"}, "idempotency_key": "k", "pause_id": "q1"},
            ),
        ],
        lambda a: a == {"city": "Oslo"},
    ),
    (
        "resume",
        ("j1",),
        {"max_rounds": 9},
        [("POST", f"{BASE}/v1/jobs/j1/resume", {"max_rounds": 9})],
        lambda s: s.state == "queued",
    ),
    (
        "fork",
        ("j1", 2),
        {"goal": "again"},
        [("POST", f"{BASE}/v1/jobs/j1/fork", {"round": 2, "goal": "again"})],
        lambda job: job.id == "f1",
    ),
    (
        "message",
        ("j1", "hi"),
        {"idempotency_key": "k"},
        [("POST", f"{BASE}/v1/jobs/j1/messages", {"text": "hi", "idempotency_key": "k"})],
        lambda m: m == "j1:message:0001",
    ),
    (
        "follow_up",
        ("j1", "next"),
        {"idempotency_key": "k"},
        [("POST", f"{BASE}/v1/jobs/j1/follow-up", {"goal": "next", "idempotency_key": "k"})],
        lambda job: (job.id, job.thread_id) == ("n1", "t0"),
    ),
    ("thread", ("t0",), {}, [("GET", f"{BASE}/v1/threads/t0", None)], lambda js: len(js) == 2),
    ("health", (), {}, [("GET", f"{BASE}/healthz", None)], lambda h: h == {"ok": True}),
]


def call(driver: str, transport: httpx.MockTransport, name: str, *args: Any, **kwargs: Any) -> Any:
    """``name`` called on a client of ``driver`` (``sync`` or ``async``) built from a URL and a token."""
    if driver == "sync":
        with Client(BASE + "/", TOKEN, transport=transport, retry_for=0.5) as client:
            got = getattr(client, name)(*args, **kwargs)
            return list(got) if name == "events" else got

    async def run() -> Any:
        async with AsyncClient(BASE + "/", TOKEN, transport=transport, retry_for=0.5) as client:
            if name == "events":
                return [e async for e in client.events(*args, **kwargs)]
            return await getattr(client, name)(*args, **kwargs)

    return asyncio.run(run())


DRIVERS = ["sync", "async"]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(("name", "args", "kwargs", "expected", "check"), ROWS, ids=[r[0] for r in ROWS])
def test_each_method_sends_the_documented_request_with_the_token(
    driver: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: list[Sent], check: Any
) -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    got = call(driver, httpx.MockTransport(record), name, *args, **kwargs)
    sent = [(r.method, str(r.url), json.loads(r.content) if r.content else None) for r in seen]
    assert sent == expected
    assert [r.headers.get("Authorization") for r in seen] == [f"Bearer {TOKEN}"] * len(seen)
    assert check(got)
    if name == "events":
        assert (seen[0].headers["Accept"], seen[0].headers["Last-Event-ID"]) == ("text/event-stream", "0-5")


def test_the_two_clients_and_their_handles_have_the_same_methods() -> None:
    def methods(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(fn).parameters)
            for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_") and name not in {"close", "aclose"}
        }

    assert methods(Client) == methods(AsyncClient)
    assert methods(RemoteJob) == methods(AsyncRemoteJob)
    # a handle's method is its client's, the job's id filled in (``info`` is ``job``; ``thread``
    # is the job's thread's)
    client_methods = methods(Client)
    for name, params in methods(RemoteJob).items():
        first = "thread_id" if name == "thread" else "job"
        assert ["self", first, *params[1:]] == client_methods["job" if name == "info" else name], name
    assert {n for n, _, _, _, _ in ROWS} == set(client_methods) - {"base_url"}  # the table covers all


# -- faults of the link --------------------------------------------------------------------------


class _Dropping(httpx.SyncByteStream, httpx.AsyncByteStream):
    """Two events, then the connection breaks."""

    def __iter__(self) -> Iterator[bytes]:
        yield b": job j events after 0\n\n"
        yield sse({**ROUND, "id": "1-1"}, {**ROUND, "id": "1-2"})
        raise httpx.ReadError("connection reset by peer")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_dropped_stream_resumes_after_the_last_event(driver: str) -> None:
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            asked.append(request.headers.get("Last-Event-ID"))
            if len(asked) == 1:
                return httpx.Response(200, stream=_Dropping())
            return httpx.Response(200, content=sse({**ROUND, "id": "1-3"}, {**FINAL, "id": "1-4"}))
        return httpx.Response(200, json={"id": "j", "status": {"job_id": "j", "state": "completed"}})

    events = call(driver, httpx.MockTransport(answer), "events", "j")
    assert [e.id for e in events] == ["1-1", "1-2", "1-3", "1-4"]  # none lost, none twice
    assert asked == ["0", "1-2"]


@pytest.mark.parametrize("driver", DRIVERS)
def test_reads_ride_out_a_503_and_writes_are_sent_once(driver: str) -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if len(seen) <= 2 or request.method == "POST":
            body = {"error": {"code": "redis_unavailable", "message": "Redis does not answer"}}
            return httpx.Response(503, json=body, headers={"Retry-After": "0.05"})
        return httpx.Response(200, json={"jobs": []})

    transport = httpx.MockTransport(answer)
    assert call(driver, transport, "jobs") == [] and seen == ["GET", "GET", "GET"]
    with pytest.raises(Unavailable) as down:
        call(driver, transport, "cancel", "j")
    assert seen[3:] == ["POST"] and down.value.retry_after == 0.05 and down.value.code == "redis_unavailable"


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_api_that_does_not_answer_is_one_clear_error(driver: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def aread() -> None:
        async with AsyncClient(url, TOKEN, retry_for=0.2) as api:
            await api.jobs()

    with pytest.raises(ConnectionFailed, match=re.escape(f"the tandem API at {url} does not answer")):
        if driver == "sync":
            Client(url, TOKEN, retry_for=0.2).jobs()
        else:
            asyncio.run(aread())


@pytest.mark.parametrize("client", [Client, AsyncClient])
@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://api", "", "/v1"])
def test_a_base_url_that_is_not_http_is_refused_at_once(client: type, url: str) -> None:
    with pytest.raises(ValueError, match=re.escape("base_url must be the API's http:// or https:// URL")):
        client(url, TOKEN)
