"""``/metrics`` of a ``--pool prefork`` worker shows what its pool processes recorded; a ``--pool
gevent`` worker's (one process, greenlets) what its greenlets recorded, and it runs jobs at all
(gevent's patching comes before the command's imports: ``tandem.workers.green``)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tandem.workers.embedded import free_port
from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@pytest.fixture
def hosts(redis_base: str) -> Iterator[Hosts]:
    yield from _make_cluster(redis_base)


def _sample(body: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition ``body`` (0 when absent)."""
    for line in body.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    return 0.0


@pytest.mark.parametrize("pool", ["prefork", "gevent"])
def test_a_workers_metrics_count_its_steps_whatever_its_pool(hosts: Hosts, pool: str) -> None:
    cluster, _, _ = hosts
    port = free_port()
    cluster.start("all", pool=pool, concurrency={"all": 2}, TANDEM_METRICS_PORT=str(port))
    plan = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
    handles = [cluster.submit(goal=goal_with_plan(f"prefork {i}", plan), max_rounds=4) for i in range(2)]
    for h in handles:
        assert h.result(timeout=RESULT_SECONDS).status == "completed"
    deadline = time.monotonic() + 10
    while True:  # the last step's counters are written as its task returns, after the result
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        done = _sample(body, "tandem_step_outcomes_total", task="tandem.run_tool", outcome="success")
        if done >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert _sample(body, "tandem_step_outcomes_total", task="tandem.thinker_turn", outcome="success") >= 4
    assert _sample(body, "tandem_step_outcomes_total", task="tandem.actor_turn", outcome="success") >= 4
    assert done >= 2  # one add per job
    assert _sample(body, "tandem_step_seconds_count", role="thinker", task="tandem.thinker_turn") >= 4
    assert _sample(body, "tandem_tool_call_seconds_count", tool="add", status="succeeded") >= 2
    assert _sample(body, "tandem_jobs_ended_total", outcome="completed") == 2
    assert _sample(body, "tandem_job_seconds_count", outcome="completed") == 2
    assert _sample(body, "tandem_worker_up", role="thinker,actor,tools", pool=pool) == 1
    assert _sample(body, "tandem_steps_running", task="tandem.thinker_turn") == 0  # summed, live only
    assert "tandem_queue_depth" in body  # the fleet-wide collectors are served too
    assert cluster.exited() == []
