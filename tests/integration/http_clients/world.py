"""What the HTTP client breaking tests run against: ``tandem api`` processes, tokens, plans, and
one driver for both clients.

The clients are built exactly as docs/api.md builds them, ``Client(url, token=...)`` and
``AsyncClient(url, token=...)``: no transport handed in, no pre-configured httpx client.
``Side`` drives either from synchronous test code, so one test body checks both: the sync
client's calls return their values, the async client's coroutines are awaited on one event loop
that the test owns (``Side.run``), and either's ``events()`` is read through ``Side.iterate``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tandem import AsyncClient, Client
from tandem.client.events import JobEvent
from tandem.client.handle import JobHandle
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan

FULL = "breaking-client-full-token-0001"
"""Tenant ``team-a`` with the four scopes of an ordinary token."""
READER = "breaking-client-reader-token-01"
"""Tenant ``team-a`` with ``read`` only."""
OTHER = "breaking-client-other-tenant-01"
"""Tenant ``team-b`` with the four scopes."""
SCOPES = ["submit", "read", "control", "approve"]
TOKENS = json.dumps(
    {
        FULL: {"tenant": "team-a", "scopes": SCOPES},
        READER: {"tenant": "team-a", "scopes": ["read"]},
        OTHER: {"tenant": "team-b", "scopes": SCOPES},
    }
)

ADD = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
ADD_TWICE = [[{"name": "add", "args": {"a": 2, "b": 3}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]
NOTIFY = [[{"name": "notify", "args": {"to": "ann@example.com"}}]]
"""``notify`` needs a person's approval: the job parks on ``approval_requested``."""
TRIP = [[{"name": "book_trip", "args": {}}]]
"""``book_trip`` asks a person which city: the job parks on ``question_asked``."""

HEARTBEAT = 1
"""Seconds between the heartbeats of this world's ``tandem api`` (``TANDEM_API_HEARTBEAT``)."""
SILENCE = 5 * HEARTBEAT
"""The ``stream_silence`` of a client that a test leaves on a silent stream: five missed
heartbeats, so only a stream that really went silent is given up on (docs/api.md: keep it above
the API's heartbeat interval; the default, 45 s, is three of the default 15 s)."""


def spec(text: str, plan: list[list[dict[str, Any]]], **fields: Any) -> dict[str, Any]:
    """A job spec whose goal carries ``plan`` (``tests.integration.plan_model``)."""
    return {"goal": goal_with_plan(text, plan), "max_rounds": 6, **fields}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ApiProcess:
    """``tandem api`` as a child process on one loopback port, which it keeps across restarts."""

    def __init__(self, env: dict[str, str], port: int | None = None) -> None:
        self.env = env
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkdtemp(prefix="tandem-api-")) / "api.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start the process and wait for its ``/healthz`` to answer 200."""
        cmd = [
            sys.executable,
            "-m",
            "tandem.workers.cli",
            "api",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, env={**os.environ, **self.env}, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem api exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tandem api did not answer in 120 s: {self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: every connection it held is cut at once, nothing is said to a client."""
        assert self.proc is not None and self.proc.poll() is None, f"tandem api exited by itself: {self.log}"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@dataclass
class World:
    """The module's cluster (workers on their own Redis database) and its ``tandem api``."""

    cluster: Cluster
    api: ApiProcess


def running_world(redis_base: str) -> Iterator[World]:
    """Thinker, actor and tools workers with streaming hosts and the toolkit that asks questions,
    and one ``tandem api`` with the three tokens and a heartbeat every ``HEARTBEAT`` seconds; torn
    down with the cluster's checks (no worker exited by itself, every key has a TTL)."""
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.tools:questions_toolkit",
        TANDEM_THINKER_STREAM="true",
        TANDEM_ACTOR_STREAM="true",
        TANDEM_API_TOKENS=TOKENS,
        TANDEM_API_MAX_BODY="200000",
        TANDEM_API_HEARTBEAT=str(HEARTBEAT),
    )
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools")
    api = ApiProcess(cluster.env)
    try:
        yield World(cluster, api)
    finally:
        api.stop()
        next(gen, None)


def completed_job(url: str) -> str:
    """The id of a job submitted through ``url`` that completed."""
    with Client(url, token=FULL) as api:
        job = api.submit(spec("an ended job", ADD))
        assert job.result(timeout=180).status == "completed"
        return job.id


def handle_events(cluster: Cluster, job_id: str, after: str = "0") -> list[JobEvent]:
    """The job's events after ``after`` as ``JobHandle.events()`` gives them (straight from Redis),
    to the next final one."""
    return list(JobHandle(job_id, cluster.store, cluster.app).events(after=after, timeout=180))


def parked_job(url: str, token: str = FULL) -> str:
    """A job submitted through ``url`` and parked on its ``approval_requested`` (never decided)."""
    with Client(url, token=token) as api:
        job = api.submit(spec("mail ann", NOTIFY))
        next(e for e in job.events() if e.type == "approval_requested")
        return job.id


@contextmanager
def hold_stream(url: str, job_id: str, token: str = FULL) -> Iterator[httpx.Response]:
    """An event stream of ``job_id`` opened with plain httpx and held while the block runs. An API
    may notice a stream closed before only at its next write to it (a heartbeat, ``HEARTBEAT``), so
    a 429 or 503 is asked again, up to 60 s; the response yielded is the last (200 unless it gave up)."""
    deadline = time.monotonic() + 60
    headers = {"Authorization": f"Bearer {token}"}
    while True:
        with httpx.stream("GET", f"{url}/v1/jobs/{job_id}/events", headers=headers, timeout=30) as response:
            if response.status_code not in (429, 503) or time.monotonic() > deadline:
                yield response
                return
        time.sleep(0.2)


def free_slot(url: str, job_id: str) -> bool:
    """Whether ``FULL`` may open a stream of ``job_id`` on ``url`` again within 60 s."""
    with hold_stream(url, job_id) as probe:
        return probe.status_code == 200


@contextmanager
def in_background(action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` on a thread while the block runs; then join it and raise what it raised."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    thread.join(180)
    assert not thread.is_alive(), f"{action} did not end in 180 s"
    if failures:
        raise failures[0]


class Side:
    """One of the two clients, driven from synchronous test code."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.runner = asyncio.Runner() if kind == "async" else None
        self.clients: list[Any] = []

    @property
    def handle_type(self) -> str:
        return "AsyncRemoteJob" if self.kind == "async" else "RemoteJob"

    def client(self, url: str, token: str | None = FULL, **options: Any) -> Any:
        """``Client(url, token=token)`` or ``AsyncClient(url, token=token)``, as the docs make them."""
        made = (AsyncClient if self.kind == "async" else Client)(url, token=token, **options)
        self.clients.append(made)
        return made

    def run(self, value: Any) -> Any:
        """A call's value: the sync client's as it is, the async client's awaited."""
        if inspect.isawaitable(value):
            assert self.runner is not None, f"the sync client returned an awaitable: {value!r}"
            return self.runner.run(_awaited(value))
        assert self.runner is None, f"the async client returned a value that is not awaitable: {value!r}"
        return value

    def iterate(self, events: Iterator[JobEvent] | AsyncIterator[JobEvent]) -> Iterator[JobEvent]:
        """The events of either client's ``events()``, one by one."""
        if self.runner is None:
            assert isinstance(events, Iterator), f"the sync client's events() is not an iterator: {events!r}"
            yield from events
            return
        assert isinstance(events, AsyncIterator), (
            f"the async client's events() is not an async iterator: {events!r}"
        )
        while True:
            try:
                yield self.runner.run(_awaited(events.__anext__()))
            except StopAsyncIteration:
                return

    def until(self, events: Iterator[JobEvent] | AsyncIterator[JobEvent], kind: str) -> list[JobEvent]:
        """Read ``events`` up to and including the first of type ``kind``; the rest stays unread."""
        got: list[JobEvent] = []
        for event in self.iterate(events):
            got.append(event)
            if event.type == kind:
                self.stop(events)
                return got
        raise AssertionError(f"the stream ended without a {kind!r} event: {[e.type for e in got]}")

    def stop(self, events: Iterator[JobEvent] | AsyncIterator[JobEvent]) -> None:
        """Stop reading ``events`` before their end: the stream is closed now, on this side's loop."""
        if self.runner is not None:
            self.runner.run(_awaited(events.aclose()))  # type: ignore[union-attr]
        else:
            events.close()  # type: ignore[union-attr]

    def leave_half_read(self, url: str, job_id: str, how: str) -> tuple[JobEvent, bool]:
        """Read the first event of ``job_id`` on a client of its own, then leave it (``how``:
        its context manager, or ``close``/``aclose``) with the events iterator still referenced;
        the event, and whether the token's stream slot on ``url`` is free again (``free_slot``)."""
        if self.runner is None:
            with Client(url, token=FULL, retry_for=60) if how == "context" else nullcontext() as entered:
                api = entered or Client(url, token=FULL, retry_for=60)
                events = api.events(job_id)
                first = next(events)
            if how == "close":
                api.close()
            return first, free_slot(url, job_id)

        async def leave() -> tuple[JobEvent, bool]:
            made = AsyncClient(url, token=FULL, retry_for=60)
            async with made if how == "context" else nullcontext(made) as api:
                events = api.events(job_id)
                first = await events.__anext__()
            if how == "close":
                await made.aclose()
            return first, free_slot(url, job_id)  # inside the loop: nothing has finalized events

        return asyncio.run(leave())

    def close(self) -> None:
        for made in self.clients:
            if self.runner is not None:
                self.runner.run(made.aclose())
            else:
                made.close()
        if self.runner is not None:
            self.runner.close()


async def _awaited(value: Any) -> Any:
    return await value
