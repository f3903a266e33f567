"""``JobHandle`` through a Redis outage, over fakeredis (``FakeServer.connected = False`` makes every
command raise redis's ``ConnectionError``, as a Redis being restarted does).

The same behaviour against a real redis-server that restarts, with real workers, is
``tests/integration/test_client_redis_restart.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from celery import Celery

from tandem.client.handle import JobHandle
from tandem.tasks.errors import JobLostError, JobTimeout, RedisUnavailable
from tandem.tasks.job_events import JobEvent
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.store import JobStore


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def store(server: fakeredis.FakeServer) -> JobStore:
    return JobStore(fakeredis.FakeRedis(server=server))


@pytest.fixture
def app() -> Celery:
    celery = Celery("test-client-outages", broker="memory://", backend="cache+memory://")
    celery.conf.result_expires = 3600
    return celery


def handle_for(job_id: str, store: JobStore, app: Celery, server: fakeredis.FakeServer) -> JobHandle:
    return JobHandle(job_id, store, app, aredis=lambda: fakeredis.FakeAsyncRedis(server=server))


def running(store: JobStore, job_id: str) -> None:
    store.create(job_id, JobSpec(goal="g"))
    store.set_status(job_id, state="running")
    store.publish(job_id, "job_started", {"spec": {"goal": "g"}})


def finish(store: JobStore, job_id: str) -> None:
    store.publish(job_id, "model_reply", {"round": 0, "role": "actor", "content": "done"})
    store.finish(JobResult(job_id=job_id, status="completed", deliverable="42", rounds=1), ttl=60)


def outage(
    server: fakeredis.FakeServer, seconds: float, then: Callable[[], Any] | None = None
) -> threading.Thread:
    """Redis away now for ``seconds``; back, then ``then()`` (what the workers write next)."""
    server.connected = False

    def back() -> None:
        time.sleep(seconds)
        server.connected = True
        if then is not None:
            then()

    thread = threading.Thread(target=back, daemon=True)
    thread.start()
    return thread


def test_status_rides_out_a_short_outage(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    running(store, "job-1")
    handle = handle_for("job-1", store, app, server)
    outage(server, 0.6).join(0)
    assert handle.status().state == "running"


def test_status_gives_up_after_its_window(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    running(store, "job-2")
    handle = handle_for("job-2", store, app, server)
    handle.reconnect_call = 0.5
    server.connected = False
    window = r"reached for \d+ s \(the 0.5 s reconnect window is over\); last error: FakeRedis"
    with pytest.raises(RedisUnavailable, match=window):
        handle.status()
    with pytest.raises(RedisUnavailable, match="may still be running"):
        asyncio.run(handle.astatus())


def test_result_rides_out_an_outage_and_returns_the_result(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-3")
    handle = handle_for("job-3", store, app, server)
    back = outage(server, 1.0, then=lambda: finish(store, "job-3"))
    result = handle.result(timeout=20)
    back.join()
    assert (result.status, result.deliverable) == ("completed", "42")


def test_aresult_rides_out_an_outage_and_returns_the_result(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-4")
    handle = handle_for("job-4", store, app, server)
    back = outage(server, 1.0, then=lambda: finish(store, "job-4"))
    result = asyncio.run(handle.aresult(timeout=20))
    back.join()
    assert (result.status, result.deliverable) == ("completed", "42")


def test_a_wait_ends_at_its_timeout_with_redis_unavailable(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-5")
    handle = handle_for("job-5", store, app, server)
    server.connected = False
    with pytest.raises(RedisUnavailable, match="the wait's timeout is over"):
        handle.result(timeout=0.8)
    with pytest.raises(RedisUnavailable, match="the wait's timeout is over"):
        asyncio.run(handle.aresult(timeout=0.8))
    server.connected = True
    with pytest.raises(JobTimeout, match=r"state: running"):  # reachable: an ordinary timeout
        handle.result(timeout=0.3)


def follow_across_an_outage(
    store: JobStore, server: fakeredis.FakeServer, job_id: str, read: Callable[[threading.Event], list[Any]]
) -> list[Any]:
    """Run ``read`` (which sets the event after the first 2 events) while Redis goes away for
    2.5 s (longer than one blocking read of the stream), then the job goes on and ends."""
    two = threading.Event()

    def later() -> None:
        two.wait(10)
        outage(server, 2.5, then=lambda: (
            store.publish(job_id, "round_started", {"round": 1, "max_rounds": 3}),
            finish(store, job_id),
        )).join()

    driver = threading.Thread(target=later, daemon=True)
    driver.start()
    got = read(two)
    driver.join(10)
    return got


def test_events_read_on_after_an_outage_without_loss_or_repeat(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-6")
    store.publish("job-6", "round_started", {"round": 0, "max_rounds": 3})
    handle = handle_for("job-6", store, app, server)

    def read(two: threading.Event) -> list[JobEvent]:
        got = []
        for event in handle.events(timeout=20):
            got.append(event)
            if len(got) == 2:
                two.set()
        return got

    got = follow_across_an_outage(store, server, "job-6", read)
    assert [e.id for e in got] == [e.id for e in store.read_events("job-6")]
    assert [e.type for e in got] == ["job_started", "round_started", "round_started", "model_reply", "final"]


def test_aevents_read_on_after_an_outage_without_loss_or_repeat(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-7")
    store.publish("job-7", "round_started", {"round": 0, "max_rounds": 3})
    handle = handle_for("job-7", store, app, server)

    def read(two: threading.Event) -> list[JobEvent]:
        async def collect() -> list[JobEvent]:
            got = []
            async for event in handle.aevents(timeout=20):
                got.append(event)
                if len(got) == 2:
                    two.set()
            return got

        return asyncio.run(collect())

    got = follow_across_an_outage(store, server, "job-7", read)
    assert [e.id for e in got] == [e.id for e in store.read_events("job-7")]
    assert got[-1].type == "final"


def test_events_from_now_skip_nothing_across_an_outage(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-8")
    handle = handle_for("job-8", store, app, server)

    def later() -> None:
        time.sleep(0.3)  # the iterator is waiting for the next new event
        outage(server, 2.5, then=lambda: (
            store.publish("job-8", "round_started", {"round": 0, "max_rounds": 3}),
            finish(store, "job-8"),
        )).join()

    driver = threading.Thread(target=later, daemon=True)
    driver.start()
    got = [e.type for e in handle.events(after="$", timeout=20)]
    driver.join()
    assert got == ["round_started", "model_reply", "final"]  # not job_started; nothing new missed


def test_cancel_rides_out_an_outage(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    running(store, "job-9")
    handle = handle_for("job-9", store, app, server)
    outage(server, 0.5).join(0)
    handle.cancel()
    assert store.cancel_requested("job-9")
    outage(server, 0.5).join(0)
    asyncio.run(handle.acancel())
    assert store.cancel_requested("job-9")


def test_a_job_a_handle_saw_is_reported_lost_when_it_vanishes(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-10")
    handle = handle_for("job-10", store, app, server)  # not the submitter: it sees the job running
    assert handle.status().state == "running"
    store.redis.flushall()  # what a restart without persistence leaves
    with pytest.raises(JobLostError, match="job 'job-10' is lost"):
        handle.status()
    with pytest.raises(JobLostError, match="job 'job-10' is lost"):
        handle.result(timeout=10)
    with pytest.raises(JobLostError, match="job 'job-10' is lost"):
        asyncio.run(handle.aresult(timeout=10))


def test_events_raise_lost_when_the_followed_job_vanishes(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    running(store, "job-11")
    handle = handle_for("job-11", store, app, server)
    stream = handle.events(timeout=20)
    assert next(stream).type == "job_started"
    store.redis.flushall()
    with pytest.raises(JobLostError, match="job 'job-11' is lost"):
        next(stream)

    async def follow() -> None:
        async for _event in handle.aevents(timeout=20):
            pass

    with pytest.raises(JobLostError, match="job 'job-11' is lost"):
        asyncio.run(follow())


def test_a_job_never_seen_stays_unknown_not_lost(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    handle = handle_for("nope", store, app, server)
    assert list(handle.events(timeout=3)) == []
    with pytest.raises(JobTimeout):
        handle.result(timeout=1.2)
