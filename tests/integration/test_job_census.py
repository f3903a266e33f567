"""``tandem_jobs{state}`` and ``tandem_jobs_parked{reason}`` on a worker's ``/metrics``: a job
parked for approval is counted there, fleet-wide, and leaves the count once decided and ended."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tandem.workers.embedded import free_port
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


def _sample(body: str, name: str, **labels: str) -> float | None:
    for line in body.splitlines():
        match = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            return float(match.group(2))
    return None


def _scrape_until(port: int, check: object, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        if check(body) or time.monotonic() > deadline:  # type: ignore[operator]
            return body
        time.sleep(0.2)


def test_a_job_awaiting_approval_is_counted_by_state_and_as_parked(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    port = free_port()
    cluster.start("all", TANDEM_METRICS_PORT=str(port))
    plan = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
    handle = cluster.submit(goal=goal_with_plan("approve me", plan), max_rounds=4, approve_tools="all")

    body = _scrape_until(port, lambda b: _sample(b, "tandem_jobs_parked", reason="approval") == 1)
    assert _sample(body, "tandem_jobs_parked", reason="approval") == 1
    assert _sample(body, "tandem_jobs", state="awaiting_approval") == 1
    assert _sample(body, "tandem_jobs_parked", reason="in_flight") == 0
    assert _sample(body, "tandem_jobs_live") == 1

    handle.approve()
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    body = _scrape_until(port, lambda b: _sample(b, "tandem_jobs_live") == 0)
    assert _sample(body, "tandem_jobs_parked", reason="approval") == 0
    assert _sample(body, "tandem_jobs_live") == 0
