"""``JobStore`` on fakeredis: every write a step makes is idempotent."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import fakeredis
import pytest

from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, Usage
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.store import JobStore

JOB = "job-1"


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def store(server: fakeredis.FakeServer) -> JobStore:
    return JobStore(fakeredis.FakeRedis(server=server), prefix="t")


def result(index: int, output: str) -> FunctionCallResult:
    return FunctionCallResult(index=index, name="add", status=FunctionCallStatus.SUCCEEDED, output=output)


# -- spec and status --------------------------------------------------------------------------------


def test_create_is_idempotent(store: JobStore) -> None:
    assert store.create(JOB, JobSpec(goal="first", reasoner="mono")) is True
    store.set_status(JOB, state="running", round=2)
    assert store.create(JOB, JobSpec(goal="second")) is False

    spec = store.spec(JOB)
    status = store.status(JOB)
    assert spec is not None and spec.goal == "first"
    assert status is not None and (status.state, status.round, status.reasoner) == ("running", 2, "mono")


def test_an_unknown_job_has_nothing(store: JobStore) -> None:
    assert (store.spec("nope"), store.status("nope"), store.result("nope")) == (None, None, None)
    assert not store.cancel_requested("nope")


def test_keys_live_under_the_prefix(store: JobStore) -> None:
    assert store.key(JOB, "spec") == "t:{job-1}:spec"
    assert store.memory(JOB).key == "t:{job-1}:memory"
    assert store.keys(JOB)[0] == "t:{job-1}:state"
    assert len(set(store.keys(JOB))) == len(store.keys(JOB))


def test_status_moves_on_until_a_final_state(store: JobStore) -> None:
    store.create(JOB, JobSpec(goal="g"))
    first = store.status(JOB)
    assert first is not None and first.state == "queued"

    running = store.set_status(JOB, state="running", round=1, step="actor")
    assert (running.state, running.round, running.step) == ("running", 1, "actor")
    assert running.updated_at > 0

    done = store.set_status(JOB, state="completed")
    assert done.state == "completed"
    kept = store.set_status(JOB, state="running", round=5)
    assert (kept.state, kept.round) == ("completed", 1)
    assert store.status(JOB) == done

    # The same final state may be written again, with details (finish does this).
    again = store.set_status(JOB, state="completed", error=None, step="finalize")
    assert (again.state, again.step) == ("completed", "finalize")
    assert store.set_status(JOB, state="cancelled").state == "completed"


@pytest.mark.parametrize("final", ["completed", "truncated", "failed", "cancelled"])
def test_no_final_state_is_replaced(store: JobStore, final: str) -> None:
    store.set_status(JOB, state=final)
    for state in ("queued", "running", "completed", "truncated", "failed", "cancelled"):
        store.set_status(JOB, state=state)
    status = store.status(JOB)
    assert status is not None and status.state == final


# -- tool results and transitions -------------------------------------------------------------------


def save(store: JobStore, round_no: int, r: FunctionCallResult) -> None:
    store.redis.hset(store.key(JOB, "tools"), f"{round_no}:{r.index}", r.model_dump_json())


def test_tool_results_come_in_call_order_with_gaps(store: JobStore) -> None:
    save(store, 2, result(3, "c"))
    save(store, 2, result(1, "a"))
    found = store.tool_results(JOB, 2, 3)
    assert [r.output if r else None for r in found] == ["a", None, "c"]
    assert store.tool_results(JOB, 2, 0) == []
    assert store.tool_result(JOB, 2, 3) is not None and store.tool_result(JOB, 2, 2) is None


def test_cancellation_flag(store: JobStore) -> None:
    store.request_cancel(JOB)
    assert store.cancel_requested(JOB)


# -- finish -------------------------------------------------------------------------------------------


def populate(store: JobStore) -> None:
    store.create(JOB, JobSpec(goal="g"))
    store.set_status(JOB, state="running")
    store.memory(JOB).add_message(ModelMessage(role="actor", content="x"))
    save(store, 0, result(1, "a"))
    store.request_cancel(JOB)
    store.publish(JOB, "round_started", {"round": 0, "max_rounds": 3})


def test_finish_stores_once_sets_the_status_and_ttls(store: JobStore) -> None:
    populate(store)
    first = JobResult(job_id=JOB, status="completed", deliverable="84", rounds=2, usage=Usage(calls=4))
    assert store.finish(first, ttl=300) == first
    late = JobResult(job_id=JOB, status="failed", error="a duplicate step failed")
    assert store.finish(late, ttl=300) == first  # the first result stays

    assert store.result(JOB) == first
    status = store.status(JOB)
    assert status is not None and (status.state, status.step, status.error) == ("completed", "finalize", None)
    for part in ("spec", "state", "result", "events", "cancel", "tools", "memory"):
        ttl = store.redis.ttl(store.key(JOB, part))
        assert 0 < ttl <= 300, part


def test_finish_publishes_the_final_event(store: JobStore) -> None:
    populate(store)
    stored = store.finish(JobResult(job_id=JOB, status="truncated", error="budget"), ttl=60)
    events = list(store.events(JOB, timeout=30))
    assert [e["type"] for e in events] == ["round_started", "final"]
    assert events[-1]["data"] == stored.model_dump(mode="json")


# -- events -------------------------------------------------------------------------------------------


def test_events_round_trip_and_stop_after_final(store: JobStore) -> None:
    store.publish(JOB, "job_started", {"spec": {"goal": "g"}})
    store.publish(JOB, "model_reply", {"role": "actor", "content": "héllo", "n": 1})
    store.publish(JOB, "final", {"status": "completed"})
    store.publish(JOB, "after_final", {})

    events = list(store.events(JOB, timeout=30))

    assert [(e["type"], e["data"]) for e in events] == [
        ("job_started", {"spec": {"goal": "g"}}),
        ("model_reply", {"role": "actor", "content": "héllo", "n": 1}),
        ("final", {"status": "completed"}),
    ]
    assert all(isinstance(e["id"], str) and e["at"] > 0 for e in events)
    assert len({e["id"] for e in events}) == 3


def test_events_resume_after_a_given_id(store: JobStore) -> None:
    store.publish(JOB, "round_started", {"round": 0})
    store.publish(JOB, "round_started", {"round": 1})
    store.publish(JOB, "final", {})
    first, *_ = store.events(JOB, timeout=30)
    rest = list(store.events(JOB, last_id=first["id"], timeout=30))
    assert [(e["type"], e["data"]) for e in rest] == [("round_started", {"round": 1}), ("final", {})]


def test_events_arrive_while_the_job_runs(store: JobStore, server: fakeredis.FakeServer) -> None:
    """A reader started before the events sees them as they are published."""
    writer = JobStore(fakeredis.FakeRedis(server=server), prefix="t")
    store.set_status(JOB, state="running")
    reading: Iterator[dict[str, object]] = store.events(JOB, block_ms=50, timeout=60)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.extend(e["type"] for e in reading))
    reader.start()
    writer.publish(JOB, "round_started", {"round": 0})
    writer.publish(JOB, "final", {"status": "completed"})
    reader.join()
    assert got == ["round_started", "final"]


def test_events_of_an_unknown_job_end(store: JobStore) -> None:
    assert list(store.events("nope", block_ms=10, timeout=30)) == []
