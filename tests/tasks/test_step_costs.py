"""What a step costs Redis: scripts touch only the keys they write, a step claims and reads what it
needs in one round trip, events are one ``XADD``, and one thread renews every lease of a process."""

from __future__ import annotations

import time
from typing import Any

import fakeredis
import pytest

from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.tasks.job_events import RoundStarted
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Claim, ClaimRefused
from tandem.tasks.state.leases import Heartbeat, LeaseKeeper
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.pending import PendingMemory
from tandem.tasks.state.store import JobStore
from tandem.tasks.state.views import ViewAsk
from tests.tasks.round_trips import count_commands

JOB = "job-c"


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis(), prefix="c", ttl=600)


def started(store: JobStore, kind: str = "thinker", lease: float = 30.0) -> Claim:
    machine = store.machine
    spec = JobSpec(goal="g").model_dump_json()
    assert machine.create(JOB, spec, "dual", (0, kind), [], timeout=3600, ttl_after=600)
    got = machine.claim(JOB, 0, kind, lease, 5)
    assert isinstance(got, Claim)
    return got


def message(round_no: int, role: str, text: str = "x") -> ModelMessage:
    return ModelMessage(round=round_no, role=role, content=text)  # type: ignore[arg-type]


def test_a_claim_leaves_the_ttl_of_keys_it_does_not_write(store: JobStore) -> None:
    memory_key = store.key(JOB, "memory")
    store.redis.hset(memory_key, "x", "1")
    store.redis.expire(memory_key, 50)
    started(store)
    assert 0 < store.redis.ttl(memory_key) <= 50  # not pushed to the job's lifetime by the claim


def test_a_transition_gives_the_memory_it_writes_the_jobs_lifetime(store: JobStore) -> None:
    claim = started(store)
    writes = [("0:thinker", message(0, "thinker").model_dump_json())]
    assert store.machine.transition(claim, (0, "actor", 0, ""), [], writes, tx="t1")
    assert 3600 < store.redis.ttl(store.key(JOB, "memory")) <= 3600 + 600
    state_ttl = store.redis.ttl(store.key(JOB, "state"))
    assert 3600 < state_ttl <= 3600 + 600


def test_a_step_reads_spec_cancel_flag_record_and_memory_in_one_round_trip(store: JobStore) -> None:
    started(store)
    memory = store.memory(JOB)
    memory.add_message(message(0, "thinker", "a"))
    memory.add_message(message(0, "actor", "b"))
    store.request_cancel(JOB)
    calls: list[Any] = []
    real = store.redis.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    store.redis.pipeline = counting  # type: ignore[method-assign]
    view = store.step_view(JOB, record=["round", "kind"])
    assert len(calls) == 1
    assert view.spec is not None and view.spec.goal == "g"
    assert view.cancelled and view.record == {"round": "0", "kind": "thinker"} and view.complete
    assert [m.content for m in view.messages or []] == ["a", "b"]

    some = store.step_view(JOB, messages=["0:actor", "3:tool"])
    assert [m.content for m in some.messages or []] == ["b"] and not some.complete
    assert store.step_view("unknown").spec is None


def test_a_claim_reads_its_steps_view_in_its_own_script_call(machine: JobMachine) -> None:
    store = machine.store
    spec = JobSpec(goal="g").model_dump_json()
    assert machine.create(JOB, spec, "dual", (0, "actor"), [], timeout=3600, ttl_after=600)
    memory = store.memory(JOB)
    memory.add_message(message(0, "thinker", "a"))
    store.request_cancel(JOB)
    assert machine.claim(JOB, 9, "actor", 30.0, 5) == ClaimRefused("other")  # the script is loaded
    sent = count_commands(store.redis)
    got = machine.claim(JOB, 0, "actor", 30.0, 5, ViewAsk(record=["round", "kind"]))
    assert sent == ["EVALSHA"]  # the claim and the read: one call
    assert isinstance(got, Claim) and got.view is not None
    assert got.view == store.step_view(JOB, record=["round", "kind"])
    assert got.view.spec is not None and got.view.spec.goal == "g" and got.view.cancelled
    assert got.view.record == {"round": "0", "kind": "actor"}
    assert [m.content for m in got.view.messages or []] == ["a"] and got.view.results is None


def test_a_claim_without_a_view_or_a_refused_one_reads_nothing(store: JobStore) -> None:
    claim = started(store)
    assert claim.view is None
    assert store.machine.claim(JOB, 0, "thinker", 30.0, 5, ViewAsk()) == ClaimRefused("busy")


def test_a_tool_call_claims_with_its_actor_reply_and_a_collect_with_the_rounds_results(
    machine: JobMachine,
) -> None:
    store = machine.store
    claim = started(store, kind="actor")
    writes = [("0:actor", message(0, "actor", "calls").model_dump_json())]
    outbox = [{"task": "tandem.run_tool", "args": [JOB, 0, i]} for i in (1, 2)]
    assert machine.transition(claim, (0, "tools", 2, ""), outbox, writes, tx="t1")
    assert machine.claim_call(JOB, 9, 1, 30.0, 5) == ClaimRefused("other")  # the script is loaded
    sent = count_commands(store.redis)
    first = machine.claim_call(JOB, 0, 1, 30.0, 5, ViewAsk(messages=["0:actor"]))
    assert sent == ["EVALSHA"]
    assert isinstance(first, Claim) and first.view is not None and first.attempt == 1
    assert [m.content for m in first.view.messages or []] == ["calls"] and not first.view.cancelled
    second = machine.claim_call(JOB, 0, 2, 30.0, 5)
    assert isinstance(second, Claim) and second.view is None
    result = FunctionCallResult(index=1, name="t", status="succeeded", output="ok")
    assert machine.call_done(first, result.model_dump_json(), []) == 1
    assert machine.call_done(second, result.model_copy(update={"index": 2}).model_dump_json(), []) == 2
    collect = machine.claim(JOB, 0, "collect", 30.0, 5, ViewAsk(messages=[], record=["calls"], results=True))
    assert isinstance(collect, Claim) and collect.view is not None
    assert collect.view.record == {"calls": "2"} and collect.view.messages is None
    assert [r.index if r else None for r in collect.view.results or []] == [1, 2]
    assert collect.view.results == store.tool_results(JOB, 0, 2)


def test_a_collect_view_shows_a_missing_result_as_none(machine: JobMachine) -> None:
    store = machine.store
    claim = started(store, kind="actor")
    assert machine.transition(claim, (0, "tools", 2, ""), [], [], tx="t1")
    calls = [machine.claim_call(JOB, 0, i, 30.0, 5) for i in (1, 2)]
    assert all(isinstance(c, Claim) for c in calls)
    result = FunctionCallResult(index=2, name="t", status="succeeded", output="ok")
    store.redis.hset(store.key(JOB, "state"), mapping={"kind": "collect", "holder": "", "pending": 0})
    store.redis.hset(store.key(JOB, "tools"), "0:2", result.model_dump_json())
    got = machine.claim(JOB, 0, "collect", 30.0, 5, ViewAsk(messages=False, results=True))
    assert isinstance(got, Claim) and got.view is not None
    assert [r.index if r else None for r in got.view.results or []] == [None, 2]


def test_pending_memory_reads_the_stored_messages_once(store: JobStore) -> None:
    stored = store.memory(JOB)
    stored.add_message(message(0, "thinker"))
    reads: list[int] = []
    real = stored.get_messages

    def counted() -> list[ModelMessage]:
        reads.append(1)
        return real()

    stored.get_messages = counted  # type: ignore[method-assign]
    memory = PendingMemory(stored)
    assert memory.get_message(0, "thinker") is not None
    assert memory.get_message(0, "actor") is None
    assert memory.add_message(message(0, "actor")) and not memory.add_message(message(0, "thinker"))
    assert [m.role for m in memory.get_messages()] == ["thinker", "actor"]
    assert reads == [1]


def test_pending_memory_over_some_messages_reads_the_rest_when_asked_for_them(store: JobStore) -> None:
    stored = store.memory(JOB)
    stored.add_message(message(0, "thinker"))
    stored.add_message(message(0, "actor"))
    view = store.step_view(JOB, messages=["0:actor", "0:tool"])
    memory = PendingMemory(stored, view.messages, asked=["0:actor", "0:tool"])
    assert memory.get_message(0, "tool") is None  # known absent: no read
    assert memory.add_message(message(0, "tool"))
    assert memory.get_message(0, "thinker") is not None  # not asked for: the whole memory is read
    assert [m.role for m in memory.get_messages()] == ["thinker", "actor", "tool"]


def test_step_events_are_one_xadd_into_the_stream_the_intake_made(store: JobStore) -> None:
    key = store.key(JOB, "events")
    store.publish(JOB, "job_started", {"spec": {}}, ttl=5000)
    assert 4000 < store.redis.ttl(key) <= 5000
    store.append(JOB, RoundStarted(round=0, max_rounds=3))
    assert [e.type for e in store.read_events(JOB)] == ["job_started", "round_started"]
    assert 4000 < store.redis.ttl(key) <= 5000


def test_an_event_for_a_stream_that_is_gone_makes_it_with_a_ttl(store: JobStore) -> None:
    store.append("other", RoundStarted(round=0, max_rounds=3))
    assert [e.type for e in store.read_events("other")] == ["round_started"]
    assert 0 < store.redis.ttl(store.key("other", "events")) <= 600


def test_one_keeper_renews_the_leases_and_reports_a_lost_claim(store: JobStore) -> None:
    machine: JobMachine = store.machine
    claim = started(store, lease=0.6)
    state = store.key(JOB, "state")
    keeper = LeaseKeeper()
    with Heartbeat(machine, claim, 0.6, keeper) as beat:  # renewed every 0.2 s
        first = float(store.redis.hget(state, "lease_until") or 0)
        time.sleep(0.5)
        assert float(store.redis.hget(state, "lease_until") or 0) > first
        assert not beat.lost.is_set()
        store.redis.hset(state, "holder", "someone-else")  # another worker took the step over
        assert beat.lost.wait(2.0)
    assert keeper._held == {}


def test_a_noted_error_is_written_as_the_jobs_last_error_at_once(store: JobStore) -> None:
    machine: JobMachine = store.machine
    claim = started(store, lease=60.0)  # no renewal due for 20 s
    state = store.key(JOB, "state")
    keeper = LeaseKeeper()
    with Heartbeat(machine, claim, 60.0, keeper) as beat:
        beat.note("TransientModelError: HTTP 500 from the host")
        # written when note returns: a reconciler ending the job for its deadline reads it then
        assert store.redis.hget(state, "last_error") == b"TransientModelError: HTTP 500 from the host"
        assert float(store.redis.hget(state, "lease_until") or 0) > time.time() + 50  # renewed too
    beat.note("after the step")  # a dropped heartbeat writes nothing
    time.sleep(0.1)
    assert store.redis.hget(state, "last_error") == b"TransientModelError: HTTP 500 from the host"
