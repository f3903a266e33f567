"""A tool's huge output harms nothing (issue 22, item 4), against real workers and a real Redis.

Before the fix, a 50 MB output was redacted before it was cut: the redaction's regular expressions
held the GIL for seconds at a time, the worker's lease keeper thread could not run, and every lease
of the process expired: the other calls it held ran again elsewhere (and the heavy call itself ran
until the job failed). Now the output is cut first, so the lease keeper never stops.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tandem.tasks.job_events import ToolResult
from tandem.tasks.state.claims import token_pid
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
ENV = {
    "TANDEM_TOOLKIT": "tests.integration.tools:large_output_toolkit",
    "TANDEM_TOOL_TIMEOUT": "60",
    "TANDEM_LEASE_SECONDS": "3",  # renewed every second; an expiry shows within 3 s of a stall
    "TANDEM_STALL_SECONDS": "3",
}
SIZE = 50 * 1_000_000


def call_state(cluster: Cluster, job_id: str) -> dict[str, str]:
    """The job's calls hash (holder, lease and attempts of each call of the running tool round)."""
    raw = cluster.redis.hgetall(cluster.store.key(job_id, "calls"))
    return {k.decode(): v.decode() for k, v in raw.items()}


def wait_for(what: Any, timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message}")


class Attempts(threading.Thread):
    """Reads each job's calls hash every 20 ms (it is gone once the round's results are collected)
    and keeps the most attempts seen for call 1."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.seen: dict[str, int] = {}
        self.stopped = threading.Event()

    def watch(self, job_id: str) -> None:
        self.seen[job_id] = 0

    def run(self) -> None:
        while not self.stopped.wait(0.02):
            for job in list(self.seen):
                count = int(call_state(self.cluster, job).get("1:attempts") or 0)
                self.seen[job] = max(self.seen[job], count)


def test_a_fifty_megabyte_output_lets_every_other_lease_of_its_process_live(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "actor", **ENV)
    tools = cluster.start("tools", concurrency={"tools": 2}, **ENV)
    attempts = Attempts(cluster)
    attempts.start()
    slow_plan = [[{"name": "sleep_tool", "args": {"seconds": 12}}]]
    slow = cluster.submit(goal=goal_with_plan("holds a lease", slow_plan), max_rounds=4)
    attempts.watch(slow.id)
    slow_holder = wait_for(lambda: call_state(cluster, slow.id).get("1:holder"), 90, "the slow call")
    heavy_plan = [[{"name": "big_output", "args": {"megabytes": 50}}]]
    heavy = cluster.submit(goal=goal_with_plan("fifty megabytes", heavy_plan), max_rounds=4)
    attempts.watch(heavy.id)
    heavy_holder = wait_for(lambda: call_state(cluster, heavy.id).get("1:holder"), 90, "the heavy call")
    assert token_pid(slow_holder) == token_pid(heavy_holder) == tools.processes["tools"].pid
    # A second tools worker would run again any call whose lease expired (none may).
    spare = cluster.start("tools", name="spare", **ENV)

    try:
        slow_result, heavy_result = slow.result(timeout=RESULT_SECONDS), heavy.result(timeout=RESULT_SECONDS)
    finally:
        attempts.stopped.set()
        attempts.join()
    assert slow_result.status == "completed", slow_result
    assert heavy_result.status == "completed", heavy_result
    assert attempts.seen == {slow.id: 1, heavy.id: 1}
    runs = [(c["job"], c["name"], c["attempt"]) for c in cluster.tool_calls()]
    assert sorted(runs) == sorted([(slow.id, "sleep_tool", 1), (heavy.id, "big_output", 1)])
    (output,) = [e.output for e in heavy.events(timeout=10) if isinstance(e, ToolResult)]
    # Over the job's memory limit (TANDEM_MAX_MEMORY_BYTES), it is not kept as an artifact: cut, saying why.
    assert f"\n[output cut: showing the first 8000 of {SIZE} characters]\n" in output
    assert output.endswith(
        "[the whole output was not kept: it would bring the job's memory over its limit "
        "of 20000000 bytes (TANDEM_MAX_MEMORY_BYTES)]"
    )
    assert output.startswith("00000000 GET /v1/items/item-0-a-b-c?page=2 200")
    for group in (tools, spare, *cluster.groups):
        for role, proc in group.processes.items():
            assert proc.poll() is None, f"the {role} worker exited by itself ({proc.returncode})"
