"""RabbitMQ as the broker: a plain Celery client enqueues ``tandem.infer`` with the configuration
the README shows, and a malformed message harms no worker.

Each test gets a virtual host of its own on the local RabbitMQ (``tests.integration.rabbitmq``), so
its queues are new. Skipped where no RabbitMQ answers on 127.0.0.1:5672.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from kombu import Connection, Exchange, Producer

from tests.integration.conftest import RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]

# What a service that knows nothing of tandem runs: the README's "Enqueueing from another service".
BARE_CLIENT = """
import json, sys
from celery import Celery

app = Celery(broker=sys.argv[1], backend=sys.argv[2])
result = app.send_task("tandem.infer", kwargs={"spec": json.loads(sys.argv[3])})
print(json.dumps({"id": result.id, "result": result.get(timeout=90)}))
"""


@pytest.fixture
def rabbit_cluster(redis_base: str, vhost_url: str) -> Iterator[Hosts]:
    with _exclusive_db() as db:
        yield from _cluster_on(f"{redis_base}/{db}", TANDEM_BROKER_URL=vhost_url)


def test_a_plain_celery_client_enqueues_a_job_on_rabbitmq(rabbit_cluster: Hosts, vhost_url: str) -> None:
    cluster, _, _ = rabbit_cluster
    cluster.start("thinker", "actor", "tools")  # the workers declare their queues first
    spec = {"goal": goal_with_plan("over rabbitmq", [[{"name": "add", "args": {"a": 40, "b": 2}}]])}
    out = subprocess.run(
        [sys.executable, "-c", BARE_CLIENT, vhost_url, cluster.url, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    reply = json.loads(out.stdout.strip().splitlines()[-1])
    assert reply["result"]["status"] == "completed", reply
    assert cluster.store.tool_result(reply["id"], 0, 1).output == "42"  # type: ignore[union-attr]
    assert cluster.exited() == []


def test_a_malformed_message_on_rabbitmq_harms_no_worker(rabbit_cluster: Hosts, vhost_url: str) -> None:
    cluster, _, _ = rabbit_cluster
    cluster.start("thinker", "actor", "tools")
    with Connection(vhost_url) as conn:
        producer = Producer(conn.default_channel, exchange=Exchange(""))
        for queue in ("celery", "thinker", "actor", "tools"):
            producer.publish(b"this is not json {", routing_key=queue, content_type="application/json")
            producer.publish(b'{"task": 1}', routing_key=queue, content_type="application/json")
            producer.publish(b"[1, 2]", routing_key=queue, content_type="application/json")
    handle = cluster.submit(
        goal=goal_with_plan("after garbage", [[{"name": "add", "args": {"a": 1, "b": 2}}]])
    )
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert cluster.exited() == []
