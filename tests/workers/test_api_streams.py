"""Event streams of ``tandem api``: one reader per job fans out to all its clients, lagging clients
catch up from Redis, and a token's concurrent streams are limited (429). In process, fakeredis."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import fakeredis
import httpx
import pytest
from celery import Celery

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.settings import Settings
from tandem.tasks.job_events import RoundStarted
from tandem.tasks.spec import JobResult, JobSpec
from tandem.workers.api import streams
from tandem.workers.api.app import Api
from tests.workers.test_api import TOKEN, Fixture, sse

OTHER_TOKEN = "another-token-of-length"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _api(fixture: Fixture) -> Api:
    app: Any = fixture.app
    while not hasattr(app, "state"):
        app = app.app
    api: Api = app.state.api
    return api


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def _client(fixture: Fixture, token: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=fixture.app)
    return httpx.AsyncClient(transport=transport, base_url="http://localhost", headers=headers, timeout=30)


def _live_job(fixture: Fixture, job_id: str, events: int) -> list[str]:
    fixture.store.create(job_id, JobSpec(goal="g"))
    fixture.store.set_status(job_id, state="running")
    return [fixture.store.publish(job_id, RoundStarted(round=r, max_rounds=20)) for r in range(events)]


def _finish(fixture: Fixture, job_id: str) -> None:
    fixture.store.finish(JobResult(job_id=job_id, status="completed", deliverable="done"), ttl=60)


async def test_fifty_clients_of_one_job_share_one_reader_and_each_gets_every_event() -> None:
    fixture = Fixture()
    api = _api(fixture)
    before = _live_job(fixture, "job", 2)
    _live_job(fixture, "other", 0)
    async with _client(fixture) as client:
        resuming = {"Last-Event-ID": before[0]}
        tasks = [
            asyncio.create_task(client.get("/v1/jobs/job/events", headers=resuming if i % 5 == 0 else None))
            for i in range(50)
        ]
        other = asyncio.create_task(client.get("/v1/jobs/other/events"))
        await _until(lambda: len(api.hub.feeds.get("job", _NoFeed).subscribers) == 50)
        assert api.hub.readers == 2  # one per job followed, not one per client
        assert (await client.get("/healthz")).json() == {"ok": True}
        later = [fixture.store.publish("job", RoundStarted(round=r, max_rounds=20)) for r in (2, 3, 4)]
        _finish(fixture, "job")
        bodies = await asyncio.gather(*tasks)
        await _until(lambda: "job" not in api.hub.feeds)  # its reader stops with its last client
        assert api.hub.readers == 1
        _finish(fixture, "other")
        assert [e["event"] for e in sse((await other).text)[0]] == ["final"]
    final_id = fixture.store.read_events("job", after=later[-1])[0].id
    for i, response in enumerate(bodies):
        events, _ = sse(response.text)
        expected = (before[1:] if i % 5 == 0 else before) + later + [final_id]
        assert [e["id"] for e in events] == expected, i
    await _until(lambda: api.hub.readers == 0)


class _NoFeed:
    subscribers: frozenset[object] = frozenset()


async def test_a_lagging_client_catches_up_from_redis_without_a_gap_or_a_repeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "QUEUE_BATCHES", 2)
    fixture = Fixture()
    api = _api(fixture)
    _live_job(fixture, "job", 1)
    sub = api.hub.subscribe("job")
    await sub.feed.ready.wait()

    async def connected() -> bool:
        return False

    stream = api.hub.stream(sub, "0", connected)
    assert (await anext(stream)).startswith("retry:")
    written = []
    for r, full in (
        (1, lambda: sub.queue.qsize() == 1),
        (2, lambda: sub.queue.qsize() == 2),
        (3, lambda: sub.lagging),
    ):
        written.append(fixture.store.publish("job", RoundStarted(round=r, max_rounds=50)))
        await _until(full)  # one batch at a time, while the client reads nothing: the third overflows
    written += [fixture.store.publish("job", RoundStarted(round=r, max_rounds=50)) for r in range(4, 30)]
    _finish(fixture, "job")
    texts = [text async for text in stream]
    ids = [line[4:] for text in texts for line in text.splitlines() if line.startswith("id: ")]
    assert len(ids) == len(set(ids)) == 31  # job's first event, the 29 written, and final
    assert ids[1:30] == written
    await _until(lambda: api.hub.readers == 0)


async def test_a_tokens_streams_are_limited_with_a_clear_429() -> None:
    fixture = Fixture(tokens=(TOKEN, OTHER_TOKEN), api=ApiSettings(max_streams=3))
    api = _api(fixture)
    _live_job(fixture, "job", 1)
    async with _client(fixture, TOKEN) as mine, _client(fixture, OTHER_TOKEN) as theirs:
        held = [asyncio.create_task(mine.get("/v1/jobs/job/events")) for _ in range(3)]
        await _until(lambda: sum(api.slots.open.values()) == 3)
        refused = await mine.get("/v1/jobs/job/events")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
        error = refused.json()["error"]
        assert error["code"] == "too_many_streams" and error["limit"] == 3
        assert "this token already has 3 event streams open" in error["message"]
        assert "TANDEM_API_MAX_STREAMS" in error["message"]
        other = asyncio.create_task(theirs.get("/v1/jobs/job/events"))  # another token: its own count
        await _until(lambda: sum(api.slots.open.values()) == 4)
        assert (await mine.get("/v1/jobs/job")).status_code == 200  # other requests are not limited
        _finish(fixture, "job")
        for response in await asyncio.gather(*held, other):
            assert response.status_code == 200 and sse(response.text)[0][-1]["event"] == "final"
        assert api.slots.open == {}
        again = await mine.get("/v1/jobs/job/events")
        assert again.status_code == 200  # the slots came back
        assert api.slots.open == {}


async def test_without_tokens_the_limit_counts_per_client_address() -> None:
    fixture = Fixture(api=ApiSettings(max_streams=1))
    api = _api(fixture)
    _live_job(fixture, "job", 0)
    async with _client(fixture) as client:
        held = asyncio.create_task(client.get("/v1/jobs/job/events"))
        await _until(lambda: sum(api.slots.open.values()) == 1)
        refused = await client.get("/v1/jobs/job/events")
        assert refused.status_code == 429
        assert "this client already has 1 event streams open" in refused.json()["error"]["message"]
        _finish(fixture, "job")
        assert (await held).status_code == 200
    assert list(api.slots.open) == []


async def test_past_the_jobs_one_process_follows_a_new_job_gets_503(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = Fixture(api=ApiSettings(stream_jobs=1))
    api = _api(fixture)
    _live_job(fixture, "a", 0)
    _live_job(fixture, "b", 0)
    async with _client(fixture) as client:
        held = asyncio.create_task(client.get("/v1/jobs/a/events"))
        await _until(lambda: api.hub.readers == 1)
        shared = asyncio.create_task(client.get("/v1/jobs/a/events"))  # the same job shares its reader
        await _until(lambda: sum(api.slots.open.values()) == 2)
        full = await client.get("/v1/jobs/b/events")
        assert full.status_code == 503 and full.json()["error"]["code"] == "too_many_jobs_streamed"
        assert "TANDEM_API_STREAM_JOBS" in full.json()["error"]["message"]
        _finish(fixture, "a")
        assert [r.status_code for r in await asyncio.gather(held, shared)] == [200, 200]
    assert json.loads(json.dumps(api.slots.open)) == {}


class _LateWrites:
    """The feed's Redis, with ``write`` run right after its first empty read: as if the job's last
    events and its end landed between that read and the feed's look at whether the job ended."""

    def __init__(self, inner: Any, write: Callable[[], None]) -> None:
        self.inner = inner
        self.write: Callable[[], None] | None = write

    async def xread(self, *args: Any, **kwargs: Any) -> Any:
        got = await self.inner.xread(*args, **kwargs)
        if not got and self.write is not None:
            write, self.write = self.write, None
            write()
        return got


async def test_events_written_just_before_the_end_is_seen_are_still_sent() -> None:
    fixture = Fixture()
    api = _api(fixture)
    first = _live_job(fixture, "job", 1)

    def end() -> None:
        fixture.store.publish("job", RoundStarted(round=1, max_rounds=20))
        _finish(fixture, "job")

    api.hub.wait_redis = _LateWrites(api.hub.wait_redis, end)  # type: ignore[assignment]
    async with _client(fixture) as client:
        response = await client.get("/v1/jobs/job/events", headers={"Last-Event-ID": first[0]})
    events, _ = sse(response.text)
    assert [e["event"] for e in events] == ["round_started", "final"]
    assert api.hub.wait_redis.write is None  # the late writes happened where they were meant to


def test_the_heartbeat_interval_is_the_setting_tandem_api_heartbeat() -> None:
    """``TANDEM_API_HEARTBEAT`` (whole seconds, 15 by default) is the interval the API's streams
    send heartbeats at; a bad value is refused naming the variable."""
    assert ApiSettings().heartbeat == 15
    assert ApiSettings.from_env({"TANDEM_API_HEARTBEAT": "2"}).heartbeat == 2
    for bad in ("0", "1.5", "soon", "-3"):
        with pytest.raises(SettingsError, match=re.escape(f"TANDEM_API_HEARTBEAT={bad!r} must be a whole")):
            ApiSettings.from_env({"TANDEM_API_HEARTBEAT": bad})
    settings = replace(Settings.from_env({}), api=ApiSettings(heartbeat=2))
    built = Api(
        settings,
        celery_app=Celery("heartbeat", broker="memory://", backend="cache+memory://"),
        redis=fakeredis.FakeRedis(),
        async_redis=fakeredis.FakeAsyncRedis(),
    )
    assert (built.heartbeat, built.hub.heartbeat, built.hub.block_ms) == (2, 2, 2000)
