"""A job's secret while its message is in flight, and Flower's queue views, on real workers.

- A bare Celery client (no tandem import, as a service would) sends ``tandem.infer`` with a secret
  in clear and a countdown, so a worker holds the message: ``celery inspect scheduled``, ``active``,
  ``reserved`` and ``query_task`` (the app's control API), Flower's ``/api/workers?refresh=1`` and
  its worker page show the job's message and never the secret; the job then runs and its tool
  gets the real value (its SHA-256 is checked).
- A tandem client without ``TANDEM_SECRETS_KEY`` submits a job with a secret: the message carries
  only a reference (``stored:intake``) and the tool still gets the real value.
- Flower's broker page and ``/api/queues/length`` answer 200 with tandem's queues and their real
  lengths, on tandem's own Redis transport.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery.signals import before_task_publish
from redis import Redis

from tandem.broker_config import Settings
from tandem.client.submission import submit
from tandem.tasks.app import create_app
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, _exclusive_db, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_security import FLOWER_AUTH, SECRETS_KEY, SecureCluster, thinker_host
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ghp-in-flight-planted-9"
DIGEST = "digest " + hashlib.sha256(SECRET.encode()).hexdigest()
COUNTDOWN = 40
"""Seconds the bare client's message waits in a worker: the inspections and Flower's pages are
read meanwhile (each check also asserts that the message was still held when it answered)."""
TOOLKIT_YAML = """
tools:
  - function: tests.integration.security_tools:token_digest
  - function: tests.integration.security_tools:add
actions:
  - name: work
    description: Do the work
    tools: [token_digest, add]
"""
BARE_CLIENT = """
import json, sys
from celery import Celery
app = Celery(broker=sys.argv[1], backend=sys.argv[2])
r = app.send_task("tandem.infer", kwargs={"spec": json.loads(sys.argv[3])}, countdown=int(sys.argv[4]))
print(r.id)
"""


@contextmanager
def _hosts_and_env(redis_url: str, toolkit: Path, broker_url: str | None = None) -> Iterator[dict[str, str]]:
    """The model hosts, and the environment of a cluster on ``redis_url`` (its broker
    ``broker_url``, the same Redis by default) with the digest toolkit and a secrets key."""
    toolkit.write_text(TOOLKIT_YAML)
    with OpenAIServer(thinker_host) as thinker, OpenAIServer(actor_host) as actor:
        yield {
            "TANDEM_BROKER_URL": broker_url or redis_url,
            "TANDEM_RESULT_BACKEND": redis_url,
            "TANDEM_REDIS_URL": redis_url,
            "TANDEM_TOOLKIT": str(toolkit),
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": thinker.url,
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": actor.url,
            "TANDEM_THINKER_API_KEY": "sk-test",
            "TANDEM_ACTOR_API_KEY": "sk-test",
            "TANDEM_SECRETS_KEY": SECRETS_KEY,
            "PYTHONPATH": str(ROOT),
        }


@pytest.fixture(scope="module")
def cluster(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    toolkit = tmp_path_factory.mktemp("in-flight") / "toolkit.yaml"
    with _exclusive_db() as db, _hosts_and_env(f"{redis_base}/{db}", toolkit) as env:
        url = env["TANDEM_REDIS_URL"]
        Redis.from_url(url).flushdb()
        c = SecureCluster(url, env)
        try:
            c.start("thinker", "actor", "tools")
            c.start_flower()
            yield c
        finally:
            c.stop()
            Redis.from_url(url).flushdb()


def _flower(cluster: SecureCluster, path: str) -> tuple[int, str]:
    request = urllib.request.Request(
        cluster.flower_url + path,
        headers={"Authorization": "Basic " + base64.b64encode(FLOWER_AUTH.encode()).decode()},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.read().decode()


def _spec(goal: str) -> dict[str, Any]:
    return {
        "goal": goal_with_plan(goal, [[{"name": "token_digest", "args": {}}]]),
        "secrets": {"tok": SECRET},
    }


def _send_held(cluster: SecureCluster, broker_url: str) -> str:
    """Send a bare client's ``tandem.infer`` with the secret in clear and a countdown; its id."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            BARE_CLIENT,
            broker_url,
            cluster.url,
            json.dumps(_spec("held")),
            str(COUNTDOWN),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd="/",
    )
    return out.stdout.strip().splitlines()[-1]


def _inspect_held(cluster: SecureCluster, job_id: str) -> None:
    """Wait until a worker holds ``job_id``'s message; every inspection shows it without the secret."""
    inspect = cluster.app.control.inspect(timeout=5)
    deadline = time.monotonic() + EVENT_SECONDS
    scheduled: dict[str, Any] = {}
    while job_id not in json.dumps(scheduled):  # the message reached a worker, which holds it
        assert time.monotonic() < deadline, "no worker holds the bare client's message"
        scheduled = inspect.scheduled() or {}
    replies = {
        "scheduled": scheduled,
        "active": inspect.active() or {},
        "reserved": inspect.reserved() or {},
        "query_task": inspect.query_task(job_id) or {},
        "revoked": inspect.revoked() or {},
    }
    held = [e for entries in scheduled.values() for e in entries if e["request"]["id"] == job_id]
    assert len(held) == 1 and held[0]["request"]["kwargs"]["spec"]["secrets"] == {"tok": "***"}, held
    assert job_id in json.dumps(replies["query_task"])
    for name, reply in replies.items():
        assert SECRET not in json.dumps(reply), f"celery inspect {name} shows the secret"


def _completes_with_the_secret(cluster: SecureCluster, job_id: str) -> None:
    """The job ends completed, its tool having got the real value (its digest)."""
    result = cluster.app.AsyncResult(job_id).get(timeout=RESULT_SECONDS)
    assert result["status"] == "completed", result.get("error")
    digest = cluster.store.tool_result(job_id, 0, 1)
    assert digest is not None and digest.output == DIGEST


def test_a_held_message_shows_no_secret_to_inspect_or_flower_and_the_tool_gets_it(
    cluster: SecureCluster,
) -> None:
    sent = time.monotonic()  # the message's countdown starts when the client sends it
    job_id = _send_held(cluster, cluster.url)
    _inspect_held(cluster, job_id)
    inspect = cluster.app.control.inspect(timeout=5)

    status, workers = _flower(cluster, "/api/workers?refresh=1")
    assert status == 200 and SECRET not in workers
    seen = []  # Flower asks a worker's task lists only for one worker at a time
    for name in json.loads(workers):
        status, one = _flower(cluster, f"/api/workers?refresh=1&workername={name}")
        assert status == 200 and SECRET not in one, name
        status, page = _flower(cluster, f"/worker/{name}")
        assert status == 200 and SECRET not in page, name
        seen += [name] if job_id in one and job_id in page else []
    assert len(seen) == 1, f"Flower shows the held message on {seen}, not on one worker"
    still = inspect.scheduled() or {}
    if time.monotonic() - sent < COUNTDOWN - 2:  # (on a loaded machine the checks may outlast it:
        # the pages that showed the message, above, were read while a worker held it)
        assert job_id in json.dumps(still), "the message left the worker before its countdown"
    _completes_with_the_secret(cluster, job_id)


def _no_key_client_job(cluster: SecureCluster) -> None:
    """A tandem client without ``TANDEM_SECRETS_KEY`` submits a job with a secret: its message holds
    the reference only, and the tool gets the value."""
    env = {k: v for k, v in cluster.env.items() if k != "TANDEM_SECRETS_KEY"}
    app = create_app(Settings.from_env(env))
    sent: list[dict[str, Any]] = []

    def record(sender: str | None = None, body: Any = None, **_: Any) -> None:
        if sender == "tandem.infer":
            sent.append(body[1])

    before_task_publish.connect(record, weak=False)
    try:
        handle = submit(_spec("no key"), app=app, store=cluster.store)
    finally:
        before_task_publish.disconnect(record)
        app.close()
    assert [k["spec"]["secrets"] for k in sent] == [{"tok": "stored:intake"}]
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    digest = cluster.store.tool_result(handle.id, 0, 1)
    assert digest is not None and digest.output == DIGEST
    stored = cluster.store.spec(handle.id)
    assert stored is not None and stored.secrets["tok"].startswith("sealed:v2:")


def test_a_client_without_the_key_sends_a_reference_and_the_tool_gets_the_value(
    cluster: SecureCluster,
) -> None:
    _no_key_client_job(cluster)


def test_on_rabbitmq_a_held_message_shows_no_secret_and_a_reference_resolves(
    redis_base: str, vhost_url: str, tmp_path: Path
) -> None:
    """The same on RabbitMQ (classic queues: a message with a countdown waits in a worker)."""
    with _exclusive_db() as db, _hosts_and_env(f"{redis_base}/{db}", tmp_path / "t.yaml", vhost_url) as env:
        url = env["TANDEM_REDIS_URL"]
        Redis.from_url(url).flushdb()
        c = SecureCluster(url, env)
        try:
            c.start("thinker", "actor", "tools")
            job_id = _send_held(c, vhost_url)
            _inspect_held(c, job_id)
            _no_key_client_job(c)
            _completes_with_the_secret(c, job_id)
        finally:
            c.stop()
            Redis.from_url(url).flushdb()


def test_flower_queue_views_work_with_tandems_transport(cluster: SecureCluster) -> None:
    """Before, both answered 404 "'redis' broker is not supported": Flower picks its broker client by
    the URL's scheme, and kombu wrote tandem's transport class path there."""
    queued = Redis.from_url(cluster.url)
    status, body = _flower(cluster, "/api/queues/length")
    assert status == 200, body
    lengths = {q["name"]: q["messages"] for q in json.loads(body)["active_queues"]}
    assert {"celery", "thinker", "actor", "tools"} <= set(lengths), lengths
    for name, length in lengths.items():  # (idle: each queue and its priority lists are empty)
        assert length == sum(queued.llen(k) for k in [name, *(f"{name}\x06\x16{p}" for p in range(1, 10))])
    status, page = _flower(cluster, "/broker")
    assert status == 200 and "not supported" not in page
    for name in ("thinker", "actor", "tools"):
        assert name in page
