"""The asyncio client against real workers: ``submit_async``, ``aevents``, ``aresult``,
``acancel``; ``astatus`` and ``aresult`` of a job parked for approval."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.client.submission import submit_async
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


async def _submit(cluster: Cluster, **spec: Any) -> JobHandle:
    return await submit_async(spec, app=cluster.app, store=cluster.store)


def test_aevents_yields_the_same_events_as_events(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [[{"name": "add", "args": {"a": 2, "b": 3}}, {"name": "sleep_tool", "args": {"seconds": 0.2}}]]

    async def follow() -> tuple[JobHandle, list[dict[str, Any]], Any]:
        handle = await _submit(cluster, goal=goal_with_plan("add and sleep", plan), max_rounds=5)
        live = [event async for event in handle.aevents(timeout=60)]  # followed while it runs
        return handle, live, await handle.aresult(timeout=RESULT_SECONDS)

    handle, live, result = asyncio.run(follow())
    assert result.status == "completed", result
    assert result == handle.result(timeout=5)
    replayed = list(handle.events(timeout=10))
    assert live == replayed
    kinds = [e["type"] for e in live]
    assert kinds[0] == "job_started" and kinds[-1] == "final"
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2
    assert live[-1]["data"]["status"] == "completed"


def test_many_jobs_followed_from_one_loop(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [[{"name": "add", "args": {"a": 1, "b": 1}}]]

    async def run_all() -> list[Any]:
        handles = await asyncio.gather(
            *(
                _submit(cluster, goal=goal_with_plan(f"job {i}", plan), reasoner="mono", max_rounds=4)
                for i in range(6)
            )
        )
        assert len({h.id for h in handles}) == 6
        return list(await asyncio.gather(*(h.aresult(timeout=RESULT_SECONDS) for h in handles)))

    results = asyncio.run(run_all())
    assert [r.status for r in results] == ["completed"] * 6


def test_acancel_stops_a_running_job(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1}}]] * 5

    async def cancel_it() -> Any:
        handle = await _submit(cluster, goal=goal_with_plan("slow NEVER_DONE", plan), max_rounds=20)
        async for event in handle.aevents(timeout=60):
            if event["type"] == "tool_call":
                break
        await handle.acancel()
        return await handle.aresult(timeout=RESULT_SECONDS)

    result = asyncio.run(cancel_it())
    assert result.status == "cancelled"


def test_astatus_shows_a_parked_job_and_aresult_waits_through_the_decision(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    plan = [[{"name": "notify", "args": {"to": "ops"}}, {"name": "add", "args": {"a": 1, "b": 2}}]]

    async def run() -> Any:
        goal = goal_with_plan("notify ops", plan)
        handle = await _submit(cluster, goal=goal, reasoner="mono", max_rounds=4, approve_tools=["add"])
        async for event in handle.aevents(timeout=60):
            if event.type == "approval_requested":
                break
        status = await handle.astatus()
        assert status.state == "awaiting_approval"
        assert [(p.index, p.tool) for p in status.pending_approval or []] == [(1, "notify"), (2, "add")]
        decisions = [{"index": 1, "approve": False, "reason": "not now"}, {"index": 2, "approve": True}]
        await asyncio.to_thread(handle.decide, decisions)
        return handle, await handle.aresult(timeout=RESULT_SECONDS)

    handle, result = asyncio.run(run())
    assert result.status == "completed", result
    assert [c["name"] for c in cluster.tool_calls() if c["job"] == handle.id] == ["add"]
    tool_message = cluster.store.memory(handle.id).get_message(0, "tool")
    assert tool_message is not None
    notify, add = tool_message.function_results
    assert notify.status == "failed" and "Reason: not now" in notify.output
    assert add.status == "succeeded"
