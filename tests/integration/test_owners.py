"""Two tenants side by side on a real ``tandem api`` and real workers: neither can see, stream,
decide, cancel, resume or fork the other's jobs; sealed secrets stay in their tenant's jobs, even
for a bare ``tandem.fork``; a grant-only tool goes only to the tenant the policy grants it to."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
A, B, ADMIN = "token-of-team-a-0123456789", "token-of-team-b-0123456789", "token-of-ops-admin-012345"
TOKENS = {
    A: {"tenant": "team-a"},
    B: {"tenant": "team-b"},
    ADMIN: {"tenant": "ops", "scopes": ["admin"]},
}
TOOLKIT = """
tools:
  - function: tests.integration.security_tools:add
  - function: tests.integration.security_tools:leak
  - function: tests.integration.security_tools:danger
policy:
  allow: ["*"]
  grant: {team-a: [danger]}
"""
SECRET = "team-a-secret-planted-9"
ADD = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
LEAK = [[{"name": "leak", "args": {}}]]

Setup = tuple[Cluster, ApiProcess, dict[str, httpx.Client]]


@pytest.fixture(scope="module")
def tenants(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    toolkit = tmp_path_factory.mktemp("owners") / "toolkit.yaml"
    toolkit.write_text(TOOLKIT)
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT=str(toolkit),
        TANDEM_SECRETS_KEY=Fernet.generate_key().decode(),
        TANDEM_API_TOKENS=json.dumps(TOKENS),
        PYTHONPATH=str(ROOT),
    )
    cluster, _, _ = next(gen)
    cluster.start("actor", "tools")
    server = ApiProcess(cluster.env)
    clients = {
        name: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        for name, token in (("a", A), ("b", B), ("admin", ADMIN))
    }
    try:
        yield cluster, server, clients
    finally:
        for client in clients.values():
            client.close()
        server.stop()
        next(gen, None)


def until(what: Callable[[], Any], timeout: float = 60, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {message}")


def submit(client: httpx.Client, plan: list[Any], **spec: Any) -> str:
    body = {"goal": goal_with_plan("the job", plan), "reasoner": "mono", "max_rounds": 3, **spec}
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    return str(created.json()["id"])


def state(client: httpx.Client, job_id: str) -> str:
    return str(client.get(f"/v1/jobs/{job_id}").json()["status"]["state"])


def ended(client: httpx.Client, job_id: str) -> dict[str, Any]:
    body = until(lambda: (b := client.get(f"/v1/jobs/{job_id}").json())["result"] and b, message=job_id)
    return dict(body["result"])


def refused_as_unknown(client: httpx.Client, job_id: str) -> None:
    """Every read and control action on ``job_id`` answers 404 ``unknown_job``, as for no job."""
    for method, path, body in (
        ("GET", "", None),
        ("GET", "/events", None),
        ("POST", "/decisions", {"decisions": True}),
        ("POST", "/cancel", None),
        ("POST", "/resume", None),
        ("POST", "/fork", {"round": 1}),
    ):
        answer = client.request(method, f"/v1/jobs/{job_id}{path}", json=body)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"]["code"] == "unknown_job"
    assert job_id not in {j["job_id"] for j in client.get("/v1/jobs").json()["jobs"]}


def test_neither_tenant_can_see_stream_decide_cancel_resume_or_fork_the_others_jobs(tenants: Setup) -> None:
    _, _, http = tenants
    a_job = submit(http["a"], ADD, approve_tools=["add"])
    b_job = submit(http["b"], ADD, approve_tools=["add"])
    for who, job in (("a", a_job), ("b", b_job)):
        until(lambda w=who, j=job: state(http[w], j) == "awaiting_approval", message=f"{job} parks")
    refused_as_unknown(http["a"], b_job)
    refused_as_unknown(http["b"], a_job)
    # Nothing the other tenant tried changed anything: both still wait for their own person.
    assert state(http["a"], a_job) == state(http["b"], b_job) == "awaiting_approval"

    decided = http["a"].post(f"/v1/jobs/{a_job}/decisions", json={"decisions": True})
    assert decided.status_code == 200, decided.text
    assert ended(http["a"], a_job)["status"] == "completed"
    assert http["b"].post(f"/v1/jobs/{b_job}/cancel").status_code == 202
    assert ended(http["b"], b_job)["status"] == "cancelled"
    refused_as_unknown(http["a"], b_job)  # ended jobs too: resume and fork included
    refused_as_unknown(http["b"], a_job)

    # The owner resumes and forks its own; the jobs keep their owner. Admin sees every tenant.
    assert http["b"].post(f"/v1/jobs/{b_job}/resume").status_code == 202
    forked = http["a"].post(f"/v1/jobs/{a_job}/fork", json={"round": 1, "max_rounds": 3})
    assert forked.status_code == 202, forked.text
    fork_id = forked.json()["id"]
    assert http["a"].get(f"/v1/jobs/{fork_id}").json()["status"]["owner"] == "team-a"
    assert http["b"].get(f"/v1/jobs/{fork_id}").status_code == 404
    assert http["b"].get(f"/v1/jobs/{b_job}").json()["status"]["owner"] == "team-b"
    listed = {j["job_id"] for j in http["admin"].get("/v1/jobs").json()["jobs"]}
    assert {a_job, b_job, fork_id} <= listed
    with http["a"].stream("GET", f"/v1/jobs/{a_job}/events") as own:
        assert own.status_code == 200


def test_a_jobs_sealed_secrets_are_used_only_in_jobs_of_its_owner(tenants: Setup) -> None:
    cluster, _, http = tenants
    job = submit(http["a"], LEAK, secrets={"tok": SECRET})
    assert ended(http["a"], job)["status"] == "completed"
    sealed = cluster.store.spec(job)
    assert sealed is not None and sealed.owner == "team-a" and SECRET not in sealed.model_dump_json()

    # A bare client's fork naming another tenant, or none, is refused as for an unknown job.
    for owner in ({"owner": "team-b"}, {}):
        kwargs = {"job_id": job, "round": 1, "goal": goal_with_plan("again", LEAK), **owner}
        answer = cluster.app.send_task("tandem.fork", kwargs=kwargs).get(timeout=RESULT_SECONDS)
        assert answer["accepted"] is False and answer["reason"] == "unknown", answer
        assert "is known" in answer["error"]

    # The sealed value copied into another tenant's spec does not unseal there.
    stolen = {**sealed.model_dump(mode="json"), "owner": "team-b", "goal": goal_with_plan("steal", LEAK)}
    handle = cluster.submit(**stolen)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "failed" and "sealed for another tenant" in (result.error or "")
    assert not [c for c in cluster.tool_calls() if c["job"] == handle.id]


def test_a_grant_only_tool_goes_to_the_granted_tenant_only(tenants: Setup) -> None:
    _, _, http = tenants
    danger = [[{"name": "danger", "args": {}}]]
    granted = submit(http["a"], danger, tools=["danger"])
    assert ended(http["a"], granted)["status"] == "completed"
    named = submit(http["b"], danger, tools=["danger"])  # naming it is not enough
    result = ended(http["b"], named)
    assert result["status"] == "failed"
    assert "not permitted by the worker's tool policy to tenant 'team-b'" in result["error"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
