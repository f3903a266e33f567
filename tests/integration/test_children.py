"""Child jobs on real workers: a tool spawns child jobs, the parent waits holding no worker
(``waiting_for_children``), and resumes with the children's outcomes; a cancelled parent's children
end cancelled; a tool call run again after its worker was SIGKILLed mid-spawn creates no child twice.

The mono jobs follow a plan (``tests.integration.plan_model``): the parent's round 0 calls a
spawning tool of ``tests.integration.children_tools``, round 1 delivers; each child's plan sleeps
on the tools queue a while, then delivers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tests.integration.children_tools import GATE
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_decide import idle
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
FAST = {"TANDEM_STALL_SECONDS": "1", "TANDEM_LEASE_SECONDS": "2", "TANDEM_SPAWN_TENANTS": "team-a"}
CHILD = goal_with_plan("read a document", [[{"name": "sleep_tool", "args": {"seconds": 0.2}}]])
GATED = goal_with_plan("read a document", [[{"name": "wait_for_gate", "args": {}}]])
ENDLESS = "keep reading"


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, TANDEM_TOOLKIT="tests.integration.children_tools:toolkit", **FAST)
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 4})
    yield hosts
    next(clusters, None)


def submit(cluster: Cluster, tool: str, **args: Any) -> JobHandle:
    plan = [[{"name": tool, "args": args}]]
    return cluster.submit(goal=goal_with_plan("fan out", plan), reasoner="mono", max_rounds=4)


def children_in_store(cluster: Cluster, parent: str) -> list[str]:
    """Every job of the store whose spec names ``parent`` as its parent (or whose queued intake does).

    SCAN is no snapshot: a child a worker takes while the scan runs swaps its ``:intake`` key for
    its ``:spec`` key (one script), and the scan may see neither. So the store is scanned until two
    scans agree."""
    last: list[str] | None = None
    for _ in range(20):
        found = _children_scanned(cluster, parent)
        if found == last:
            break
        last = found
        time.sleep(0.05)
    return found


def _children_scanned(cluster: Cluster, parent: str) -> list[str]:
    found = set()
    for key in cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:*"):
        name = key.decode()
        if name.endswith((":spec", ":intake")):
            raw = cluster.redis.get(key)
            if raw and json.loads(raw).get("parent_id") == parent:
                found.add(name.split("{", 1)[1].split("}", 1)[0])
    return sorted(found)


def spawned_children(cluster: Cluster, job_id: str) -> list[str]:
    """The children the job's ``children_spawned`` events name, in order, once it has one: the
    event is published just after the park that sets ``waiting_for_children`` (``[]`` after 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        spawned = [e for e in cluster.store.read_events(job_id) if e.type == "children_spawned"]
        if spawned or time.monotonic() > deadline:
            return [str(x) for e in spawned for x in getattr(e, "children", [])]
        time.sleep(0.05)


def parent_tasks(cluster: Cluster, job_id: str) -> list[dict[str, Any]]:
    """The tasks any worker runs now for ``job_id`` (its steps' first argument is the job id)."""
    _, active = idle(cluster)
    return [t for tasks in active.values() for t in tasks if job_id in json.dumps(t.get("args") or [])]


def test_a_parent_waits_holding_no_worker_and_resumes_with_its_childrens_deliverables(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.calls.delete(GATE)
    handle = submit(c, "fan_out", goals=[GATED, GATED, GATED])
    wait_for(lambda: handle.status().state == "waiting_for_children", EVENT_SECONDS, "the parent to park")
    assert handle.status().pause_kind == "children"
    try:  # the step that parked it returns: then no task of it runs while it stays parked
        wait_for(lambda: parent_tasks(c, handle.id) == [], EVENT_SECONDS, "the parking step to return")
        assert handle.status().state == "waiting_for_children"
        assert c.store.result(handle.id) is None
    finally:
        c.calls.set(GATE, "1", ex=600)
    children = spawned_children(c, handle.id)
    assert len(children) == 3

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.children == children
    for child in children:
        ended = c.store.result(child)
        spec = c.store.spec(child)
        assert ended is not None and ended.status == "completed" and ended.deliverable == "mono plan done"
        assert spec is not None and spec.parent_id == handle.id and spec.owner == result.owner
    ends = [e for e in c.store.read_events(handle.id) if e.type == "child_ended"]
    assert sorted(e.child_id for e in ends) == sorted(children)  # type: ignore[attr-defined]
    [tool_result] = [e for e in c.store.read_events(handle.id) if e.type == "tool_result"]
    outcomes = json.loads(tool_result.output)  # type: ignore[attr-defined]
    assert [(o["job_id"], o["status"], o["deliverable"]) for o in outcomes] == [
        (child, "completed", "mono plan done") for child in children
    ]
    assert children_in_store(c, handle.id) == sorted(children)


def test_the_model_spawns_through_spawn_jobs_for_a_tenant_the_operator_names(cluster: Hosts) -> None:
    c, _, _ = cluster
    plan = [
        [{"name": "spawn_jobs", "args": {"jobs": [{"goal": CHILD, "reasoner": "mono"}] * 2, "wait": "any"}}]
    ]
    goal = goal_with_plan("fan out", plan)
    handle = c.submit(goal=goal, reasoner="mono", max_rounds=4, owner="team-a")
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed" and len(result.children) == 2, result
    [tool_result] = [e for e in c.store.read_events(handle.id) if e.type == "tool_result"]
    outcomes = json.loads(tool_result.output)  # type: ignore[attr-defined]
    assert tool_result.status == "succeeded" and any(o["status"] == "completed" for o in outcomes)  # type: ignore[attr-defined]
    assert {o["job_id"] for o in outcomes} == set(result.children)
    # Another tenant's model is not offered the tool: its call is an unknown tool's failure.
    other = c.submit(goal=goal, reasoner="mono", max_rounds=4)
    assert other.result(timeout=RESULT_SECONDS).children == []
    [refused] = [e for e in c.store.read_events(other.id) if e.type == "tool_result"]
    assert refused.status == "failed"  # type: ignore[attr-defined]


def test_cancelling_a_parent_cancels_its_running_children(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, "fan_out", goals=[ENDLESS, ENDLESS, ENDLESS], max_rounds=400, endless=True)
    try:
        wait_for(lambda: handle.status().state == "waiting_for_children", EVENT_SECONDS, "the parent to park")
        children = spawned_children(c, handle.id)
        assert len(children) == 3, children
        wait_for(
            lambda: all(
                c.store.status(x) is not None and c.store.status(x).state == "running" for x in children
            ),  # type: ignore[union-attr]
            EVENT_SECONDS,
            "the children to run",
        )
    finally:  # endless children: never left running for the next test, whatever failed above
        handle.cancel()
    assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"
    wait_for(
        lambda: all(c.store.result(x) is not None for x in children), EVENT_SECONDS, "the children to end"
    )
    assert [c.store.result(x).status for x in children] == ["cancelled"] * 3  # type: ignore[union-attr]


def test_a_spawn_run_again_after_its_worker_was_killed_creates_no_child_twice(cluster: Hosts) -> None:
    c, _, _ = cluster
    tools = c.start("tools", name="doomed")  # a second tools worker, killed once it holds the call
    handle = submit(c, "fan_out_held", goals=[CHILD, CHILD])

    def holding() -> bool:
        return any(x["name"] == "fan_out_held_holding" and x["job"] == handle.id for x in c.tool_calls())

    wait_for(holding, EVENT_SECONDS, "the spawning call to hold its worker")
    [held] = [x for x in c.tool_calls() if x["name"] == "fan_out_held_holding" and x["job"] == handle.id]
    created = children_in_store(c, handle.id)
    assert len(created) == 2
    group = tools if held["pid"] == tools.processes["tools"].pid else None
    if group is None:  # the call ran on the module's tools worker: kill that one instead
        group = next(
            g for g in c.groups if g.processes.get("tools") and g.processes["tools"].pid == held["pid"]
        )
    c.kill(group, "tools")
    if group is not tools:
        c.start("tools", name="replacement")

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    runs = [x for x in c.tool_calls() if x["name"] == "fan_out_held_run" and x["job"] == handle.id]
    assert len(runs) >= 3  # the killed run, the run again (which parks), the resumed run
    assert children_in_store(c, handle.id) == created  # no child created twice
    assert sorted(result.children) == created


def test_a_parents_usage_and_budget_hold_its_childrens_spend(cluster: Hosts) -> None:
    """docs/children.md, "a child's spend is its parent's": the parent's final usage is its own
    model calls' plus its ended children's, and its budget check counts them."""
    c, _, _ = cluster
    handle = submit(c, "fan_out", goals=[CHILD, CHILD])
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    ended = [c.store.result(x) for x in result.children]
    assert len(ended) == 2 and all(r is not None and r.status == "completed" for r in ended), ended
    by_children = sum(r.usage.total_tokens for r in ended if r is not None)
    own = sum(m.usage.total_tokens for m in c.store.memory(handle.id).get_messages() if m.role != "tool")
    assert by_children > 0 and own > 0
    assert result.usage.total_tokens == own + by_children
    assert result.usage.calls == sum(r.usage.calls for r in ended if r is not None) + sum(
        m.usage.calls for m in c.store.memory(handle.id).get_messages() if m.role != "tool"
    )
    # A budget the parent's own first call fits in, but not with its children's spend: it stops
    # at its next model call, and the reason names the children's part.
    plan = [[{"name": "fan_out", "args": {"goals": [CHILD, CHILD]}}]]
    capped = c.submit(
        goal=goal_with_plan("fan out", plan), reasoner="mono", max_rounds=4, max_tokens_total=own + 1
    )
    stopped = capped.result(timeout=RESULT_SECONDS)
    assert stopped.status == "truncated", stopped
    assert "by its child jobs" in (stopped.error or ""), stopped.error
