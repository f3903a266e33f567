"""``tandem.broker_config.transport`` against a real Redis: step messages leave no "unacked" copy
in Redis, intake messages keep kombu's, and neither is lost when a worker shuts down holding it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue
from redis import Redis

from tandem.broker_config.transport import TRANSPORT

STEP, INTAKE = "thinker", "celery"


def _connection(url: str) -> Connection:
    return Connection(url, transport=TRANSPORT, transport_options={"resent_queues": [STEP]})


def _queues() -> list[Queue]:
    exchange = Exchange("", type="direct")
    return [Queue(name, exchange, routing_key=name) for name in (STEP, INTAKE)]


def _send(conn: Connection, queue: str, body: dict[str, Any]) -> None:
    Producer(conn.default_channel).publish(body, routing_key=queue, serializer="json")


def _take(conn: Connection, count: int) -> list[Message]:
    got: list[Message] = []
    consumer = Consumer(conn.default_channel, _queues(), callbacks=[lambda _b, m: got.append(m)])
    consumer.qos(prefetch_count=10)
    with consumer:
        while len(got) < count:
            conn.drain_events(timeout=5)
    return got


def _queued(redis: Redis, queue: str) -> int:
    return sum(int(redis.llen(k)) for k in redis.scan_iter(f"{queue}*") if redis.type(k) == b"list")


def test_only_the_intake_message_is_copied_to_unacked(url: str) -> None:
    redis = Redis.from_url(url)
    with _connection(url) as conn:
        _send(conn, STEP, {"step": 1})
        _send(conn, INTAKE, {"intake": 1})
        messages = _take(conn, 2)
        held = [json.loads(raw) for raw in redis.hvals("unacked")]  # [message, exchange, routing key]
        assert [routing_key for _, _, routing_key in held] == [INTAKE]  # the step message has no copy
        for m in messages:
            m.ack()
        assert redis.hlen("unacked") == 0 and redis.zcard("unacked_index") == 0


def test_a_held_step_message_goes_back_to_its_queue_at_shutdown(url: str) -> None:
    redis = Redis.from_url(url)
    conn = _connection(url)
    _send(conn, STEP, {"step": 2})
    _send(conn, INTAKE, {"intake": 2})
    _take(conn, 2)  # taken, never acknowledged
    assert _queued(redis, STEP) == 0 and _queued(redis, INTAKE) == 0
    conn.release()  # the channel closes: kombu restores what it holds
    assert _queued(redis, STEP) == 1
    assert _queued(redis, INTAKE) == 1
    with _connection(url) as again:
        bodies = sorted(str(m.payload) for m in _take(again, 2))
    assert bodies == [str({"intake": 2}), str({"step": 2})]


def test_an_acknowledged_step_message_is_not_restored(url: str) -> None:
    redis = Redis.from_url(url)
    conn = _connection(url)
    _send(conn, STEP, {"step": 3})
    (message,) = _take(conn, 1)
    message.ack()
    conn.release()
    assert _queued(redis, STEP) == 0


def test_a_rejected_step_message_is_requeued_or_dropped(url: str) -> None:
    redis = Redis.from_url(url)
    with _connection(url) as conn:
        _send(conn, STEP, {"step": 4})
        _send(conn, STEP, {"step": 5})
        first, second = _take(conn, 2)
        first.reject(requeue=True)
        second.reject(requeue=False)
        assert _queued(redis, STEP) == 1
        (back,) = _take(conn, 1)
        assert back.payload == first.payload
        back.ack()


def test_the_channel_keeps_one_client_per_pool(url: str) -> None:
    with _connection(url) as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        channel._pool = None  # kombu drops its pool on a connection error: a new client follows
        with channel.conn_or_acquire() as third:
            assert third is not first and third.connection_pool is channel.pool
        _send(conn, STEP, {"step": 6})
        (message,) = _take(conn, 1)
        assert message.payload == {"step": 6}


def _drain_once(conn: Connection, prefetch: int) -> list[Message]:
    """What one read of the broker delivers to a consumer with ``prefetch`` room."""
    got: list[Message] = []
    consumer = Consumer(conn.default_channel, _queues(), callbacks=[lambda _b, m: got.append(m)])
    consumer.qos(prefetch_count=prefetch)
    with consumer:
        conn.drain_events(timeout=5)
    return got


@pytest.mark.parametrize("batch", [64, 3, 0])
def test_step_messages_come_in_batches_up_to_the_prefetch_room(url: str, batch: int) -> None:
    redis = Redis.from_url(url)
    options = {"resent_queues": [STEP], "batch_fetch": batch}
    with Connection(url, transport=TRANSPORT, transport_options=options) as conn:
        for i in range(12):
            _send(conn, STEP, {"step": i})
        first = _drain_once(conn, prefetch=5)
        # One BRPOP, then as many more as the room allows (at most ``batch_fetch``) in one RPOP.
        assert len(first) == min(5, 1 + batch)
        assert [m.payload for m in first] == [{"step": i} for i in range(len(first))]  # in order
        assert _queued(redis, STEP) == 12 - len(first)
        for m in first:
            m.ack()
        rest: list[Message] = []
        while len(first) + len(rest) < 12:
            rest += _drain_once(conn, prefetch=20)
        bodies = [m.payload["step"] for m in first + rest]
        assert sorted(bodies) == list(range(12))  # each once, none lost
        assert _queued(redis, STEP) == 0


def test_intake_messages_still_come_one_per_read(url: str) -> None:
    with _connection(url) as conn:
        for i in range(4):
            _send(conn, INTAKE, {"intake": i})
        assert len(_drain_once(conn, prefetch=10)) == 1  # each keeps its unacked copy, one by one


def test_a_quiet_queue_pauses_the_extra_rpop(url: str) -> None:
    with _connection(url) as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as client:
            real = client.rpop
            rpops: list[int] = []

            def counting(key: str, count: int | None = None) -> Any:
                rpops.append(count or 1)
                return real(key, count)

            client.rpop = counting
            for i in range(8):  # one message at a time: every RPOP after its BRPOP finds nothing
                _send(conn, STEP, {"step": i})
                (m,) = _drain_once(conn, prefetch=5)
                m.ack()
            assert len(rpops) == 3  # after the 1st, 3rd and 7th message (then 1, 3, 7 skipped)
            for i in range(30):  # a backlog: the next RPOP that runs finds messages and resumes
                _send(conn, STEP, {"step": 100 + i})
            sizes = []
            while sum(sizes) < 30:
                got = _drain_once(conn, prefetch=5)
                sizes.append(len(got))
                for m in got:
                    m.ack()
            assert max(sizes) == 5 and sizes.count(1) <= 7  # batches again within the pause
            assert channel._fetch_misses == 0
