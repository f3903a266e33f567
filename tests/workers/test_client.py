"""The HTTP client (``tandem.client.http``) against ``tandem api`` in process (fakeredis, a Celery
app on an in-memory broker), and against scripted transports for the faults a link brings."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from tandem.client.http import (
    AsyncClient,
    Client,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from tandem.tasks.job_events import RoundStarted
from tandem.tasks.spec import JobResult, JobSpec
from tests.workers.test_api import TOKEN, Fixture


@pytest.fixture
def api() -> Iterator[tuple[Fixture, Client]]:
    fixture = Fixture()
    with fixture.client:
        yield fixture, Client("http://localhost", http=fixture.client, retry_for=0.5)


def test_submit_read_list_and_cancel(api: tuple[Fixture, Client]) -> None:
    _, client = api
    job_id = client.submit({"goal": "count", "reasoner": "mono"}, max_rounds=3)
    job = client.job(job_id)
    assert (job.id, job.status.state, job.status.reasoner, job.result) == (job_id, "queued", "mono", None)
    assert [j.job_id for j in client.jobs()] == [job_id]
    assert client.cancel(job_id).state == "cancelled"
    assert client.result(job_id, timeout=1).status == "cancelled"
    with pytest.raises(Conflict) as refused:
        client.cancel(job_id)
    assert (refused.value.status, refused.value.code) == (409, "job_ended")
    assert "already ended (cancelled)" in str(refused.value)


def test_events_run_to_the_final_event_and_resume_after_an_id(api: tuple[Fixture, Client]) -> None:
    fixture, client = api
    ids = fixture.ended_job("done-1")
    events = list(client.events("done-1"))
    assert [e.id for e in events] == ids
    assert [e.type for e in events] == ["job_started", "round_started", "model_delta", "final"]
    assert events[2].content == "Hel" and events[-1].deliverable == "Hello"  # the type's fields
    assert [e.id for e in client.events("done-1", after=ids[1])] == ids[2:]
    assert list(client.events("done-1", after=ids[-1])) == []  # ended: nothing more, no wait
    assert client.result("done-1").deliverable == "Hello"


def test_result_follows_the_events_of_a_live_job(api: tuple[Fixture, Client]) -> None:
    fixture, client = api
    fixture.store.create("live", JobSpec(goal="g"))
    fixture.store.set_status("live", state="running")
    with pytest.raises(WaitTimeout, match=re.escape("'live' had not ended after 0.3 s (it is running)")):
        client.result("live", timeout=0.3)
    fixture.store.publish("live", RoundStarted(round=0, max_rounds=1))
    fixture.store.finish(JobResult(job_id="live", status="completed", deliverable="done"), ttl=60)
    assert client.result("live", timeout=5).deliverable == "done"


def test_the_apis_refusals_are_typed_errors(api: tuple[Fixture, Client]) -> None:
    _, client = api
    with pytest.raises(NotFound) as unknown:
        client.job("nope")
    assert unknown.value.code == "unknown_job" and unknown.value.status == 404
    with pytest.raises(InvalidRequest) as bad:
        client.submit(goal="g", max_rounds=0)
    assert bad.value.code == "invalid_spec" and bad.value.fields[0]["field"] == "max_rounds"
    with pytest.raises(InvalidRequest, match="a job needs a goal"):
        client.submit(max_rounds=3)  # refused before any request
    with pytest.raises(NotFound):
        list(client.events("nope"))
    with pytest.raises(InvalidRequest, match="job_id must be a non-empty string"):
        client.job("")


def test_a_job_id_cannot_reach_another_path(api: tuple[Fixture, Client]) -> None:
    _, client = api
    with pytest.raises(NotFound):
        client.cancel("../../v1/jobs")  # quoted: one path segment, an unknown job


def test_a_token_is_sent_and_a_missing_one_is_unauthorized() -> None:
    fixture = Fixture(tokens=(TOKEN,))
    with TestClient(fixture.app, base_url="http://localhost") as bare:  # sends no token of its own
        with pytest.raises(Unauthorized) as refused:
            Client("http://localhost", http=bare).jobs()
        assert refused.value.status == 401
        assert Client("http://localhost", TOKEN, http=bare).jobs() == []


# -- faults of the link, on scripted transports ---------------------------------------------------


def _event(n: int, kind: str = "round_started") -> bytes:
    data = json.dumps({"id": f"1-{n}", "type": kind, "at": 1.0, "round": n})
    return f"id: 1-{n}\nevent: {kind}\ndata: {data}\n\n".encode()


class _Dropping(httpx.SyncByteStream):
    """Two events, then the connection breaks."""

    def __iter__(self) -> Iterator[bytes]:
        yield b": job j events after 0\n\n"
        yield _event(1)
        yield _event(2)
        raise httpx.ReadError("connection reset by peer")


def test_a_dropped_stream_resumes_after_the_last_event() -> None:
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            asked.append(request.headers.get("Last-Event-ID"))
            if len(asked) == 1:
                return httpx.Response(200, stream=_Dropping())
            return httpx.Response(200, content=_event(3) + _event(4, "final"))
        return httpx.Response(200, json={"id": "j", "status": {"job_id": "j", "state": "completed"}})

    client = Client(
        "http://api", http=httpx.Client(base_url="http://api", transport=httpx.MockTransport(answer))
    )
    events = list(client.events("j"))
    assert [e.id for e in events] == ["1-1", "1-2", "1-3", "1-4"]  # none lost, none twice
    assert asked == ["0", "1-2"]


def test_reads_ride_out_a_503_and_writes_are_sent_once() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if len(seen) <= 2 or request.method == "POST":
            body = {"error": {"code": "redis_unavailable", "message": "Redis does not answer"}}
            return httpx.Response(503, json=body, headers={"Retry-After": "0.05"})
        return httpx.Response(200, json={"jobs": []})

    client = Client(
        "http://api", http=httpx.Client(base_url="http://api", transport=httpx.MockTransport(answer))
    )
    assert client.jobs() == [] and seen == ["GET", "GET", "GET"]
    with pytest.raises(Unavailable) as down:
        client.cancel("j")
    assert seen[3:] == ["POST"] and down.value.retry_after == 0.05 and down.value.code == "redis_unavailable"


def test_an_api_that_does_not_answer_is_one_clear_error() -> None:
    client = Client("http://127.0.0.1:9", retry_for=0.2, timeout=1)
    down = re.escape("the tandem API at http://127.0.0.1:9 does not answer")
    with pytest.raises(ConnectionFailed, match=down):
        client.jobs()


# -- the async client ---------------------------------------------------------------------------------


def test_the_async_client_does_what_the_blocking_one_does() -> None:
    fixture = Fixture()
    ids = fixture.ended_job("done-1")

    async def run() -> None:
        transport = httpx.ASGITransport(app=fixture.app)
        http = httpx.AsyncClient(base_url="http://localhost", transport=transport)
        async with AsyncClient("http://localhost", http=http, retry_for=0.5) as client:
            assert [e.id async for e in client.events("done-1")] == ids
            assert (await client.result("done-1")).deliverable == "Hello"
            job_id = await client.submit(goal="g")
            assert (await client.status(job_id)).state == "queued"
            assert (await client.cancel(job_id)).state == "cancelled"
            with pytest.raises(Conflict):
                await client.cancel(job_id)
            with pytest.raises(NotFound):
                await client.job("nope")

    asyncio.run(run())


def test_the_client_imports_neither_celery_nor_redis_nor_litellm() -> None:
    code = (
        "import sys, tandem.client.http; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'celery', 'kombu', 'redis', 'litellm', 'starlette', 'aiohttp', 'cryptography'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
