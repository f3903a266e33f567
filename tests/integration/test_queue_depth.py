"""``tandem_queue_depth{queue}`` on a real worker's metrics endpoint, on each broker.

Step messages are sent, at several priorities, to queues no worker of the test consumes (only a
tools worker runs, serving ``/metrics``); the endpoint must count every one of them. On Redis
kombu keeps each queue as ten lists, one per priority level, so a depth read from the queue's
list alone would miss most of them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tandem.broker_config.queue_depth import AmqpQueueDepths
from tandem.tasks.hosts.budgets import message_priority
from tandem.workers.embedded import free_port
from tests.integration.conftest import Cluster, _cluster_on, _exclusive_db, _make_cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
SENT = {"thinker": [9, 9, 9, 5, 5, 0], "actor": [5, 5, 5, 5]}
"""The job priorities (``JobSpec.priority``) of the messages sent to each queue."""


def _send(cluster: Cluster) -> None:
    for queue, priorities in SENT.items():
        for i, priority in enumerate(priorities):
            cluster.app.send_task(
                f"tandem.{queue}_turn",
                args=[f"no-such-job-{i}", 0],
                priority=message_priority(priority, cluster.settings.broker_url),
                ignore_result=True,
            )


def _depths(port: int) -> dict[str, float]:
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {q: float(v) for q, v in re.findall(r'^tandem_queue_depth\{queue="(\w+)"\} (\S+)$', body, re.M)}


def _scrape_until(port: int, expected: dict[str, float]) -> dict[str, float]:
    """The depths the endpoint reports, once they are ``expected`` (a quorum queue counts a
    message once its replicas have it) or after 20 s."""
    deadline = time.monotonic() + 20
    while (found := _depths(port)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def _check_endpoint(cluster: Cluster) -> None:
    port = free_port()
    cluster.start("tools", TANDEM_METRICS_PORT=str(port))
    _send(cluster)
    expected = {"celery": 0.0, "thinker": 6.0, "actor": 4.0, "tools": 0.0}
    assert _scrape_until(port, expected) == expected
    # The workers' liveness path reads a metric of the process only: never the broker.
    live = httpx.get(f"http://127.0.0.1:{port}/metrics", params={"name[]": "python_info"}, timeout=10)
    assert live.status_code == 200 and "tandem_queue_depth" not in live.text
    assert live.text.startswith("# HELP python_info ") and "\npython_info{" in live.text


def test_queue_depth_sums_the_priority_lists_on_redis(redis_base: str) -> None:
    gen = _make_cluster(redis_base)
    cluster, _, _ = next(gen)
    try:
        _check_endpoint(cluster)
        lists = [k.decode() for k in cluster.redis.keys("thinker*")]
        assert len(lists) == 3, lists  # priorities 9, 5 and 0 in three lists of the one queue
        assert cluster.redis.llen("thinker") < 6
    finally:
        gen.close()


@pytest.fixture(params=["classic", "quorum"])
def rabbit_cluster(request: pytest.FixtureRequest, redis_base: str, vhost_url: str) -> Iterator[Hosts]:
    with _exclusive_db() as db:
        yield from _cluster_on(
            f"{redis_base}/{db}", TANDEM_BROKER_URL=vhost_url, TANDEM_RABBITMQ_QUEUE_TYPE=request.param
        )


def test_queue_depth_counts_the_ready_messages_on_rabbitmq(rabbit_cluster: Hosts) -> None:
    cluster, _, _ = rabbit_cluster
    _check_endpoint(cluster)


def test_a_rabbitmq_queue_not_declared_yet_holds_nothing(vhost_url: str) -> None:
    """RabbitMQ answers a passive declare of a missing queue by closing the channel: the reader
    counts 0 for it and goes on with the next queue on a new channel, and reads again after."""
    from kombu import Connection, Exchange, Producer, Queue

    reader = AmqpQueueDepths(vhost_url, ("celery", "thinker", "actor"))
    try:
        assert reader.read() == {"celery": 0, "thinker": 0, "actor": 0}
        with Connection(vhost_url) as conn:
            Queue("actor", channel=conn.default_channel).declare()
            Producer(conn.default_channel, exchange=Exchange("")).publish(b"x", routing_key="actor")
        assert reader.read() == {"celery": 0, "thinker": 0, "actor": 1}
    finally:
        reader.close()


def test_a_connection_the_broker_closed_is_replaced_within_the_read(vhost_url: str) -> None:
    """RabbitMQ (or a proxy) closes the reader's idle connection between two scrapes: the next read
    opens another and answers, rather than leave that scrape without a depth."""
    from tests.integration.rabbitmq import ctl

    vhost = vhost_url.rsplit("/", 1)[1]
    reader = AmqpQueueDepths(vhost_url, ("celery", "thinker"))
    try:
        assert reader.read() == {"celery": 0, "thinker": 0}
        listed = ctl("list_connections", "-q", "--no-table-headers", "pid", "vhost")
        pids = [line.split("\t")[0] for line in listed.splitlines() if line.endswith("\t" + vhost)]
        assert len(pids) == 1, listed
        ctl("close_connection", pids[0], "closed by the test")
        assert reader.read() == {"celery": 0, "thinker": 0}
    finally:
        reader.close()
