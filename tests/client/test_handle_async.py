"""``JobHandle``'s asyncio methods and ``submit_async`` over fakeredis (one server shared by the
sync store that "workers" write with and the asyncio client the handle reads with)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import fakeredis
import pytest
from celery import Celery

from tandem.client.handle import JobHandle
from tandem.client.submission import submit_async
from tandem.tasks.errors import DecisionRefused, JobSpecError, JobTimeout, ResumeRefused
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
    celery = Celery("test-async-client", broker="memory://", backend="cache+memory://")
    celery.conf.result_expires = 3600  # as the tandem app sets it: seconds
    return celery


def handle_for(job_id: str, store: JobStore, app: Celery, server: fakeredis.FakeServer) -> JobHandle:
    return JobHandle(job_id, store, app, aredis=lambda: fakeredis.FakeAsyncRedis(server=server))


def run_job(store: JobStore, job_id: str, delay: float = 0.0) -> None:
    """What workers would write: start, a round, a reply, then the final result."""
    store.create(job_id, JobSpec(goal="g"))
    store.set_status(job_id, state="running")
    store.publish(job_id, "job_started", {"spec": {"goal": "g"}})
    time.sleep(delay)
    store.publish(job_id, "round_started", {"round": 0, "max_rounds": 3})
    store.publish(job_id, "model_reply", {"round": 0, "role": "actor", "content": "done"})
    store.finish(JobResult(job_id=job_id, status="completed", deliverable="42", rounds=1), ttl=60)


def test_aresult_wakes_on_the_final_event(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    handle = handle_for("job-1", store, app, server)
    writer = threading.Timer(0.3, run_job, args=(store, "job-1"))
    writer.start()
    try:
        started = time.monotonic()
        result = asyncio.run(handle.aresult(timeout=10))
    finally:
        writer.join()
    assert (result.status, result.deliverable) == ("completed", "42")
    assert 0.25 < time.monotonic() - started < 5
    assert result == handle.result(timeout=1)


def test_aresult_times_out_with_the_state(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    store.create("job-2", JobSpec(goal="g"))
    store.set_status("job-2", state="running")
    with pytest.raises(JobTimeout, match=r"job job-2 has not ended after 0.3 s \(state: running\)"):
        asyncio.run(handle_for("job-2", store, app, server).aresult(timeout=0.3))


def test_aresult_reads_a_result_only_celery_holds(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    refused = JobResult(job_id="job-3", status="failed", error="approve_tools=...: cannot wait")
    app.backend.store_result("job-3", refused.model_dump(mode="json"), "SUCCESS")
    assert asyncio.run(handle_for("job-3", store, app, server).aresult(timeout=5)) == refused


def test_aevents_yields_what_events_yields(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    handle = handle_for("job-4", store, app, server)

    async def collect() -> list[dict[str, Any]]:
        return [event async for event in handle.aevents(timeout=10)]

    writer = threading.Timer(0.2, run_job, args=(store, "job-4", 0.2))
    writer.start()
    try:
        live = asyncio.run(collect())
    finally:
        writer.join()
    assert [e["type"] for e in live] == ["job_started", "round_started", "model_reply", "final"]
    assert live == list(handle.events(timeout=5))
    assert live[-1]["data"]["deliverable"] == "42"


def test_aevents_of_an_unknown_job_ends(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    async def collect() -> list[dict[str, Any]]:
        return [event async for event in handle_for("nope", store, app, server).aevents(timeout=5)]

    started = time.monotonic()
    assert asyncio.run(collect()) == []
    assert time.monotonic() - started < 4


def test_acancel_of_a_running_job_sets_the_flag(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    store.create("job-5", JobSpec(goal="g"))
    store.set_status("job-5", state="running")
    asyncio.run(handle_for("job-5", store, app, server).acancel())
    assert store.cancel_requested("job-5")
    assert store.result("job-5") is None  # the job ends at its next step, on a worker


def test_acancel_flags_the_children_the_job_started(
    store: JobStore, app: Celery, server: fakeredis.FakeServer
) -> None:
    store.create("job-8", JobSpec(goal="g", owner="team-a"))
    store.set_status("job-8", state="waiting_for_children")
    store.create("job-8-child", JobSpec(goal="c", owner="team-a", parent_id="job-8"))
    store.set_status("job-8-child", state="running")
    store.redis.zadd(store.key("job-8", "children"), {"job-8-child": 1.0})
    asyncio.run(handle_for("job-8", store, app, server).acancel())
    assert store.cancel_requested("job-8") and store.cancel_requested("job-8-child")


def test_acancel_of_a_queued_job_ends_it(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    store.create("job-6", JobSpec(goal="g"))
    handle = handle_for("job-6", store, app, server)
    asyncio.run(handle.acancel())
    assert store.cancel_requested("job-6")
    result = asyncio.run(handle.aresult(timeout=2))
    assert (result.status, result.error) == ("cancelled", "cancelled before it started")
    assert asyncio.run(handle.astatus()).state == "cancelled"


def test_submit_async_refuses_an_invalid_spec_before_sending(store: JobStore, app: Celery) -> None:
    sent: list[Any] = []
    app.send_task = lambda *a, **k: sent.append((a, k))  # type: ignore[method-assign]
    with pytest.raises(JobSpecError, match="'approval_timeout_s'"):
        asyncio.run(submit_async({"goal": "g", "approval_timeout_s": -1}, app=app, store=store))
    assert sent == []


def test_submit_async_sends_tandem_infer(store: JobStore, app: Celery, server: fakeredis.FakeServer) -> None:
    sent: list[dict[str, Any]] = []

    class Sent:
        id = "job-7"

    def send_task(name: str, kwargs: dict[str, Any], **options: Any) -> Sent:
        sent.append({"name": name, "kwargs": kwargs, "thread": threading.current_thread().name, **options})
        return Sent()

    app.send_task = send_task  # type: ignore[method-assign,assignment]
    factory = lambda: fakeredis.FakeAsyncRedis(server=server)  # noqa: E731
    handle = asyncio.run(submit_async({"goal": "count"}, app=app, store=store, aredis=factory))
    [message] = sent
    assert handle.id == message["task_id"]  # the id is chosen, and marked queued, before sending
    assert message["name"] == "tandem.infer" and message["kwargs"]["spec"]["goal"] == "count"
    assert message["thread"] != threading.main_thread().name, "the blocking send ran off the loop"
    assert asyncio.run(handle.astatus()).state == "queued"


class _Reply:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self, timeout: float) -> Any:
        return self.value


class _Workers:
    """A Celery app whose control tasks answer at once, as a worker would (recording what was sent)."""

    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    def send_task(self, name: str, kwargs: dict[str, Any]) -> _Reply:
        self.sent.append((name, kwargs, threading.current_thread().name))
        return _Reply(self.replies[name])


def test_the_async_controls_send_what_the_sync_ones_send_off_the_event_loop(store: JobStore) -> None:
    decided = [{"index": 1, "approve": True}, {"index": 2, "approve": False, "reason": "no"}]
    workers = _Workers(
        {
            "tandem.decide": {"accepted": True, "decisions": decided},
            "tandem.resume": {"accepted": True},
            "tandem.fork": {"accepted": True, "fork_id": "job-2"},
        }
    )
    handle = JobHandle("job-1", store, workers)  # type: ignore[arg-type]

    async def run() -> tuple[Any, ...]:
        approved = await handle.aapprove(1, args={"text": "hi"}, pause_id="P", idempotency_key="k1")
        rejected = await handle.areject("no", 2, pause_id="P", idempotency_key="k2")
        both = await handle.adecide(True, pause_id="P", idempotency_key="k3")
        resumed = await handle.aresume(max_rounds=9)
        forked = await handle.afork(2, "new goal", max_rounds=5)
        return approved, rejected, both, resumed, forked

    approved, rejected, both, resumed, forked = asyncio.run(run())
    assert [(d.index, d.approve) for d in approved] == [(1, True), (2, False)] and rejected == both
    assert resumed is handle and forked.id == "job-2"
    assert [(name, kwargs) for name, kwargs, _ in workers.sent] == [
        (
            "tandem.decide",
            {
                "job_id": "job-1",
                "decisions": [{"index": 1, "approve": True, "args": {"text": "hi"}}],
                "pause_id": "P",
                "idempotency_key": "k1",
            },
        ),
        (
            "tandem.decide",
            {
                "job_id": "job-1",
                "decisions": [{"index": 2, "approve": False, "reason": "no"}],
                "pause_id": "P",
                "idempotency_key": "k2",
            },
        ),
        ("tandem.decide", {"job_id": "job-1", "decisions": True, "pause_id": "P", "idempotency_key": "k3"}),
        ("tandem.resume", {"job_id": "job-1", "max_rounds": 9}),
        ("tandem.fork", {"job_id": "job-1", "round": 2, "goal": "new goal", "max_rounds": 5}),
    ]
    assert all(thread != "MainThread" for _, _, thread in workers.sent)  # the loop never blocked


def test_the_async_controls_raise_the_refusals(store: JobStore) -> None:
    refused = {"accepted": False, "error": "job 'job-1' is not waiting for a decision", "reason": "state"}
    handle = JobHandle("job-1", store, _Workers({"tandem.decide": refused, "tandem.resume": refused}))  # type: ignore[arg-type]
    with pytest.raises(DecisionRefused, match="not waiting for a decision"):
        asyncio.run(handle.aapprove())  # it waits on no pause: refused before anything is sent
    with pytest.raises(DecisionRefused, match="not waiting for a decision"):
        asyncio.run(handle.aapprove(pause_id="P"))  # the worker's refusal
    with pytest.raises(ResumeRefused) as no:
        asyncio.run(handle.aresume())
    assert no.value.reason == "state"
