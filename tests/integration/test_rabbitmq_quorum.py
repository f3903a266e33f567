"""RabbitMQ quorum queues (``TANDEM_RABBITMQ_QUEUE_TYPE=quorum``) with real workers on the local node.

Each test has a virtual host of its own (``tests.integration.rabbitmq``). A single node holds a
quorum queue's only replica, but the declarations, the per-consumer prefetch, the redelivery of a
killed worker's messages and the delay queues are those of a cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from celery import Celery

from tandem.broker_config import celery_config
from tandem.broker_config.queue_depth import queue_depths
from tests.integration.conftest import RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.integration.rabbitmq import queues
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
QUEUES = ("celery", "thinker", "actor", "tools")

# A service that knows nothing of tandem, on quorum queues: docs/brokers.md, "A plain Celery client".
BARE_CLIENT = """
import json, sys
from celery import Celery

app = Celery(broker=sys.argv[1], backend=sys.argv[2])
if sys.argv[4] == "quorum":
    app.conf.task_default_queue_type = "quorum"
result = app.send_task("tandem.infer", kwargs={"spec": json.loads(sys.argv[3])})
print(json.dumps({"id": result.id, "result": result.get(timeout=90)}))
"""


@pytest.fixture
def quorum_cluster(redis_base: str, vhost_url: str) -> Iterator[Hosts]:
    with _exclusive_db() as db:
        yield from _cluster_on(
            f"{redis_base}/{db}",
            TANDEM_BROKER_URL=vhost_url,
            TANDEM_RABBITMQ_QUEUE_TYPE="quorum",
            TANDEM_LEASE_SECONDS="2",
        )


def _bare_client(vhost_url: str, cluster: Cluster, spec: dict[str, object], queue_type: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", BARE_CLIENT, vhost_url, cluster.url, json.dumps(spec), queue_type],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert (out.returncode == 0) == (queue_type == "quorum"), out.stderr[-3000:]
    return out.stdout if out.returncode == 0 else out.stderr


def test_a_dual_job_completes_over_quorum_queues(quorum_cluster: Hosts, vhost_url: str) -> None:
    cluster, _, _ = quorum_cluster
    cluster.start("thinker", "actor", "tools")
    plan = [[{"name": "add", "args": {"a": 40, "b": 2}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]
    handle = cluster.submit(goal=goal_with_plan("over quorum queues", plan), max_rounds=6)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert cluster.store.tool_result(handle.id, 0, 1).output == "42"  # type: ignore[union-attr]
    assert cluster.store.tool_result(handle.id, 1, 1).output == "2"  # type: ignore[union-attr]
    declared = queues(vhost_url, "type", "arguments")
    for name in QUEUES:
        kind, arguments = declared[name]
        assert kind == "quorum", (name, declared[name])
        assert "x-max-priority" not in arguments  # RabbitMQ 3 refuses it on a quorum queue
    assert cluster.exited() == []


def test_a_plain_celery_client_declares_the_intake_queue_as_quorum(
    quorum_cluster: Hosts, vhost_url: str
) -> None:
    """A client that declares ``celery`` as a classic queue is refused by RabbitMQ (the queue is a
    quorum queue); with ``task_default_queue_type = "quorum"`` its job runs."""
    cluster, _, _ = quorum_cluster
    cluster.start("thinker", "actor", "tools")
    spec = {"goal": goal_with_plan("plain client", [[{"name": "add", "args": {"a": 2, "b": 3}}]])}
    refused = _bare_client(vhost_url, cluster, spec, "classic")
    assert "inequivalent arg 'x-queue-type'" in refused
    reply = json.loads(_bare_client(vhost_url, cluster, spec, "quorum").strip().splitlines()[-1])
    assert reply["result"]["status"] == "completed", reply
    assert cluster.store.tool_result(reply["id"], 0, 1).output == "5"  # type: ignore[union-attr]
    assert cluster.exited() == []


def test_a_worker_sigkilled_mid_job_loses_nothing_on_quorum_queues(quorum_cluster: Hosts) -> None:
    """The Actor worker is SIGKILLed during its model call: RabbitMQ hands the message it held to
    the replacement (and the reconciler sends the step again); the job completes with every tool
    run once and every reply stored once."""
    cluster, _, actor = quorum_cluster

    def slow_first_call(request: RecordedRequest) -> Reply:
        reply = actor_host(request)
        if len(actor.requests) == 1:
            reply.delay = 4.0  # the worker is killed while it waits for this reply
        return reply

    actor.set_script(slow_first_call)
    workers = cluster.start("thinker", "actor", "tools")
    plan = [[{"name": "add", "args": {"a": 1, "b": 1}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("killed actor", plan), max_rounds=6)
    deadline = time.monotonic() + 30
    while not actor.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert actor.requests, "the Actor's first call never started"
    cluster.kill(workers, "actor")
    cluster.start("actor", name="replacement")

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    runs = sorted((c["round"], c["index"]) for c in cluster.tool_calls() if c["job"] == handle.id)
    assert runs == [(0, 1), (1, 1)], "a tool ran twice, or not at all"
    keys = [(m.round, m.role) for m in cluster.store.memory(handle.id).get_messages()]
    assert keys == [
        (0, "thinker"),
        (0, "actor"),
        (0, "tool"),
        (1, "thinker"),
        (1, "actor"),
        (1, "tool"),
        (2, "thinker"),
        (2, "actor"),
    ]
    assert len(actor.requests) >= 4  # the killed call was asked again


def test_a_parked_step_waits_in_rabbitmq_not_in_a_worker(quorum_cluster: Hosts, vhost_url: str) -> None:
    """One Actor thread. Job A's call is answered 429 with ``Retry-After: 10``: its step parks and is
    sent again with a countdown. On quorum queues the prefetch of a worker is fixed, so a countdown
    message held in the worker would take its only slot and job B would wait behind A. The role
    queues' topic exchange sends it through RabbitMQ's delay queues instead: B runs meanwhile."""
    cluster, _, actor = quorum_cluster
    refused: list[float] = []

    def host(request: RecordedRequest) -> Reply:
        if "slow-job" in json.dumps(request["messages"]) and not refused:
            refused.append(time.time())
            return Reply(status=429, headers={"Retry-After": "10"})
        return actor_host(request)

    actor.set_script(host)
    cluster.start("actor", concurrency={"actor": 1}, TANDEM_RETRY_HOLD_SECONDS="5")
    a = cluster.submit(goal="slow-job: answer", reasoner="mono")
    deadline = time.monotonic() + 60
    while not refused and time.monotonic() < deadline:
        time.sleep(0.05)
    assert refused, "the host never saw job A's call"
    delayed: dict[str, list[str]] = {}
    while time.monotonic() < deadline and not delayed:
        waiting = queues(vhost_url, "messages")
        delayed = {k: v for k, v in waiting.items() if k.startswith("celery_delayed_") and v != ["0"]}
    assert delayed, "job A's parked step is not in RabbitMQ's delay queues"
    b = cluster.submit(goal="quick job: answer", reasoner="mono")
    assert b.result(timeout=RESULT_SECONDS).status == "completed"
    assert a.result(timeout=RESULT_SECONDS).status == "completed"
    ended = {h.id: cluster.store.status(h.id).updated_at for h in (a, b)}  # type: ignore[union-attr]
    assert ended[b.id] < ended[a.id], "B waited behind A's parked step"
    assert cluster.exited() == []


def test_a_countdown_under_a_second_is_sent_on_quorum_queues(quorum_cluster: Hosts) -> None:
    """Celery's native delayed delivery refuses a countdown under one second (``ValueError``), and
    tandem parks steps for less than that; tandem's app rounds every countdown up to a second."""
    cluster, _, _ = quorum_cluster
    # A thinker worker binds its queue to the delay exchanges at start; stopped (on purpose) before
    # the message is sent, so that the message stays in the queue to be counted.
    thinkers = cluster.start("thinker", name="binder")
    cluster.stop_group(thinkers)
    stock = Celery("stock")  # Celery's own app, with tandem's configuration
    stock.conf.update(celery_config(cluster.settings))
    with pytest.raises(ValueError, match="countdown must be a positive number"):
        stock.send_task("tandem.thinker_turn", args=["no-such-job", 0], countdown=0.4)
    stock.close()
    sent = cluster.app.send_task("tandem.thinker_turn", args=["no-such-job", 0], countdown=0.4)
    assert sent.id
    reader = queue_depths(cluster.settings)
    deadline = time.monotonic() + 20
    while reader.read()["thinker"] == 0 and time.monotonic() < deadline:  # no thinker worker runs
        time.sleep(0.2)
    assert reader.read()["thinker"] == 1, "the message never left the delay queues"
