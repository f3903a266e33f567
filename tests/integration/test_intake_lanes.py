"""Intake lanes (``TANDEM_INTAKE_LANES``, docs/tenants.md) on a real Redis: tandem's channel takes
the intake queue and its lanes in turn, and on a real worker a later tenant's intake is read
before most of an earlier tenant's burst. Asserted on the order messages and records came in,
never on wall time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue

from tandem.broker_config.intake_lanes import LaneCycle
from tandem.broker_config.transport import QUEUE_STAMP, TRANSPORT
from tests.integration.conftest import EVENT_SECONDS, Cluster, _make_cluster

pytestmark = pytest.mark.integration

INTAKE, BUSY, LATE = "celery", "celery.lane0", "celery.lane1"
CONSUMED = ("thinker", INTAKE, BUSY, LATE)  # as a worker consumes them: its role queue first


def _connection(url: str, rotated: bool) -> Connection:
    options = {"queue_order_strategy": "priority", "priority_steps": list(range(10))}  # as celery_config
    if rotated:
        options["rotated_queues"] = [INTAKE, BUSY, LATE]
    return Connection(url, transport=TRANSPORT, transport_options=options)


def _order(conn: Connection, count: int) -> list[str]:
    """The queues ``count`` messages came from, taken one at a time (prefetch 1, each acknowledged
    before the next is asked for, as a worker thread does)."""
    got: list[Message] = []

    def take(_body: object, message: Message) -> None:
        got.append(message)
        message.ack()

    exchange = Exchange("", type="direct")
    queues = [Queue(name, exchange, routing_key=name) for name in CONSUMED]
    consumer = Consumer(conn.default_channel, queues, callbacks=[take])
    consumer.qos(prefetch_count=1)
    with consumer:
        while len(got) < count:
            conn.drain_events(timeout=5)
    return [m.delivery_info[QUEUE_STAMP] for m in got]


@pytest.mark.parametrize("rotated", [True, False], ids=["lanes-in-turn", "fixed-order"])
def test_a_burst_in_one_lane_does_not_hold_back_another(url: str, rotated: bool) -> None:
    with _connection(url, rotated) as conn:
        producer = Producer(conn.default_channel)
        for i in range(12):
            producer.publish({"n": i}, routing_key=BUSY, serializer="json")
        for i in range(3):
            producer.publish({"n": i}, routing_key=LATE, serializer="json")
        assert isinstance(conn.default_channel._queue_cycle, LaneCycle) is rotated
        order = _order(conn, 15)
    if rotated:  # one of the busy lane's, then one of the late lane's, while both have messages
        assert order == [BUSY, LATE] * 3 + [BUSY] * 9
    else:  # kombu's fixed order: the lane consumed first drains before the other is read
        assert order == [BUSY] * 12 + [LATE] * 3


@pytest.fixture
def lanes_cluster(redis_base: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    for cluster, _thinker, _actor in _make_cluster(redis_base, TANDEM_INTAKE_LANES=request.param):
        yield cluster


@pytest.mark.parametrize("lanes_cluster", ["8", "0"], ids=["lanes", "no-lanes"], indirect=True)
def test_a_later_tenants_intake_is_read_before_most_of_an_earlier_burst(lanes_cluster: Cluster) -> None:
    c = lanes_cluster
    # No worker yet: 40 of tenant A's jobs, then 4 of tenant B's, wait in the intake.
    burst = [c.submit(goal=f"a job {i}", reasoner="mono", owner="tenant-a") for i in range(40)]
    late = [c.submit(goal=f"b job {i}", reasoner="mono", owner="tenant-b") for i in range(4)]
    lanes = c.settings.intake_lanes
    # One intake thread (the tools worker; no Actor worker: each job is created and its step waits).
    c.start("tools", concurrency={"tools": 1})
    deadline = time.monotonic() + EVENT_SECONDS
    created: dict[str, float] = {}
    while len(created) < 44 and time.monotonic() < deadline:
        for handle in burst + late:
            at = c.redis.hget(c.store.key(handle.id, "state"), "created_at")
            state = c.redis.hget(c.store.key(handle.id, "state"), "state")
            if at is not None and state not in (None, b"queued"):
                created[handle.id] = float(at)
        time.sleep(0.1)
    assert len(created) == 44, f"only {len(created)} of 44 jobs were taken from the intake"
    last_b = max(created[h.id] for h in late)
    a_after = sum(1 for h in burst if created[h.id] > last_b)
    if lanes:  # B's lane is read in turn with A's: B's four come among A's first few
        assert a_after >= 30, f"only {a_after} of A's 40 jobs were read after B's last one"
    else:  # one FIFO intake queue: B's jobs are read after the whole burst
        assert a_after == 0, f"{a_after} of A's jobs were read after B's last one with no lanes"
