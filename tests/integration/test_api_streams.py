"""Event streams of a real ``tandem api`` process on a real Redis: many clients of one job share one
Redis reader and each gets every event; a token past its stream limit gets 429.

Redis is a ``redis-server`` of the test's own (``bench.sse.OwnRedis``), so its ``CLIENT LIST``
shows only the API's connections and the test's (named ``bench``).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from bench.sse import TOKENS, ApiServer, Client, OwnRedis, follow, redis_clients
from tandem.tasks.job_events import ModelDelta
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.store import JobStore

pytestmark = pytest.mark.integration


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = OwnRedis()
    yield server
    server.stop()


def _running(store: JobStore, *jobs: str) -> None:
    for job in jobs:
        store.create(job, JobSpec(goal="g"))
        store.set_status(job, state="running")


async def _connected(clients: list[Client], timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not all(c.connected for c in clients):
            assert not [c for c in clients if c.error or c.status not in (0, 200)], "a client failed"
            await asyncio.sleep(0.05)


def test_170_clients_of_two_jobs_share_two_redis_readers_and_get_every_event(own_redis: OwnRedis) -> None:
    redis = Redis.from_url(own_redis.url, client_name="bench")
    store = JobStore(redis)
    _running(store, "busy", "quiet")
    api = ApiServer(own_redis.url)
    try:

        async def scenario() -> list[Client]:
            clients = [Client(job="busy", token=TOKENS[i % 3]) for i in range(150)]
            clients += [Client(job="quiet", token=TOKENS[3]) for _ in range(20)]
            tasks = [asyncio.create_task(follow(api.port, c)) for c in clients]
            await _connected(clients)
            # One reader per job waits in XREAD, however many clients follow it (each reader
            # starts once the clients' first reads leave it a connection of the request pool).
            readers: list[int] = []
            async with asyncio.timeout(20):
                while not readers or readers[-1] != 2:
                    listed = redis_clients(redis)
                    readers.append(sum(1 for c in listed if c.get("cmd") == "xread"))
                    await asyncio.sleep(0.05)
            assert max(readers) == 2, readers
            assert len(listed) <= 32 + 2 + 4  # the request pool, the readers, the API's sync client
            written = [
                store.publish(job, ModelDelta(round=0, role="actor", attempt="a", seq=i, content=f"t{i}"))
                for i in range(30)
                for job in ("busy", "quiet")
            ]
            assert len(written) == 60
            for job in ("busy", "quiet"):
                store.finish(JobResult(job_id=job, status="completed"), ttl=60)
            async with asyncio.timeout(60):
                await asyncio.gather(*tasks)
            return clients

        clients = asyncio.run(scenario())
        for job in ("busy", "quiet"):
            expected = [e.id for e in store.read_events(job, after="0")]
            assert len(expected) == 31
            for client in (c for c in clients if c.job == job):
                assert client.ended and client.ids == expected, client.error
    finally:
        api.stop()


def test_a_token_past_its_stream_limit_gets_429_and_others_are_unaffected(own_redis: OwnRedis) -> None:
    store = JobStore(Redis.from_url(own_redis.url))
    _running(store, "job")
    api = ApiServer(own_redis.url, {"TANDEM_API_MAX_STREAMS": "5"})
    try:

        async def scenario() -> None:
            held = [Client(job="job", token=TOKENS[0]) for _ in range(5)]
            tasks = [asyncio.create_task(follow(api.port, c)) for c in held]
            await _connected(held)
            base = f"http://127.0.0.1:{api.port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                mine = {"Authorization": f"Bearer {TOKENS[0]}"}
                refused = await http.get("/v1/jobs/job/events", headers=mine)
                assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
                error = refused.json()["error"]
                assert error["code"] == "too_many_streams" and "TANDEM_API_MAX_STREAMS" in error["message"]
                assert (await http.get("/healthz")).status_code == 200
                assert (await http.get("/v1/jobs/job", headers=mine)).status_code == 200
                theirs = Client(job="job", token=TOKENS[1])
                other = asyncio.create_task(follow(api.port, theirs))
                await _connected([theirs])
                store.finish(JobResult(job_id="job", status="completed"), ttl=60)
                async with asyncio.timeout(30):
                    await asyncio.gather(*tasks, other)
                assert all(c.ended for c in [*held, theirs])
                again = Client(job="job", token=TOKENS[0])  # the slots came back
                async with asyncio.timeout(30):
                    await follow(api.port, again)
                assert again.status == 200 and again.ended

        asyncio.run(scenario())
    finally:
        api.stop()
