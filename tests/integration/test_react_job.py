"""ReAct jobs through real workers: model steps on the actor worker, tool calls on the tools worker.

The actor host speaks native tool calls: the job's goal carries the plan
(``PLAN: [[call, call], [call]]``, one inner list per model step); each step asks for its calls as
OpenAI ``tool_calls`` and, after the plan, answers with the tool results it read. The host refuses
(HTTP 400) any request whose history has a tool call without its result, so such a bug fails the job.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.reasoner.loop.react_budget import NEEDS_MORE_STEPS
from tandem.workers.embedded import WorkerGroup
from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

_GOAL = re.compile(r"<goal>(.*?)</goal>", re.S)


def history_problem(messages: list[dict[str, Any]]) -> str | None:
    """Why ``messages`` is not a valid tool-calling history, or ``None``."""
    pending: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            if not pending or m.get("tool_call_id") != pending[0]:
                return f"tool message {m.get('tool_call_id')!r} does not answer the next call {pending[:1]}"
            pending.pop(0)
        elif pending:
            return f"calls {pending} have no result before a {m['role']} message"
        elif m["role"] == "assistant":
            pending = [c["id"] for c in m.get("tool_calls") or []]
    return f"calls {pending} have no result" if pending else None


def react_host(request: RecordedRequest) -> Reply:
    """A native tool-calling model that follows the plan in its goal."""
    problem = history_problem(request["messages"])
    if problem:
        return Reply(status=400, error=f"invalid history: {problem}")
    found = _GOAL.search(str(request["messages"][1]["content"]))
    goal = found.group(1) if found else ""
    step = sum(1 for m in request["messages"] if m["role"] == "assistant")
    plan = json.loads(goal.split("PLAN:", 1)[1]) if "PLAN:" in goal else []
    if "NEVER_DONE" in goal or step < len(plan):
        calls = plan[step] if step < len(plan) else [{"name": "add", "args": {"a": step, "b": 1}}]
        return Reply(
            reasoning_content=f"step {step} reasoning",
            tool_calls=[
                {"id": f"call-{step}-{i}", "name": c["name"], "arguments": c["args"]}
                for i, c in enumerate(calls, start=1)
            ],
        )
    results = [str(m["content"]) for m in request["messages"] if m["role"] == "tool"]
    return Reply(content=f"done after {step} steps: {' | '.join(results)}")


@pytest.fixture(scope="module")
def react_cluster(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer, WorkerGroup]]:
    """An actor worker and a tools worker (no thinker) with a native tool-calling actor host.

    One Redis database for the whole module; leases of 2 s so a killed worker's step is taken
    over quickly (the SIGKILL test comes last, as it replaces the actor worker)."""
    clusters = _make_cluster(
        redis_base, TANDEM_TOOLKIT="tests.integration.react_tools:toolkit", TANDEM_LEASE_SECONDS="2"
    )
    cluster, _thinker, actor = next(clusters)
    actor.set_script(react_host)
    workers = cluster.start("actor", "tools")
    yield cluster, actor, workers
    next(clusters, None)  # resumes _make_cluster past its yield: stops the workers, empties the database


def requests_of(actor: OpenAIServer, goal_text: str) -> list[RecordedRequest]:
    return [r for r in actor.requests if goal_text in str(r["messages"][1]["content"])]


def test_react_job_completes_with_parallel_tools_on_the_tools_worker(
    react_cluster: tuple[Cluster, OpenAIServer, WorkerGroup],
) -> None:
    cluster, actor, workers = react_cluster
    plan = [
        [{"name": "sleep_tool", "args": {"seconds": 1}}, {"name": "sleep_tool", "args": {"seconds": 1}}],
        [
            {"name": "add", "args": {"a": 2, "b": 3, "ctx": {"job_id": "forged"}}},
            {"name": "nope", "args": {}},
        ],
    ]
    handle = cluster.submit(goal=goal_with_plan("react sleeps", plan), reasoner="react", max_rounds=10)
    result = handle.result(timeout=RESULT_SECONDS)

    assert result.status == "completed", result
    assert result.deliverable.startswith(
        "done after 2 steps: slept 1.0 s | slept 1.0 s | 5 | Error: There is no tool"
    )
    assert result.rounds == 3 and result.usage.calls == 3

    calls = [c for c in cluster.tool_calls() if c["job"] == handle.id]
    assert sorted((c["round"], c["index"], c["name"]) for c in calls) == [
        (0, 1, "sleep_tool"),
        (0, 2, "sleep_tool"),
        (1, 1, "add"),
    ]  # the forged ctx value was dropped: the real job id reached the tool
    assert {c["pid"] for c in calls} == {workers.processes["tools"].pid}
    sleeps = sorted((c for c in calls if c["name"] == "sleep_tool"), key=lambda c: c["start"])
    assert sleeps[1]["start"] < sleeps[0]["end"], "the two 1-second tools did not overlap"

    requests = requests_of(actor, "react sleeps")
    assert len(requests) == 3
    assert all(history_problem(r["messages"]) is None for r in requests)
    assert "You solve the task step by step" in requests[0]["messages"][0]["content"]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in requests[0]["tools"]}
    assert {"sleep_tool", "add", "boom", "finish"} <= set(schemas) and "ctx" not in schemas["add"][
        "properties"
    ]
    tool_messages = [
        (m["tool_call_id"], m["content"]) for m in requests[2]["messages"] if m["role"] == "tool"
    ]
    assert [i for i, _ in tool_messages] == ["call-0-1", "call-0-2", "call-1-1", "call-1-2"]
    assert "Valid tool names" in tool_messages[3][1]
    assert "step 0 reasoning" not in str(requests[2]["messages"])

    memory = cluster.store.memory(handle.id).get_messages()
    assert [(m.round, m.role) for m in memory] == [
        (0, "actor"),
        (0, "tool"),
        (1, "actor"),
        (1, "tool"),
        (2, "actor"),
    ]
    assert memory[0].reasoning == "step 0 reasoning"
    kinds = [e["type"] for e in handle.events(timeout=5)]
    assert kinds[0] == "job_started" and kinds[-1] == "final"
    assert {"round_started", "model_reply", "tool_call", "tool_result"} <= set(kinds)


@pytest.mark.parametrize("budget", [3, 4])
def test_react_step_budget_truncates_without_dangling_calls(
    react_cluster: tuple[Cluster, OpenAIServer, WorkerGroup], budget: int
) -> None:
    cluster, actor, _ = react_cluster
    goal = f"react NEVER_DONE budget {budget}"
    handle = cluster.submit(goal=goal, reasoner="react", max_rounds=budget)
    result = handle.result(timeout=RESULT_SECONDS)

    assert result.status == "truncated", result
    assert result.deliverable.startswith(NEEDS_MORE_STEPS)
    assert f"({budget} steps)" in (result.error or "")
    assert len(requests_of(actor, goal)) == 2 and result.rounds == 2
    memory = cluster.store.memory(handle.id).get_messages()
    assert [(m.round, m.role) for m in memory] == [(0, "actor"), (0, "tool"), (1, "actor")]
    assert not memory[-1].tool_calls
    assert len([c for c in cluster.tool_calls() if c["job"] == handle.id]) == 1


def test_react_return_direct_tool_ends_the_job(
    react_cluster: tuple[Cluster, OpenAIServer, WorkerGroup],
) -> None:
    cluster, _, _ = react_cluster
    plan = [[{"name": "finish", "args": {"answer": "42"}}]]
    result = cluster.submit(goal=goal_with_plan("react direct", plan), reasoner="react", max_rounds=2).result(
        timeout=60
    )
    assert (result.status, result.deliverable, result.rounds) == ("completed", "FINAL: 42", 1)


def test_react_job_cancel_stops_it_at_its_next_step(
    react_cluster: tuple[Cluster, OpenAIServer, WorkerGroup],
) -> None:
    cluster, _, _ = react_cluster
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1}}]] * 8
    handle = cluster.submit(goal=goal_with_plan("react slow", plan), reasoner="react", max_rounds=30)
    deadline = time.monotonic() + 30
    while not [c for c in cluster.tool_calls() if c["job"] == handle.id] and time.monotonic() < deadline:
        time.sleep(0.05)
    handle.cancel()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "cancelled"
    assert result.rounds <= 2
    assert cluster.app.AsyncResult(handle.id).get(timeout=10)["status"] == "cancelled"


def test_sigkill_of_the_actor_during_a_react_model_step_is_recovered(
    react_cluster: tuple[Cluster, OpenAIServer, WorkerGroup],
) -> None:
    cluster, actor, workers = react_cluster
    goal_text = "react two rounds"

    def slow_second_step(request: RecordedRequest) -> Reply:
        reply = react_host(request)
        mine = goal_text in str(request["messages"][1]["content"])
        steps = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if mine and steps == 1 and len(requests_of(actor, goal_text)) == 2:
            reply.delay = 4.0  # the first try of round 1's model step: the worker dies meanwhile
        return reply

    actor.set_script(slow_second_step)
    try:
        plan = [[{"name": "add", "args": {"a": 1, "b": 1}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
        handle = cluster.submit(goal=goal_with_plan(goal_text, plan), reasoner="react", max_rounds=9)

        deadline = time.monotonic() + 30
        while len(requests_of(actor, goal_text)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(requests_of(actor, goal_text)) == 2, "the model step of round 1 never started"
        cluster.kill(workers, "actor")
        cluster.start("actor")  # the replacement takes the step over when its lease runs out

        result = handle.result(timeout=RESULT_SECONDS)
    finally:
        actor.set_script(react_host)
    assert result.status == "completed", result
    assert result.deliverable == "done after 2 steps: 2 | 4"
    runs = [c for c in cluster.tool_calls() if c["job"] == handle.id]
    assert sorted((c["round"], c["index"]) for c in runs) == [(0, 1), (1, 1)], "a tool ran twice"
    keys = [(m.round, m.role) for m in cluster.store.memory(handle.id).get_messages()]
    assert keys == [(0, "actor"), (0, "tool"), (1, "actor"), (1, "tool"), (2, "actor")]
    assert len(requests_of(actor, goal_text)) == 4  # round 1 was asked twice: once by the killed worker
