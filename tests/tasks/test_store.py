"""``JobStore`` on fakeredis: every write a step makes is idempotent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, Usage
from tandem.tasks.job_events import (
    EventError,
    Final,
    JobEvent,
    JobStarted,
    ModelReply,
    OtherEvent,
    RoundStarted,
    StreamSettings,
    Waiting,
)
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.keys import CLIENT_PARTS, JOB_PARTS, live_shard_key, live_shard_of
from tandem.tasks.state.store import JobStore
from tests.tasks.slots import SlotCheckingRedis

JOB = "job-1"


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def store(server: fakeredis.FakeServer) -> JobStore:
    """A store on fakeredis with Redis Cluster's one-slot rule (``tests.tasks.slots``): a
    transaction over two slots fails here as on a cluster."""
    return JobStore(SlotCheckingRedis(server=server), prefix="t")


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


def test_a_cancel_brings_the_jobs_next_look_forward_and_never_indexes_an_unknown_job(store: JobStore) -> None:
    """A waiting job's next look may be far off (a parked one's: its lease after intake); the
    cancel moves it to now, so the reconciler ends the job at its next sweep."""
    live = live_shard_key(store.prefix, live_shard_of(JOB))
    store.redis.zadd(live, {JOB: time.time() + 3600})
    store.request_cancel(JOB)
    assert store.redis.zscore(live, JOB) <= time.time()
    soon = time.time() - 60
    store.redis.zadd(live, {JOB: soon})
    store.request_cancel(JOB)  # never later than it was
    assert store.redis.zscore(live, JOB) == soon
    store.request_cancel(unknown := "job-unknown")
    assert store.redis.zscore(live_shard_key(store.prefix, live_shard_of(unknown)), unknown) is None


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


def test_a_clients_end_names_and_expires_only_the_parts_its_redis_user_may_write(store: JobStore) -> None:
    """A client cancelling a queued job ends it with ``parts`` (docs/security.md: its Redis user
    writes only ``CLIENT_PARTS``): the other parts keep their TTL and are not even a script key."""
    populate(store)
    store.redis.expire(store.key(JOB, "spec"), 5000)
    named: list[list[str]] = []
    run = store.machine._run_waited

    def spy(name: str, job_id: str, keys: Any, args: Any, what: str) -> Any:
        named.append(list(keys))
        return run(name, job_id, keys, args, what)

    store.machine._run_waited = spy  # type: ignore[method-assign]
    parts = [p for p in JOB_PARTS if p in CLIENT_PARTS]
    stored = store.finish(JobResult(job_id=JOB, status="cancelled"), ttl=300, parts=parts)
    assert stored.status == "cancelled" and store.status(JOB).state == "cancelled"  # type: ignore[union-attr]
    assert {k.rsplit(":", 1)[1] for k in named[0]} == {"state", "intake", "cancel", "events", "result"}
    for part in ("state", "result", "events", "cancel"):
        assert 0 < store.redis.ttl(store.key(JOB, part)) <= 300, part
    assert store.redis.ttl(store.key(JOB, "spec")) > 300


def test_finish_publishes_the_final_event(store: JobStore) -> None:
    populate(store)
    stored = store.finish(JobResult(job_id=JOB, status="truncated", error="budget"), ttl=60)
    events = list(store.events(JOB, timeout=30))
    assert [e.type for e in events] == ["round_started", "final"]
    assert events[-1].data == stored.model_dump(mode="json")
    assert isinstance(events[-1], Final) and events[-1].result() == stored


# -- events -------------------------------------------------------------------------------------------


def test_events_round_trip_and_stop_after_final(store: JobStore) -> None:
    store.publish(JOB, "job_started", {"spec": {"goal": "g"}})
    # A newer writer's entry, with a field this version does not know (readers keep it):
    newer = {"round": 0, "role": "actor", "content": "héllo", "n": 1}
    store.redis.xadd(
        store.key(JOB, "events"), {"type": "model_reply", "data": json.dumps(newer), "at": "1.0"}
    )
    store.publish(JOB, "final", {"status": "completed"})
    store.publish(JOB, "round_started", {"round": 1, "max_rounds": 2})

    events = list(store.events(JOB, timeout=30))

    assert [type(e) for e in events] == [JobStarted, ModelReply, Final]
    assert [e.type for e in events] == ["job_started", "model_reply", "final"]
    reply = events[1]
    assert isinstance(reply, ModelReply)
    assert (reply.round, reply.role, reply.content) == (0, "actor", "héllo")
    assert reply.data["n"] == 1  # a field the writer added is kept
    assert all(isinstance(e.id, str) and e.at > 0 for e in events)
    assert len({e.id for e in events}) == 3


def test_writers_are_strict_an_unknown_field_is_refused(store: JobStore) -> None:
    with pytest.raises(EventError, match=r"'model_reply': unknown field\(s\) \['n'\]"):
        store.publish(JOB, "model_reply", {"round": 0, "role": "actor", "n": 1})
    with pytest.raises(EventError, match=r"'waiting': unknown field\(s\) \['retry'\]"):
        store.publish(JOB, Waiting(reason="rpm", retry=3))  # type: ignore[call-arg]
    assert store.read_events(JOB) == []


def test_publish_refuses_an_event_that_does_not_fit_its_kind(store: JobStore) -> None:
    with pytest.raises(EventError, match=r"'model_reply': field 'round': Field required"):
        store.publish(JOB, "model_reply", {"role": "actor"})
    with pytest.raises(EventError, match=r"unknown event type 'after_final': use one of job_started"):
        store.publish(JOB, "after_final", {})
    assert store.read_events(JOB) == []


def test_events_of_the_plain_dict_format_stay_readable(store: JobStore) -> None:
    """Entries written by an earlier version, or a newer one's unknown kind, are read, not dropped."""
    key = store.key(JOB, "events")
    store.redis.xadd(key, {"type": "model_reply", "data": json.dumps({"role": "actor"}), "at": "1.5"})
    store.redis.xadd(key, {"type": "shiny_new", "data": json.dumps({"x": [1]}), "at": "2"})
    store.redis.xadd(key, {"type": "final", "data": json.dumps({"status": "completed"}), "at": "3"})

    old, new, final = store.events(JOB, timeout=30)

    assert isinstance(old, OtherEvent) and old["type"] == "model_reply" and old["data"] == {"role": "actor"}
    assert isinstance(new, OtherEvent) and new.data == {"x": [1]} and new.at == 2.0
    assert isinstance(final, Final) and final.result().status == "completed"


def test_events_resume_after_a_given_id(store: JobStore) -> None:
    store.publish(JOB, RoundStarted(round=0, max_rounds=2))
    store.publish(JOB, RoundStarted(round=1, max_rounds=2))
    store.publish(JOB, "final", {"status": "failed"})
    first, *_ = store.events(JOB, timeout=30)
    rest = list(store.events(JOB, last_id=first.id, timeout=30))
    assert [(e.type, e.data.get("round")) for e in rest] == [("round_started", 1), ("final", None)]
    assert [e.id for e in store.read_events(JOB, after=first.id)] == [e.id for e in rest]


def test_events_from_now_skip_what_was_written_before(store: JobStore, server: fakeredis.FakeServer) -> None:
    store.set_status(JOB, state="running")
    store.publish(JOB, RoundStarted(round=0, max_rounds=2))
    reading = store.events(JOB, last_id="$", block_ms=50, timeout=60)
    writer = JobStore(fakeredis.FakeRedis(server=server), prefix="t")

    def end() -> None:  # a finisher ends the record, then publishes ``final``
        writer.set_status(JOB, state="completed")
        writer.publish(JOB, "final", {"status": "completed"})

    threading.Timer(0.3, end).start()
    started = time.monotonic()
    assert [e.type for e in reading] == ["final"]
    assert time.monotonic() - started < 30  # the final ends the stream, not the 60 s timeout


def test_the_stream_is_capped_and_expires(server: fakeredis.FakeServer) -> None:
    capped = JobStore(
        fakeredis.FakeRedis(server=server), prefix="t", ttl=120, stream=StreamSettings(maxlen=100)
    )
    for i in range(1000):
        capped.publish(JOB, RoundStarted(round=i, max_rounds=1000))
    key = capped.key(JOB, "events")
    assert 100 <= capped.redis.xlen(key) < 1000
    assert 0 < capped.redis.ttl(key) <= 120


def test_a_refused_job_leaves_nothing_behind_but_a_started_one_stays(store: JobStore) -> None:
    store.mark_queued("refused")
    store.mark_queued("started")
    store.create("started", JobSpec(goal="g"))
    store.discard_queued("refused")
    store.discard_queued("started")
    store.discard_queued("never")
    assert store.status("refused") is None
    assert [s.job_id for s in store.recent(10)] == ["started"]
    assert list(store.redis.scan_iter("t:job:refused:*")) == []


def test_submitted_jobs_are_listed_newest_first(store: JobStore) -> None:
    store.mark_queued("a")
    store.mark_queued("b")
    store.create("c", JobSpec(goal="g", reasoner="mono"))
    assert not store.mark_queued("c")  # an existing job keeps its status
    assert [s.job_id for s in store.recent(10)] == ["c", "b", "a"]
    assert store.recent(10)[0].reasoner == "mono"
    assert [s.job_id for s in store.recent(1)] == ["c"]
    assert 0 < store.redis.ttl(store.key("a", "state")) <= store.ttl
    store.set_status("a", state="running")  # later writes keep the TTL
    assert 0 < store.redis.ttl(store.key("a", "state")) <= store.ttl


def test_the_recent_jobs_index_is_sharded_and_merged_newest_first(store: JobStore) -> None:
    """No hot key: jobs fall into ``RECENT_SHARDS`` sorted sets, ``recent`` merges their newest
    (and reads the unsharded index of earlier versions until it expires)."""
    from tandem.tasks.state.keys import RECENT_SHARDS, recent_shard_key

    ids = [f"job-{i}" for i in range(40)]
    start = time.time() - 100
    for i, job_id in enumerate(ids):
        store.remember(job_id, at=start + i)
        store.set_status(job_id, state="queued")
    store.redis.zadd("t:recent-jobs", {"old-job": start - 1})
    store.set_status("old-job", state="queued")
    shards = {recent_shard_key("t", job_id) for job_id in ids}
    assert len(shards) > RECENT_SHARDS // 2
    newest = [s.job_id for s in store.recent(45)]
    assert newest == [*reversed(ids), "old-job"]
    assert [s.job_id for s in store.recent(3)] == ["job-39", "job-38", "job-37"]
    assert all(0 < store.redis.ttl(key) <= store.ttl for key in shards)


def test_a_tenant_lists_its_jobs_however_many_newer_jobs_other_tenants_have(store: JobStore) -> None:
    """Each tenant has its own index: its jobs are listed though the newest ``RECENT_LIMIT`` of all
    tenants are another's, and another tenant's jobs never are."""
    from tandem.tasks.state.keys import tenant_recent_keys
    from tandem.tasks.state.recent import RECENT_LIMIT

    start = time.time() - 10_000
    for i in range(3):
        store.remember(f"mine-{i}", at=start + i, owner="team-a")
        store.set_status(f"mine-{i}", state="queued", owner="team-a")
    pipe = store.redis.pipeline(transaction=False)
    for i in range(RECENT_LIMIT + 50):  # newer jobs of another tenant crowd the shared index
        store.remember(f"theirs-{i}", start + 100 + i, owner="team-b", pipe=pipe)
        pipe.hset(store.key(f"theirs-{i}", "state"), mapping={"state": "queued", "owner": "team-b"})
    pipe.execute()
    assert [s.job_id for s in store.recent(10, owner="team-a")] == ["mine-2", "mine-1", "mine-0"]
    assert [s.job_id for s in store.recent(2, owner="team-a")] == ["mine-2", "mine-1"]
    assert {s.owner for s in store.recent(200, owner="team-b")} == {"team-b"}
    assert len(store.recent(200, owner="team-b")) == 200
    assert store.recent(5, owner="team-c") == []
    assert all(0 < store.redis.ttl(key) <= store.ttl for key in tenant_recent_keys("t", "team-b"))


def test_a_tenants_jobs_indexed_before_tenants_had_an_index_are_still_listed(store: JobStore) -> None:
    store.remember("legacy")  # indexed by an earlier version: the shared index only
    store.set_status("legacy", state="queued", owner="team-a")
    store.mark_queued("new", owner="team-a")
    store.mark_queued("other", owner="team-b")
    assert [s.job_id for s in store.recent(10, owner="team-a")] == ["new", "legacy"]


def test_events_arrive_while_the_job_runs(store: JobStore, server: fakeredis.FakeServer) -> None:
    """A reader started before the events sees them as they are published."""
    writer = JobStore(fakeredis.FakeRedis(server=server), prefix="t")
    store.set_status(JOB, state="running")
    reading: Iterator[JobEvent] = store.events(JOB, block_ms=50, timeout=60)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.extend(e.type for e in reading))
    reader.start()
    started = time.monotonic()
    writer.publish(JOB, "round_started", {"round": 0, "max_rounds": 1})
    writer.set_status(JOB, state="completed")  # a finisher ends the record, then publishes ``final``
    writer.publish(JOB, "final", {"status": "completed"})
    reader.join()
    assert got == ["round_started", "final"]
    assert time.monotonic() - started < 30  # the final ends the stream, not the 60 s timeout


def test_events_of_an_unknown_job_end(store: JobStore) -> None:
    assert list(store.events("nope", block_ms=10, timeout=30)) == []


def test_a_start_makes_its_stream_with_the_record(store: JobStore) -> None:
    from tandem.tasks.job_events import make_event

    started = store.entry(make_event("job_started", {"spec": {"goal": "g"}}))
    pipe = store.redis.pipeline(transaction=False)
    store.remember(JOB, pipe=pipe)
    assert store.recent() == []  # queued on the pipeline, not run
    pipe.execute()
    assert [s.job_id for s in store.recent()] == []  # no record yet: left out
    spec = JobSpec(goal="g").model_dump_json()
    assert store.machine.create(
        JOB, spec, "dual", (0, "thinker"), [], timeout=700, ttl_after=77, started=started
    )
    (event,) = store.read_events(JOB)
    assert event.type == "job_started" and event.data["spec"] == {"goal": "g"}
    assert 770 < store.redis.ttl(store.key(JOB, "events")) <= 777  # the record's: timeout + ttl_after
    assert [s.job_id for s in store.recent()] == [JOB]
    again = store.machine.create(
        JOB, spec, "dual", (0, "thinker"), [], timeout=700, ttl_after=77, started=started
    )
    assert not again and len(store.read_events(JOB)) == 1  # a duplicate start writes no second event
