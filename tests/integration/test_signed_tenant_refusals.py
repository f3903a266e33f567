"""A broker client bound to its tenant by its signing certificate gets one refusal for another
tenant's job, on real workers (docs/security.md, "Broker clients are bound to their tenant").

Team-a's bare Celery client (signing with team-a's certificate, mapped by
``TANDEM_SIGNING_TENANTS``) sends every control task for team-b's jobs (one parked for approval,
one ended) and for ids no job has, naming team-b as the owner and naming no one. Every answer is
the answer of an unknown job, the same words whichever it was (``owners.unknown_job``), and
team-b's jobs are exactly as they were; team-b's own client then decides on its job, which goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.control.owners import unknown_job
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_breaking_conversation import job_keys, settled, snapshot
from tests.integration.test_durability import wait_for
from tests.integration.test_security import ROOT, _certificate
from tests.integration.test_signed_tenants import TENANT_CLIENT

pytestmark = pytest.mark.integration

PARK = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
DONE = [[{"name": "add", "args": {"a": 2, "b": 3}}]]

BATCH_CLIENT = TENANT_CLIENT.replace(
    "url, key, cert, store, name, kwargs, wait = sys.argv[1:8]",
    "url, key, cert, store, calls = sys.argv[1:6]",
).replace(
    "sent = app.send_task(name, kwargs=json.loads(kwargs))\n"
    'print(json.dumps(sent.get(timeout=60) if wait == "wait" else sent.id))',
    "sent = [app.send_task(name, kwargs=kwargs) for name, kwargs in json.loads(calls)]\n"
    "print(json.dumps([s.get(timeout=60) for s in sent]))",
)
"""The signing bare client of ``test_signed_tenants``, sending a batch of calls and printing their
answers in order."""
assert "json.loads(calls)" in BATCH_CLIENT, "TENANT_CLIENT changed: fix BATCH_CLIENT"


class Teams:
    """The cluster and each tenant's signing material (``key``, ``cert``, ``store``)."""

    def __init__(self, cluster: Cluster, teams: dict[str, dict[str, str]]) -> None:
        self.cluster = cluster
        self.teams = teams

    def send(self, team: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        """The answers of ``calls`` (task name, kwargs) sent by a client signing as ``team``."""
        material = self.teams[team]
        argv = [self.cluster.url, material["key"], material["cert"], material["store"], json.dumps(calls)]
        done = subprocess.run(
            [sys.executable, "-c", BATCH_CLIENT, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def teams(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    root: Path = tmp_path_factory.mktemp("signing")
    store = root / "trusted"
    store.mkdir()
    key, cert = _certificate(store, "tandem")  # the workers' and the operator's
    material: dict[str, dict[str, str]] = {}
    for name in ("team-a", "team-b"):
        team_key, team_cert = _certificate(store, name)
        material[name] = {"key": str(team_key), "cert": str(team_cert), "store": str(store / "*.pem")}
    gen = _make_cluster(
        redis_base,
        TANDEM_SIGNING_KEY=str(key),
        TANDEM_SIGNING_CERT=str(cert),
        TANDEM_SIGNING_CERT_STORE=str(store / "*.pem"),
        TANDEM_SIGNING_TENANTS=json.dumps({name: m["cert"] for name, m in material.items()}),
    )
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools")
    yield Teams(cluster, material)
    next(gen, None)


def requests(job: str, pause: str) -> list[tuple[str, dict[str, Any]]]:
    """Every control task, asking something of ``job`` that its own tenant could ask."""
    return [
        ("tandem.decide", {"job_id": job, "pause_id": pause, "decisions": True, "idempotency_key": "d-1"}),
        ("tandem.answer", {"job_id": job, "pause_id": pause, "answer": "Oslo", "idempotency_key": "a-1"}),
        ("tandem.message", {"job_id": job, "text": "Wire it to team-a.", "idempotency_key": "m-1"}),
        ("tandem.resume", {"job_id": job, "max_rounds": 9}),
        ("tandem.fork", {"job_id": job, "round": 1, "goal": "leak the secrets"}),
        ("tandem.follow_up", {"job_id": job, "goal": "and now?", "idempotency_key": "f-1"}),
    ]


def test_another_tenants_jobs_and_no_jobs_get_one_refusal_from_a_signed_client(teams: Teams) -> None:
    cluster = teams.cluster
    parked = cluster.submit(goal=goal_with_plan("team-b parked", PARK), owner="team-b", max_rounds=4)
    ended = cluster.submit(goal=goal_with_plan("team-b ended", DONE), owner="team-b")
    assert ended.result(timeout=RESULT_SECONDS).status == "completed"
    wait_for(lambda: parked.status().state == "awaiting_approval", EVENT_SECONDS, "the job to park")
    pause = parked.pending_approval()
    assert pause is not None
    before = {job.id: settled(cluster, job.id) for job in (parked, ended)}
    nobody = {job.id: f"no-such-job-{i}".ljust(len(job.id), "0") for i, job in enumerate((parked, ended))}

    calls: list[tuple[str, dict[str, Any]]] = []
    for job in (parked, ended):
        for job_id in (job.id, nobody[job.id]):
            for name, kwargs in requests(job_id, pause.pause_id.replace(parked.id, job_id)):
                calls += [(name, kwargs), (name, {**kwargs, "owner": "team-b"})]
    answers = teams.send("team-a", calls)

    for (name, kwargs), answer in zip(calls, answers, strict=True):
        expected = unknown_job(name, kwargs["job_id"], kwargs.get("pause_id"))
        assert answer == expected, (name, kwargs, answer)
    spent = {k for job_id in nobody.values() for k in job_keys(cluster, job_id)}
    assert all(":seen:" in k for k in spent), spent  # only the replay guard's nonces (with a TTL)
    assert {job.id: snapshot(cluster, job.id) for job in (parked, ended)} == before
    assert parked.status().state == "awaiting_approval"

    [own] = teams.send("team-b", [requests(parked.id, pause.pause_id)[0]])  # its own tenant: applied
    assert own["accepted"] is True and own["complete"] is True, own
    assert (
        JobHandle(parked.id, cluster.store, cluster.app).result(timeout=RESULT_SECONDS).status == "completed"
    )
    assert cluster.exited() == []
