"""Forged step and intake messages leave jobs unharmed, on real workers (issue 25, item 4).

Before: ``run_tool(J, 0, 1.0)`` failed a running job and ``run_tool(J, 0, "2")`` kept the real
call 2 from running (Lua's ``tonumber`` read both as call numbers); a captured signed
``tandem.infer`` re-sent under a new task id ran as a second job with the first one's secrets.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_security import ROOT, _certificate

pytestmark = pytest.mark.integration

URGENT = 0
"""Celery's Redis transport serves priority 0 first: the forged messages go ahead of the real ones."""


def _wait_for(predicate, timeout: float = EVENT_SECONDS) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _logs(cluster: Cluster) -> str:
    return "".join(p.read_text(errors="replace") for g in cluster.groups for p in g.log_dir.glob("*.log"))


@pytest.fixture
def fresh(redis_base: str) -> Iterator[Cluster]:
    gen = _make_cluster(redis_base)
    cluster, _, _ = next(gen)
    yield cluster
    next(gen, None)


def test_forged_run_tool_messages_leave_a_running_job_unharmed(fresh: Cluster) -> None:
    cluster = fresh
    cluster.start("thinker", "actor")  # no tools worker yet: the real calls wait in the queue
    handle = cluster.submit(
        goal=goal_with_plan(
            "forged",
            [[{"name": "sleep_tool", "args": {"seconds": 0.2}}, {"name": "add", "args": {"a": 2, "b": 3}}]],
        )
    )
    _wait_for(lambda: handle.status().step == "tools")
    round_no = handle.status().round
    forged = [
        [handle.id, round_no, 1.0],
        [handle.id, round_no, "2"],
        [handle.id, round_no, 3],
        [handle.id, 7, 1],
    ]
    for args in forged:
        cluster.app.send_task(
            "tandem.run_tool", args=args, queue="tools", priority=URGENT, ignore_result=True
        )
    cluster.start("tools", name="late")

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    calls = [c for c in cluster.tool_calls() if c["job"] == handle.id]
    assert sorted((c["name"], c["index"], c["attempt"]) for c in calls) == [
        ("add", 2, 1),
        ("sleep_tool", 1, 1),
    ]
    text = _logs(cluster)
    assert "tandem.run_tool: argument 'index' = 1.0: must be an integer" in text
    assert "tandem.run_tool: argument 'index' = '2': must be an integer" in text
    assert "argument 'index' = 3: round" in text  # the round has two calls
    assert cluster.exited() == []


REPLAY_SPEC = {
    "goal": goal_with_plan("replayed", [[{"name": "add", "args": {"a": 1, "b": 1}}]]),
    "max_rounds": 4,
}


def _replayed(raw: bytes, new_id: str | None) -> bytes:
    """The captured message as an attacker re-sends it: on the intake queue, under ``new_id``."""
    message = json.loads(raw)
    if new_id is not None:
        message["headers"]["id"] = new_id
        message["headers"]["root_id"] = new_id
        message["properties"]["correlation_id"] = new_id
    message["properties"]["delivery_tag"] = str(uuid.uuid4())
    message["properties"]["delivery_info"]["routing_key"] = "celery"
    return json.dumps(message).encode()


@pytest.fixture
def signed(redis_base: str, tmp_path: Path) -> Iterator[Cluster]:
    store = tmp_path / "trusted"
    store.mkdir()
    key, cert = _certificate(store, "tandem")
    gen = _make_cluster(
        redis_base,
        TANDEM_SIGNING_KEY=str(key),
        TANDEM_SIGNING_CERT=str(cert),
        TANDEM_SIGNING_CERT_STORE=str(store / "*.pem"),
        TANDEM_SECRETS_KEY=Fernet.generate_key().decode(),
    )
    cluster, _, _ = next(gen)
    yield cluster
    next(gen, None)


def test_a_replayed_signed_intake_is_refused_and_no_second_job_exists(signed: Cluster) -> None:
    cluster = signed
    cluster.start("thinker", "actor", "tools")
    spec = {**REPLAY_SPEC, "secrets": {"tok": "replay-secret-1"}}
    sent = cluster.app.send_task("tandem.infer", kwargs={"spec": spec}, queue="captured")
    (raw,) = cluster.redis.lrange("captured", 0, -1)  # what an attacker on the broker captured
    envelope = json.loads(raw)
    signed_body = base64.b64decode(base64.b64decode(envelope["body"])).decode(errors="replace")
    assert '"tandem_seal": {"id": "' + sent.id in signed_body  # the seal rides in the signed body

    cluster.redis.lpush("celery", _replayed(raw, None))  # delivered once: the original job
    assert cluster.app.AsyncResult(sent.id).get(timeout=RESULT_SECONDS)["status"] == "completed"

    forged_id = str(uuid.uuid4())
    cluster.redis.lpush("celery", _replayed(raw, forged_id))  # under a new task id
    cluster.redis.lpush("celery", _replayed(raw, None))  # the same message again
    _wait_for(lambda: cluster.redis.llen("celery") == 0)
    _wait_for(lambda: _logs(cluster).count("message refused, nothing done: tandem.infer") >= 2)
    time.sleep(1)

    prefix = cluster.settings.prefix
    assert list(cluster.redis.scan_iter(match=f"{prefix}:{{{forged_id}}}:*")) == []
    assert cluster.redis.get(f"celery-task-meta-{forged_id}") is None
    specs = list(cluster.redis.scan_iter(match=f"{prefix}:*:spec"))
    assert specs == [f"{prefix}:{{{sent.id}}}:spec".encode()]  # one job, the original
    text = _logs(cluster)
    assert f"signed for task id '{sent.id}', not '{forged_id}'" in text
    assert "was run before (a replay of a signed message)" in text
    assert cluster.app.AsyncResult(sent.id).get(timeout=5)["status"] == "completed"  # its result stands
    assert cluster.exited() == []


BARE_SIGNED_CLIENT = """
import json, sys
from celery import Celery
url, key, cert, store, goal, seal = sys.argv[1:7]
app = Celery(broker=url, backend=url)
app.conf.update(
    security_key=key, security_certificate=cert, security_cert_store=store, security_digest="sha256",
    task_serializer="auth", accept_content=["auth"],
)
app.setup_security(allowed_serializers=["json"], serializer="json")
if seal == "seal":
    from tandem.tasks.replay import install
    install(600)
print(app.send_task("tandem.infer", kwargs={"spec": {"goal": goal, "max_rounds": 4}}).id)
"""


def test_a_bare_signing_client_needs_the_seal(signed: Cluster) -> None:
    """The compatibility note: a bare Celery client that signs must add tandem's seal."""
    cluster = signed
    cluster.start("thinker", "actor", "tools")
    env = cluster.env

    def send(goal: str, seal: str) -> str:
        argv = [env["TANDEM_SIGNING_KEY"], env["TANDEM_SIGNING_CERT"], env["TANDEM_SIGNING_CERT_STORE"]]
        done = subprocess.run(
            [sys.executable, "-c", BARE_SIGNED_CLIENT, cluster.url, *argv, goal, seal],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    sealed_id = send(goal_with_plan("bare sealed", [[{"name": "add", "args": {"a": 1, "b": 2}}]]), "seal")
    assert cluster.app.AsyncResult(sealed_id).get(timeout=RESULT_SECONDS)["status"] == "completed"
    unsealed_id = send(goal_with_plan("bare unsealed", [[{"name": "add", "args": {"a": 1, "b": 2}}]]), "none")
    _wait_for(
        lambda: f"tandem.infer (task id {unsealed_id}): it carries no seal" in _logs(cluster), timeout=30
    )
    assert list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{unsealed_id}}}:*")) == []
