"""Every key has a TTL from the moment it is written (docs/durability.md), even when the client
that wrote it dies right after its first round trip: the key's ``EXPIRE`` goes in the same
transaction as its first write, never in a later round trip (a helper's breaking test caught a
submitted job's record without a TTL between the two)."""

from __future__ import annotations

import json
from typing import Any

import fakeredis
import pytest
import redis

from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import ModelMessage
from tandem.tasks.control.children import _mark_queued
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.store import JobStore

JOB = "job-1"


def dies_after_its_first_round_trip(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``client`` fail every round trip after its first (a command, or a pipeline's
    ``execute``), as a client killed or cut off there would."""
    trips = [0]

    def trip() -> None:
        trips[0] += 1
        if trips[0] > 1:
            raise redis.ConnectionError("the client is gone")

    command, pipeline = client.execute_command, client.pipeline

    def execute_command(*args: Any, **kwargs: Any) -> Any:
        trip()
        return command(*args, **kwargs)

    def dying_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute

        def execute_once(*a: Any, **k: Any) -> Any:
            trip()
            return execute(*a, **k)

        pipe.execute = execute_once
        return pipe

    monkeypatch.setattr(client, "execute_command", execute_command)
    monkeypatch.setattr(client, "pipeline", dying_pipeline)


def ttl_of(client: Any, key: str) -> int:
    assert client.exists(key) == 1, f"{key} was not written"
    return int(client.ttl(key))


def test_a_submitted_job_record_has_its_ttl_with_its_first_write(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fakeredis.FakeRedis()
    store = JobStore(client, prefix="t", ttl=600)
    dies_after_its_first_round_trip(client, monkeypatch)
    with pytest.raises(redis.ConnectionError):
        store.mark_queued(JOB, "dual", intake='{"goal": "g"}')  # the recent-jobs index: a later trip
    monkeypatch.undo()
    assert 0 < ttl_of(client, store.key(JOB, "state")) <= 600
    assert 0 < ttl_of(client, store.key(JOB, "intake")) <= 600


def test_a_record_that_already_has_a_ttl_keeps_it() -> None:
    client = fakeredis.FakeRedis()
    store = JobStore(client, prefix="t", ttl=600)
    assert store.mark_queued(JOB)
    client.expire(store.key(JOB, "state"), 5000)  # a started job's lifetime
    assert not store.mark_queued(JOB)
    assert ttl_of(client, store.key(JOB, "state")) > 600


def test_a_new_event_stream_has_its_ttl_with_its_first_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fakeredis.FakeRedis()
    store = JobStore(client, prefix="t", ttl=600)
    dies_after_its_first_round_trip(client, monkeypatch)
    store.publish(JOB, "job_started", {"round": 0}, ttl=900)
    monkeypatch.undo()
    assert 600 < ttl_of(client, store.key(JOB, "events")) <= 900
    client.expire(store.key(JOB, "events"), 5000)
    store.publish(JOB, "job_started", {"round": 0})  # an existing stream keeps its TTL
    assert ttl_of(client, store.key(JOB, "events")) > 900


def test_a_conversation_has_its_ttl_with_its_first_message(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fakeredis.FakeRedis()
    memory = RedisReasonerMemory(client, JOB, prefix="t", ttl=600)
    dies_after_its_first_round_trip(client, monkeypatch)
    assert memory.add_message(ModelMessage(round=0, role="thinker", content="plan"))
    monkeypatch.undo()
    assert 0 < ttl_of(client, memory.key) <= 600


def test_a_spawned_child_record_has_its_ttl_with_its_first_write(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = {"reasoner": "dual", "timeout_s": 60, "goal": "g"}
    dies_after_its_first_round_trip(rt.redis, monkeypatch)
    assert [cid for cid, _ in _mark_queued(rt, "default", [("child-1", wire)])] == ["child-1"]
    monkeypatch.undo()
    assert 0 < ttl_of(rt.redis, rt.store.key("child-1", "state")) <= rt.store.ttl
    assert json.loads(rt.redis.get(rt.store.key("child-1", "intake"))) == wire
