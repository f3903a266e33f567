"""Broker clients bound to their tenant by their signing certificate (issue 25, item 1), on real
workers: a bare Celery client signing with team-a's certificate starts jobs only as team-a and acts
only on team-a's jobs, whatever owner it names; it sends no internal step."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.tasks.control.owners import unknown_job
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_security import ROOT, _certificate

pytestmark = pytest.mark.integration

PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}]]

TENANT_CLIENT = """
import json, sys
from celery import Celery
from tandem.tasks.replay import install
url, key, cert, store, name, kwargs, wait = sys.argv[1:8]
queue = sys.argv[8] if len(sys.argv) > 8 else ""  # the intake queue unless named
app = Celery(broker=url, backend=url)
app.conf.update(
    security_key=key, security_certificate=cert, security_cert_store=store, security_digest="sha256",
    task_serializer="auth", accept_content=["auth"], result_serializer="json",
    result_accept_content=["json"],
)
app.setup_security(allowed_serializers=["json"], serializer="json")
install(600)
if queue:
    app.conf.task_default_queue = queue
sent = app.send_task(name, kwargs=json.loads(kwargs))
print(json.dumps(sent.get(timeout=60) if wait == "wait" else sent.id))
"""


@pytest.fixture
def tenants(redis_base: str, tmp_path: Path) -> Iterator[tuple[Cluster, dict[str, str]]]:
    store = tmp_path / "trusted"
    store.mkdir()
    key, cert = _certificate(store, "tandem")  # the workers' and operator's certificate
    team_key, team_cert = _certificate(store, "team-a")  # team-a's clients sign with this one
    gen = _make_cluster(
        redis_base,
        TANDEM_SIGNING_KEY=str(key),
        TANDEM_SIGNING_CERT=str(cert),
        TANDEM_SIGNING_CERT_STORE=str(store / "*.pem"),
        TANDEM_SIGNING_TENANTS=json.dumps({"team-a": str(team_cert)}),
    )
    cluster, _, _ = next(gen)
    yield cluster, {"key": str(team_key), "cert": str(team_cert), "store": str(store / "*.pem")}
    next(gen, None)


def _send(
    cluster: Cluster, team: dict[str, str], name: str, kwargs: dict[str, Any], *, wait: bool, queue: str = ""
) -> Any:
    """Send task ``name`` as team-a's client, to ``queue`` (by default the intake queue)."""
    argv = [cluster.url, team["key"], team["cert"], team["store"], name, json.dumps(kwargs)]
    done = subprocess.run(
        [sys.executable, "-c", TENANT_CLIENT, *argv, "wait" if wait else "send", queue],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _logs(cluster: Cluster) -> str:
    return "".join(p.read_text(errors="replace") for g in cluster.groups for p in g.log_dir.glob("*.log"))


def _wait_for(predicate, timeout: float = EVENT_SECONDS) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


Tenants = tuple[Cluster, dict[str, str]]


def test_a_tenant_certificate_starts_jobs_only_for_its_tenant(tenants: Tenants) -> None:
    cluster, team = tenants
    cluster.start("thinker", "actor", "tools")
    own = _send(cluster, team, "tandem.infer", {"spec": {"goal": goal_with_plan("mine", PLAN)}}, wait=False)
    result = cluster.app.AsyncResult(own).get(timeout=RESULT_SECONDS)
    assert (result["status"], result["owner"]) == ("completed", "team-a")  # no owner named: team-a's
    assert cluster.redis.hget(cluster.store.key(own, "state"), "owner") == b"team-a"

    spec = {"goal": goal_with_plan("theirs", PLAN), "owner": "team-b"}
    forged = _send(cluster, team, "tandem.infer", {"spec": spec}, wait=False)
    _wait_for(lambda: "but its spec names owner 'team-b'" in _logs(cluster))
    time.sleep(1)
    keys = cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{forged}}}:*")
    assert [k for k in keys if b":seen:" not in k] == []  # only the seal's nonce (it has a TTL)
    assert cluster.redis.get(f"celery-task-meta-{forged}") is None
    assert cluster.exited() == []


def test_a_tenant_certificate_acts_only_on_its_tenants_jobs(tenants: Tenants) -> None:
    cluster, team = tenants
    cluster.start("thinker", "actor", "tools")
    # The operator's client (the workers' certificate) may name any tenant.
    theirs = cluster.submit(goal=goal_with_plan("team-b's job", PLAN), owner="team-b")
    assert theirs.result(timeout=RESULT_SECONDS).status == "completed"
    sources = len(list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:*:spec")))

    fork = {"job_id": theirs.id, "round": 0}
    named = _send(cluster, team, "tandem.fork", {**fork, "owner": "team-b"}, wait=True)
    assert named == unknown_job("tandem.fork", theirs.id), named  # the answer of a job that does not exist
    unnamed = _send(cluster, team, "tandem.fork", fork, wait=True)
    assert unnamed == named, unnamed
    resumed = _send(cluster, team, "tandem.resume", {"job_id": theirs.id, "owner": "team-b"}, wait=True)
    assert resumed == unknown_job("tandem.resume", theirs.id), resumed
    assert len(list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:*:spec"))) == sources  # no fork

    # An internal step: on the intake queue the consumer refuses it before any task runs (a
    # client may write only there); on its role queue (a broker without ACL users lets a client
    # write there too) the signature's tenant refuses it.
    step_args = {"job_id": theirs.id, "round_no": 0}
    on_intake = _send(cluster, team, "tandem.collect_tools", step_args, wait=False)
    _wait_for(
        lambda: f"tandem.collect_tools (task id {on_intake}) arrived on the intake queue" in _logs(cluster)
    )
    step = _send(cluster, team, "tandem.collect_tools", step_args, wait=False, queue="tools")
    _wait_for(lambda: "tandem.collect_tools: signed with a certificate of tenant 'team-a'" in _logs(cluster))
    for sent in (on_intake, step):
        assert cluster.redis.get(f"celery-task-meta-{sent}") is None
    assert theirs.status().state == "completed"
    assert cluster.exited() == []
