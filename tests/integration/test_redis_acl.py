"""The Redis ACL users of docs/security.md, on a redis-server of the test's own: workers run jobs as
the worker user; a client (a separate process) submits, follows, decides on and cancels jobs as the
client user, and so does ``tandem api``; the client user cannot touch the role queues or Redis's
administration. The ACL lines are read from the docs page, so the page is what is tested."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis
from redis.exceptions import NoPermissionError

from tests.integration.chaos import OwnRedis
from tests.integration.conftest import Cluster, _cluster_on
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
PASSWORDS = {"CLIENT_PASSWORD": "client-pw-0123456789", "WORKER_PASSWORD": "worker-pw-0123456789"}
PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}, {"name": "notify", "args": {"to": "ops"}}]]

CLIENT = textwrap.dedent(
    """
    import json, sys
    from tandem.tasks import submit
    from tandem.client.handle import JobHandle

    goal, = sys.argv[1:]
    out = {}
    job = submit({"goal": goal, "reasoner": "mono", "max_rounds": 4})
    import time
    deadline = time.monotonic() + 90
    while job.status().state != "awaiting_approval":
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.1)
    out["decided"] = [d.approve for d in job.approve(timeout=60)]
    result = job.result(timeout=90)
    out["result"] = [result.status, result.deliverable]
    out["events"] = [e.type for e in job.events(timeout=5)]
    other = submit({"goal": "cancel me", "max_rounds": 50, "timeout_s": 600})
    other.cancel()
    out["cancelled"] = other.result(timeout=90).status
    print(json.dumps(out))
    """
)


def acl_lines() -> list[str]:
    """The ``ACL SETUSER`` lines of docs/security.md, with the test's passwords."""
    lines = [line.strip() for line in DOCS.read_text().splitlines() if line.strip().startswith("ACL SETUSER")]
    assert len(lines) == 2, lines
    for name, value in PASSWORDS.items():
        lines = [line.replace(name, value) for line in lines]
    return lines


@pytest.fixture
def acl_redis() -> Iterator[OwnRedis]:
    server = OwnRedis(appendonly=False).start()
    admin = Redis.from_url(f"{server.base}/0")
    for line in acl_lines():
        admin.execute_command(*line.split())
    try:
        yield server
    finally:
        server.stop()


def _url(server: OwnRedis, user: str) -> str:
    password = PASSWORDS[f"{user.upper()}_PASSWORD"]
    return server.base.replace("redis://", f"redis://tandem-{user}:{password}@") + "/0"


def _as(url: str) -> dict[str, str]:
    return {"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}


def test_the_documented_acl_users_run_jobs_and_keep_clients_off_the_queues(acl_redis: OwnRedis) -> None:
    worker_url, client_url = _url(acl_redis, "worker"), _url(acl_redis, "client")
    hosts: Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]] = _cluster_on(f"{acl_redis.base}/0")
    cluster, _, _ = next(hosts)
    api = None
    try:
        cluster.start("thinker", "actor", "tools", **_as(worker_url))
        env = {**os.environ, **cluster.env, **_as(client_url)}
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, goal_with_plan("acl", PLAN)],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout)
        assert out["decided"] == [True]
        assert out["result"] == ["completed", "mono plan done"]
        assert out["events"][0] == "job_started" and out["events"][-1] == "final"
        assert "approval_requested" in out["events"] and out["cancelled"] == "cancelled"

        api = ApiProcess({**cluster.env, **_as(client_url)})  # the API as the client user
        created = httpx.post(f"{api.url}/v1/jobs", json={"goal": "What is 2+2?", "max_rounds": 4}, timeout=30)
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        with httpx.stream("GET", f"{api.url}/v1/jobs/{job_id}/events", timeout=90) as stream:
            data = [line[6:] for line in stream.iter_lines() if line.startswith("data: ")]
        kinds = [json.loads(d)["type"] for d in data]
        assert kinds[-1] == "final"
        assert httpx.get(f"{api.url}/v1/jobs/{job_id}", timeout=30).json()["status"]["state"] == "completed"
        assert job_id in [j["job_id"] for j in httpx.get(f"{api.url}/v1/jobs", timeout=30).json()["jobs"]]

        client = Redis.from_url(client_url)
        for forbidden in (
            lambda: client.lpush("thinker", "{}"),  # no forged step messages on the role queues
            lambda: client.lrange("tools", 0, -1),
            lambda: client.flushall(),
            lambda: client.keys("*"),
            lambda: client.config_get("*"),
            lambda: client.get("someone-else:key"),
        ):
            with pytest.raises(NoPermissionError):
                forbidden()
        assert cluster.exited() == []
    finally:
        if api is not None:
            api.stop()
        hosts.close()


def test_the_docs_give_the_client_no_administration() -> None:
    client, worker = acl_lines()
    assert re.search(r"(^| )-@all( |$)", client) and "+@admin" not in client and "+@dangerous" not in client
    assert "-@admin" in worker and "-@dangerous" in worker
