"""A commit that queues its step's successors itself, where the broker is the job state's Redis
(``dispatch.wire``): the push goes with the commit or not at all, once, into the list kombu would
use; the messages are Celery's own, built but not sent; anything else takes the outbox path."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from kombu import Connection, Producer, Queue
from redis import Redis
from redis.exceptions import ResponseError

from tandem.broker_config import Settings
from tandem.broker_config.capture import NotCaptured, capture
from tandem.broker_config.transport import TRANSPORT, envelope
from tandem.tasks.job_events import make_event
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Claim
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.store import JobStore
from tandem.tasks.steps import dispatch
from tests.tasks.conftest import REAL_REDIS_URL, real_redis
from tests.tasks.slots import SlotCheckingRedis

JOB = "job-w"
SPEC = JobSpec(goal="g").model_dump_json()
LEVELS = list(range(10))  # tandem's priority lists on a Redis broker


def claimed(machine: JobMachine, kind: str = "thinker") -> Claim:
    assert machine.create(JOB, SPEC, "dual", (0, kind), [], timeout=3600, ttl_after=600)
    got = machine.claim(JOB, 0, kind, 30.0, 5)
    assert isinstance(got, Claim)
    return got


def lists(machine: JobMachine) -> tuple[str, str]:
    """Two broker lists of the test (under its prefix, so the fixture deletes them)."""
    return f"{machine.prefix}:queue-a", f"{machine.prefix}:queue-b"


def test_a_commit_pushes_its_messages_with_the_step_once_and_never_without_it(machine: JobMachine) -> None:
    a, b = lists(machine)
    claim = claimed(machine)
    wire = [(a, "message-1"), (b, "message-2")]
    if isinstance(machine.redis, SlotCheckingRedis):
        # A Redis Cluster cannot take the broker's lists in a job's script: the outbox path there.
        with pytest.raises(ResponseError, match="CROSSSLOT"):
            machine.transition(claim, (0, "actor", 0, ""), [], [], tx="t1", wire=wire)
        return
    stale = Claim(claim.job_id, claim.round, claim.kind, claim.token, epoch=claim.epoch + 1)
    assert not machine.transition(stale, (0, "actor", 0, ""), [], [], tx="t0", wire=wire)
    assert machine.redis.llen(a) == 0 and machine.redis.llen(b) == 0  # a lost claim queues nothing
    assert machine.transition(claim, (0, "actor", 0, ""), [], [], tx="t1", wire=wire)
    assert machine.redis.lrange(a, 0, -1) == [b"message-1"]
    assert machine.redis.lrange(b, 0, -1) == [b"message-2"]
    assert machine.outbox(JOB)[1] == []  # nothing left for anyone to send
    assert machine.redis.hget(machine.store.key(JOB, "state"), "kind") == b"actor"
    assert machine.transition(claim, (0, "actor", 0, ""), [], [], tx="t1", wire=wire)  # run again
    assert machine.redis.llen(a) == 1 and machine.redis.llen(b) == 1  # pushed once


@pytest.fixture(params=["fakeredis", "redis"])
def one_redis(request: pytest.FixtureRequest) -> Iterator[JobMachine]:
    """A ``JobMachine`` on fakeredis and on the real Redis: one server, where a commit pushes."""
    redis: Redis = fakeredis.FakeRedis() if request.param == "fakeredis" else real_redis()
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    yield JobStore(redis, prefix=prefix, ttl=600).machine
    for key in redis.scan_iter(match=f"{prefix}:*"):
        redis.delete(key)


def test_parking_keeps_the_broker_lists_out_of_the_jobs_ttl(one_redis: JobMachine) -> None:
    machine = one_redis
    from tandem.tasks.state.claims import Park

    a, _ = lists(machine)
    claim = claimed(machine, "actor")
    park = Park(record_json="{}", held=(2,), bound=600.0, until=0.0)
    assert machine.transition(claim, (0, "tools", 2, ""), [], [], tx="t1", park=park, wire=[(a, "call-1")])
    assert machine.redis.lrange(a, 0, -1) == [b"call-1"]
    assert machine.redis.ttl(a) == -1  # a queue never expires with a job
    assert machine.redis.ttl(machine.store.key(JOB, "state")) > 0


def test_the_record_is_made_with_its_first_event_and_first_step_queued_once(one_redis: JobMachine) -> None:
    machine = one_redis
    a, _ = lists(machine)
    started = machine.store.entry(make_event("job_started", {"spec": {"goal": "g"}}))
    args: dict[str, Any] = {"timeout": 3600, "ttl_after": 600, "started": started, "wire": [(a, "first")]}
    assert machine.create(JOB, SPEC, "dual", (0, "thinker"), [], **args)
    assert not machine.create(JOB, SPEC, "dual", (0, "thinker"), [], **args)  # a duplicate intake
    assert machine.redis.lrange(a, 0, -1) == [b"first"]
    assert [e.type for e in machine.store.read_events(JOB)] == ["job_started"]
    assert machine.outbox(JOB)[1] == []


@pytest.fixture
def broker() -> Any:
    """A kombu connection through tandem's channel to the real Redis (db 8), and a fresh queue."""
    redis = real_redis()
    queue = f"capture-{uuid.uuid4().hex[:8]}"
    options = {"priority_steps": LEVELS, "queue_order_strategy": "priority"}
    with Connection(REAL_REDIS_URL, transport=TRANSPORT, transport_options=options) as conn:
        yield conn, redis, queue
    redis.delete(queue, *(f"{queue}\x06\x16{n}" for n in LEVELS))


def queued(redis: Any, queue: str) -> dict[str, int]:
    keys = [queue, *(f"{queue}\x06\x16{n}" for n in LEVELS[1:])]
    return {key: redis.llen(key) for key in keys if redis.llen(key)}


def test_inside_capture_the_channel_hands_over_what_it_would_push(broker: Any) -> None:
    conn, redis, queue = broker
    producer = Producer(conn.channel())
    with capture() as box:
        producer.publish({"n": 1}, routing_key=queue, priority=4, serializer="json", headers={"h": "v"})
    assert queued(redis, queue) == {}  # built, not sent
    ((key, raw),) = box
    producer.publish({"n": 1}, routing_key=queue, priority=4, serializer="json", headers={"h": "v"})
    assert queued(redis, queue) == {key: 1}  # the list kombu pushes it to
    captured, sent = envelope(raw), envelope(redis.rpop(key))
    for message in (captured, sent):
        message["properties"].pop("delivery_tag")
    assert captured == sent
    assert captured["headers"]["h"] == "v"


def test_a_queue_that_expires_is_not_captured(broker: Any) -> None:
    conn, redis, queue = broker
    channel = conn.channel()
    Queue(queue, expires=600.0, routing_key=queue)(channel).declare()
    with pytest.raises(NotCaptured, match=queue), capture():
        Producer(channel).publish({"n": 1}, routing_key=queue, serializer="json")
    assert queued(redis, queue) == {}


def test_a_commit_pushes_only_where_the_broker_is_this_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    same = Runtime(Settings(broker_url=REAL_REDIS_URL, redis_url=REAL_REDIS_URL))
    elsewhere = Runtime(Settings(broker_url=REAL_REDIS_URL, redis_url="redis://127.0.0.1:6379/9"))
    monkeypatch.setitem(dispatch.app.conf, "broker_url", REAL_REDIS_URL)
    monkeypatch.setitem(dispatch.app.conf, "broker_transport", TRANSPORT)
    assert dispatch.pushes_with_commit(same)
    assert not dispatch.pushes_with_commit(elsewhere)  # another database: the outbox
    monkeypatch.setitem(dispatch.app.conf, "broker_transport", None)  # kombu's own channel, or amqp
    assert not dispatch.pushes_with_commit(same)


def test_wire_leaves_to_the_outbox_what_it_cannot_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = Runtime(Settings(broker_url=REAL_REDIS_URL, redis_url=REAL_REDIS_URL))
    spec = JobSpec(goal="g")
    step = [{"task": "tandem.actor_turn", "args": [JOB, 0]}]
    monkeypatch.setattr(dispatch, "pushes_with_commit", lambda rt: True)
    sent: list[Any] = []
    monkeypatch.setattr(dispatch, "send", lambda messages, priority, trace: sent.append(messages))
    assert dispatch.wire(rt, step, spec) is None  # sent nothing into the capture: not handed over
    assert dispatch.wire(rt, [{**step[0], "countdown": 5}], spec) is None  # waits: from the outbox
    assert dispatch.wire(rt, [], spec) is None
    assert len(sent) == 1  # the countdown and the empty list were not even built

    def refused(messages: Any, priority: Any, trace: Any) -> None:
        raise NotCaptured("a message for queue 'actor' needs more than one push")

    monkeypatch.setattr(dispatch, "send", refused)
    assert dispatch.wire(rt, step, spec) is None


def test_a_capture_takes_its_own_threads_messages_only(broker: Any) -> None:
    conn, redis, queue = broker
    with capture() as box:
        other = threading.Thread(
            target=lambda: Producer(conn.channel()).publish({"n": 2}, routing_key=queue, serializer="json")
        )
        other.start()
        other.join(10)
    assert box == [] and sum(queued(redis, queue).values()) == 1  # the other thread's went out
