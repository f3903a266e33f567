"""``tandem.broker_config.queue_depth``: one number per queue, read in one round trip on Redis."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import fakeredis
from kombu.transport import redis as kombu_redis

from tandem.broker_config import Settings
from tandem.broker_config.queue_depth import (
    AmqpQueueDepths,
    RedisQueueDepths,
    queue_depths,
    redis_keys,
)


def test_the_redis_lists_are_kombus_priority_lists() -> None:
    # kombu's naming, with tandem's priority steps (``broker_transport_options.priority_steps``)
    channel = SimpleNamespace(sep=kombu_redis.Channel.sep, priority_steps=list(range(10)))
    channel.priority = lambda n: kombu_redis.Channel.priority(channel, n)  # type: ignore[arg-type]
    kombus = [kombu_redis.Channel._q_for_pri(channel, "actor", level) for level in range(10)]  # type: ignore[arg-type]
    assert redis_keys("actor") == kombus
    assert redis_keys("actor")[:2] == ["actor", "actor\x06\x161"]


class Recorder:
    """A Redis client that lets the reader use nothing but one pipeline, and counts its round trips."""

    def __init__(self, server: fakeredis.FakeServer) -> None:
        self.client = fakeredis.FakeRedis(server=server)
        self.round_trips = 0

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = self.client.pipeline(transaction=transaction)
        execute = pipe.execute

        def counted() -> Any:
            self.round_trips += 1
            return execute()

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


def test_a_redis_queue_depth_sums_its_ten_priority_lists_in_one_round_trip() -> None:
    server = fakeredis.FakeServer()
    redis = fakeredis.FakeRedis(server=server)
    redis.rpush("thinker", "a", "b")
    redis.rpush("thinker\x06\x163", "c")
    redis.rpush("thinker\x06\x169", "d", "e", "f")
    redis.rpush("tools\x06\x165", "g")
    redis.rpush("thinkers", "not this queue")
    recorder = Recorder(server)
    reader = RedisQueueDepths(recorder, ("celery", "thinker", "actor", "tools"))
    assert reader.read() == {"celery": 0, "thinker": 6, "actor": 0, "tools": 1}
    assert recorder.round_trips == 1


def test_the_reader_follows_the_broker() -> None:
    redis = queue_depths(Settings.from_env({"TANDEM_BROKER_URL": "redis://127.0.0.1:6390/2"}))
    assert isinstance(redis, RedisQueueDepths) and redis.queues == ("celery", "thinker", "actor", "tools")
    assert redis.client.connection_pool.connection_kwargs["db"] == 2
    socket = queue_depths(
        Settings.from_env({"TANDEM_BROKER_URL": "redis+socket:///tmp/r.sock?virtual_host=3"})
    )
    kwargs = socket.client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    assert (kwargs["path"], kwargs["db"]) == ("/tmp/r.sock", 3)
    amqp = queue_depths(
        Settings.from_env({"TANDEM_BROKER_URL": "amqp://u:p@rabbit:5672/v", "TANDEM_INTAKE_QUEUE": "jobs"})
    )
    assert isinstance(amqp, AmqpQueueDepths) and amqp.queues == ("jobs", "thinker", "actor", "tools")
