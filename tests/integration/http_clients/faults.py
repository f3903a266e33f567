"""The answers, writes and reads the HTTP client breaking tests put faults on.

``refusals``: calls the real API refuses, with the class each must raise. ``ANSWERS``: what a
proxy or a load balancer may answer, and the ``ClientError`` class docs/api.md names for it (with
the ``retry_after`` it must carry). ``WRITES``: every write of the client,
``(path it posts to, call)``; docs/api.md: "sent once and raise what they get". ``READS``: the
reads that "ride out a blip", ``(path, call giving a value the test checks)``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tandem.client.http import (
    ClientError,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
)
from tests.integration.http_clients.fault_proxy import Rule, Seen
from tests.integration.http_clients.world import ADD, OTHER, READER, Side, spec


def error_body(code: str, message: str = "a test answer") -> bytes:
    """The API's error shape: ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


@dataclass(frozen=True)
class Answer:
    """An answer of the proxy's own and the class docs/api.md names for it."""

    status: int
    body: bytes
    kind: type[ClientError]
    retry_after: float | None = None

    @property
    def content_type(self) -> str:
        return "application/json" if self.body.startswith(b"{") else "text/html"

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": f"{self.retry_after:g}"}


ANSWERS = {
    "429": Answer(429, error_body("too_many_streams"), RateLimited, 5.0),
    "503": Answer(503, error_body("redis_unavailable"), Unavailable, 1.0),
    "504": Answer(504, error_body("no_worker_answered"), Unavailable),
    "500-html": Answer(500, b"<html>Internal Server Error</html>", ServerError),
    "200-html": Answer(200, b"<html>Welcome to the hotel wifi</html>", ServerError),
    "401": Answer(401, error_body("unauthorized"), Unauthorized),
    "400": Answer(400, error_body("invalid_json"), InvalidRequest),
}


def refusals(
    side: Side, url: str, job: str
) -> list[tuple[Callable[[], Any], type[ClientError], int, str | None]]:
    """Calls the real API refuses, each with the class, status and code docs/api.md names:
    ``(call, class, status, code or None when the docs name none)``. ``job`` has completed."""
    api = side.client(url)
    wrong, bare = side.client(url, token="not-a-token-of-this-api"), side.client(url, token=None)
    reader, other = side.client(url, token=READER), side.client(url, token=OTHER)
    return [
        (lambda: wrong.status(job), Unauthorized, 401, None),
        (lambda: bare.status(job), Unauthorized, 401, None),
        (lambda: reader.submit(goal="x"), Unauthorized, 403, "missing_scope"),
        (lambda: reader.cancel(job), Unauthorized, 403, "missing_scope"),
        (lambda: api.submit(goal="x", owner="team-b"), Unauthorized, 403, "foreign_owner"),
        (lambda: other.status(job), NotFound, 404, "unknown_job"),
        (lambda: other.result(job, timeout=30), NotFound, 404, "unknown_job"),
        (lambda: api.job("0" * 32), NotFound, 404, "unknown_job"),
        (lambda: api.cancel(job), Conflict, 409, "job_ended"),
        (lambda: api.resume(job), Conflict, 409, None),
        (lambda: api.submit(goal="x", max_rounds=0), InvalidRequest, 422, "invalid_spec"),
        (lambda: api.submit(goal="x" * 300_000), InvalidRequest, 413, None),
    ]


ONCE = f"sent once {uuid.uuid4()}"
"""The goal of the jobs the submit tests make (each run of the module its own, each client its own
suffix: ``once_goal``)."""


def once_goal(api: Any) -> str:
    return f"{ONCE} {type(api).__name__}"


def _pause(job_id: str) -> str:
    return f"{job_id}:0:tools:1"


WRITES: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
    "submit": ("/v1/jobs", lambda api, j: api.submit(spec(once_goal(api), ADD))),
    "cancel": ("/v1/jobs/[^/]+/cancel", lambda api, j: api.cancel(j)),
    "message": ("/v1/jobs/[^/]+/messages", lambda api, j: api.message(j, "hello")),
    "approve": ("/v1/jobs/[^/]+/decisions", lambda api, j: api.approve(j, 1, pause_id=_pause(j))),
    "reject": ("/v1/jobs/[^/]+/decisions", lambda api, j: api.reject(j, 1, pause_id=_pause(j))),
    "decide": ("/v1/jobs/[^/]+/decisions", lambda api, j: api.decide(j, True, pause_id=_pause(j))),
    "answer": ("/v1/jobs/[^/]+/answers", lambda api, j: api.answer(j, {"city": "Oslo"}, pause_id=_pause(j))),
    "resume": ("/v1/jobs/[^/]+/resume", lambda api, j: api.resume(j, max_rounds=9)),
    "fork": ("/v1/jobs/[^/]+/fork", lambda api, j: api.fork(j, 1)),
    "follow_up": ("/v1/jobs/[^/]+/follow-up", lambda api, j: api.follow_up(j, "once more")),
}
FAULTS: dict[str, type[ClientError]] = {
    "answer": Unavailable,
    "502": ClientError,
    "drop": ConnectionFailed,
    "swallow": ConnectionFailed,
}
"""A fault on a write and the class it must raise: a 503 of the proxy's own, a load balancer's 502
(docs/api.md names no class for it), a connection closed unanswered, an answer that never comes
(after the API did the write)."""


def write_fault(fault: str, path: str) -> Rule:
    """The proxy's rule for ``fault`` (a key of ``FAULTS``) on every POST to ``path``."""
    if fault == "answer":
        return Rule(
            "POST", path, "answer", -1, 503, error_body("redis_unavailable"), headers={"Retry-After": "1"}
        )
    if fault == "502":
        return Rule("POST", path, "answer", -1, 502, b"<html>502 Bad Gateway</html>", "text/html")
    return Rule("POST", path, fault, -1)


def read_fault(fault: str, path: str, times: int) -> Rule:
    """The proxy's rule for ``fault`` on the first ``times`` GETs of ``path``: a load balancer's
    502 or 503, a connection closed unanswered (``drop``), an answer that never comes
    (``swallow``), an answer cut short (``truncate``)."""
    if fault in ("502", "503"):
        return Rule("GET", path, "answer", times, int(fault), b"<html>bad gateway</html>", "text/html")
    return Rule("GET", path, fault, times)


READS: dict[str, tuple[str, Callable[[Side, Any, str], Any]]] = {
    "status": ("/v1/jobs/{id}", lambda side, api, j: side.run(api.status(j)).state),
    "job": ("/v1/jobs/{id}", lambda side, api, j: side.run(api.job(j)).status.state),
    "jobs": ("/v1/jobs", lambda side, api, j: j in [x.job_id for x in side.run(api.jobs(limit=100))]),
    "events": (
        "/v1/jobs/{id}/events",
        lambda side, api, j: [e.type for e in side.iterate(api.events(j))][-1],
    ),
}


def resumed_from(seen: Seen) -> str | None:
    """The event id a stream request resumes after: its ``Last-Event-ID``, or its ``?after=``."""
    return seen.headers.get("last-event-id") or httpx.URL(seen.path).params.get("after")


def newer_worker_stream(job_id: str) -> Rule:
    """The proxy answers the job's event stream once with an event type no client of today knows
    (``hologram_rendered``, with a field of its own) between two it knows."""
    events = [
        {"id": "1-0", "type": "job_started", "at": 1.0, "spec": {"goal": "x"}},
        {"id": "2-0", "type": "hologram_rendered", "at": 2.0, "round": 0, "frames": [1, 2]},
        {
            "id": "3-0",
            "type": "final",
            "at": 3.0,
            "job_id": job_id,
            "status": "completed",
            "deliverable": "from the future",
            "rounds": 1,
        },
    ]
    frames = [f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
    body = (": heartbeat\n\n" + "".join(frames)).encode()
    return Rule("GET", f"/v1/jobs/{job_id}/events", "answer", 1, 200, body, "text/event-stream")
