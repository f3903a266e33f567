"""A dual job through real workers: per-role hosts, parallel tools, memory in Redis, job control."""

from __future__ import annotations

import time

import pytest

from tandem.tasks.errors import JobSpecError
from tandem.tasks.job_events import ToolCall
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


def _system(request: dict) -> str:
    return str(request["messages"][0]["content"])


def test_dual_job_completes_with_per_role_hosts_and_parallel_tools(dual_cluster: Hosts) -> None:
    cluster, thinker, actor = dual_cluster
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1}}, {"name": "sleep_tool", "args": {"seconds": 1}}]]
    handle = cluster.submit(goal=goal_with_plan("sleep twice", plan), max_rounds=5)
    result = handle.result(timeout=RESULT_SECONDS)

    assert result.status == "completed", result
    assert result.deliverable == "all planned calls ran"
    assert result.rounds == 2
    assert result.usage.calls == 4

    thinker_requests = [r for r in thinker.requests if handle.id in str(r) or True]
    assert thinker_requests and all("You are the Thinker" in _system(r) for r in thinker.requests)
    assert actor.requests and all("You are the Actor" in _system(r) for r in actor.requests)
    assert all(r["model"] == "thinker-model" for r in thinker.requests)
    assert all(r["model"] == "actor-model" for r in actor.requests)

    calls = [c for c in cluster.tool_calls() if c["job"] == handle.id]
    assert [c["name"] for c in calls] == ["sleep_tool", "sleep_tool"]
    first, second = sorted(calls, key=lambda c: c["start"])
    assert second["start"] < first["end"], "the two 1-second tools did not overlap"
    assert max(c["end"] for c in calls) - min(c["start"] for c in calls) < 1.8

    memory = cluster.store.memory(handle.id).get_messages()
    assert [(m.round, m.role) for m in memory] == [
        (0, "thinker"),
        (0, "actor"),
        (0, "tool"),
        (1, "thinker"),
        (1, "actor"),
    ]
    assert memory[0].reasoning == "thinker reasoning 1"
    assert "thinker reasoning" not in str(actor.requests) + str(thinker.requests[1:])
    assert cluster.redis.ttl(cluster.store.key(handle.id, "memory")) > 0

    events = list(handle.events(timeout=5))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "job_started" and kinds[-1] == "final"
    assert {"round_started", "model_reply", "tool_call", "tool_result"} <= set(kinds)
    attempts = [e.attempt for e in events if isinstance(e, ToolCall)]
    assert attempts and set(attempts) == {1}  # each call ran once: its first attempt
    assert handle.status().state == "completed"


def test_max_rounds_gives_truncated(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    result = cluster.submit(goal="NEVER_DONE", max_rounds=2).result(timeout=RESULT_SECONDS)
    assert result.status == "truncated"
    assert result.rounds == 2
    assert "max_rounds" in (result.error or "")


def test_tool_that_raises_and_tool_that_hangs_are_reported_and_the_job_goes_on(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [
        [
            {"name": "boom", "args": {}},
            {"name": "hang", "args": {}},
            {"name": "add", "args": {"a": 2, "b": 3}},
        ]
    ]
    handle = cluster.submit(goal=goal_with_plan("break things", plan), max_rounds=4)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed"
    tool_message = cluster.store.memory(handle.id).get_message(0, "tool")
    assert tool_message is not None
    boom, hang, add = tool_message.function_results
    assert boom.status == "failed" and "RuntimeError: boom went the tool" in boom.output
    assert hang.status == "failed" and "timed out" in hang.output
    assert add.status == "succeeded" and add.output == "5"


def test_cancel_stops_the_job_at_its_next_step(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [[{"name": "sleep_tool", "args": {"seconds": 2}}]] * 5
    handle = cluster.submit(goal=goal_with_plan("slow NEVER_DONE", plan), max_rounds=20)
    deadline = time.monotonic() + 30
    while not [c for c in cluster.tool_calls() if c["job"] == handle.id] and time.monotonic() < deadline:
        time.sleep(0.1)
    handle.cancel()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "cancelled"
    assert result.rounds <= 2
    assert cluster.app.AsyncResult(handle.id).get(timeout=10)["status"] == "cancelled"


def test_invalid_spec_is_refused_at_submit_and_nothing_is_enqueued(dual_cluster: Hosts) -> None:
    """Nothing of a job is written: no job key (``tandem:{<id>}:...``, what ``submit`` writes
    first) and no Celery result. The database's size is no measure: the workers' own keys (a
    sweep's lock) come and go meanwhile."""
    cluster, _, _ = dual_cluster
    before = set(cluster.redis.scan_iter(count=1000))
    with pytest.raises(JobSpecError, match="'max_rounds'"):
        cluster.submit(goal="fine", max_rounds=0)
    with pytest.raises(JobSpecError, match="'goal'"):
        cluster.submit(goal="   ")
    with pytest.raises(JobSpecError, match=r"'reasonr'.*unknown field"):
        cluster.submit(goal="x", reasonr="mono")
    created = set(cluster.redis.scan_iter(count=1000)) - before
    assert [k for k in created if b"{" in k or k.startswith(b"celery-task-meta-")] == []


def test_unknown_action_fails_the_job_with_the_name(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    result = cluster.submit(goal="x", actions=["no_such_action"]).result(timeout=RESULT_SECONDS)
    assert result.status == "failed"
    assert "no_such_action" in (result.error or "")


def test_mono_job_runs_on_actor_and_tools_only(dual_cluster: Hosts) -> None:
    cluster, thinker, _ = dual_cluster
    seen_by_thinker = len(thinker.requests)
    plan = [[{"name": "add", "args": {"a": 1, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("add", plan), reasoner="mono", max_rounds=4)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed"
    assert result.deliverable == "mono plan done"
    assert len(thinker.requests) == seen_by_thinker
    roles = [m.role for m in cluster.store.memory(handle.id).get_messages()]
    assert roles == ["actor", "tool", "actor"]


def test_status_and_cancel_commands(dual_cluster: Hosts) -> None:
    import json
    import os
    import subprocess
    import sys

    cluster, _, _ = dual_cluster
    env = {**os.environ, **cluster.env}

    def tandem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tandem.workers.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = cluster.submit(
        goal=goal_with_plan("quick", [[{"name": "add", "args": {"a": 1, "b": 1}}]]), max_rounds=4
    )
    done.result(timeout=RESULT_SECONDS)
    shown = tandem("status", done.id)
    assert shown.returncode == 0, shown.stderr
    status_json, result_json = shown.stdout.split("\n}\n", 1)
    assert json.loads(status_json + "}")["state"] == "completed"
    assert json.loads(result_json)["deliverable"] == "all planned calls ran"

    # A minute of rounds: the cancel command's own start (seconds on a loaded machine) must not
    # outlast the job it cancels; cancelled, it costs the test none of that minute.
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1}}]] * 60
    running = cluster.submit(goal=goal_with_plan("long NEVER_DONE", plan), max_rounds=80)
    cancelled = tandem("cancel", running.id)
    assert cancelled.returncode == 0 and "cancellation requested" in cancelled.stdout
    assert running.result(timeout=RESULT_SECONDS).status == "cancelled"

    unknown = tandem("status", "no-such-job")
    assert unknown.returncode == 2 and "no job 'no-such-job'" in unknown.stderr


def test_a_spent_token_budget_ends_the_job_with_its_memory_kept(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [[{"name": "add", "args": {"a": 1, "b": 1}}] for _ in range(6)]
    handle = cluster.submit(
        goal=goal_with_plan("budget NEVER_DONE", plan), max_rounds=20, max_tokens_total=300
    )
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "truncated"
    assert result.error is not None and "token budget is spent" in result.error
    assert "max_tokens_total=300" in result.error
    assert result.usage.total_tokens >= 300
    assert 0 < result.rounds < 20
    memory = cluster.store.memory(handle.id).get_messages()
    assert len(memory) >= 2 and cluster.redis.ttl(cluster.store.key(handle.id, "memory")) > 0
