"""Breaking tests of child jobs, written from docs/children.md alone (issue 35): a spawn run again
after its tools worker was SIGKILLed mid-spawn while its children still run, children outliving a
cancelled parent, and a job of another tenant that names (or takes the id of) a tenant's child.

Real ``celery worker`` processes on the real Redis. The children block on a gate key the test
opens (``tests.integration.children_tools.GATE``), never on a sleep.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import NoPermissionError

from tandem.client.handle import JobHandle
from tandem.client.submission import submit
from tandem.tasks.control.children import child_id
from tests.integration import acl_client
from tests.integration.children_tools import GATE
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_children import children_in_store, parent_tasks, spawned_children
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
FAST = {"TANDEM_STALL_SECONDS": "1", "TANDEM_LEASE_SECONDS": "2"}
GATED = goal_with_plan("read a document", [[{"name": "wait_for_gate", "args": {}}]])
"""A child that holds a tools thread until the gate opens, then delivers."""
GATED_THEN_MORE = goal_with_plan(
    "read two documents",
    [[{"name": "wait_for_gate", "args": {}}], [{"name": "sleep_tool", "args": {"seconds": 0.1}}]],
)
"""A child with a round after the gate: a child the cancel did not stop would run it and complete."""


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, TANDEM_TOOLKIT="tests.integration.children_tools:toolkit", **FAST)
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 6})
    yield hosts
    next(clusters, None)


def parent(c: Cluster, tool: str, owner: str = "team-a", **args: Any) -> JobHandle:
    plan = [[{"name": tool, "args": args}]]
    return c.submit(goal=goal_with_plan("fan out", plan), reasoner="mono", max_rounds=4, owner=owner)


def events(c: Cluster, job_id: str, kind: str) -> list[Any]:
    return [e for e in c.store.read_events(job_id) if e.type == kind]


def index(c: Cluster, job_id: str) -> list[str]:
    """The parent's children index, ``tandem:{<id>}:children`` (docs/children.md, Keys)."""
    return sorted(x.decode() for x in c.redis.zrange(c.store.key(job_id, "children"), 0, -1))


def test_a_spawn_replayed_after_a_sigkill_mid_spawn_creates_each_running_child_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.calls.delete(GATE)  # the children run, holding their tools threads, through the kill and the replay
    doomed = c.start("tools", name="doomed-break")
    handle = parent(c, "fan_out_held", goals=[GATED, GATED, GATED])

    def held() -> list[dict[str, Any]]:
        return [x for x in c.tool_calls() if x["name"] == "fan_out_held_holding" and x["job"] == handle.id]

    [holding] = wait_for(held, EVENT_SECONDS, "the spawning call to hold its worker after the spawn")
    before = index(c, handle.id)
    assert len(before) == 3 and children_in_store(c, handle.id) == before
    group = next(g for g in c.groups if "tools" in g.processes and g.processes["tools"].pid == holding["pid"])
    c.kill(group, "tools")
    if group is not doomed:
        c.start("tools", name="replacement-break", concurrency={"tools": 6})
    wait_for(lambda: handle.status().state == "waiting_for_children", EVENT_SECONDS, "the replay to park")
    runs = [x for x in c.tool_calls() if x["name"] == "fan_out_held_run" and x["job"] == handle.id]
    assert len(runs) >= 2  # the killed run and its replay both ran the spawn
    assert index(c, handle.id) == before  # the replay created no new child
    assert children_in_store(c, handle.id) == before
    c.calls.set(GATE, "1", ex=600)

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert sorted(result.children) == before and len(result.children) == 3
    assert index(c, handle.id) == before
    assert children_in_store(c, handle.id) == before
    spawned = events(c, handle.id, "children_spawned")
    assert spawned and all(sorted(e.children) == before for e in spawned)
    assert sorted({e.child_id for e in events(c, handle.id, "child_ended")}) == before
    for cid in before:
        ended = c.store.result(cid)
        assert ended is not None and ended.status == "completed", (cid, ended)
        assert len(events(c, cid, "job_started")) == 1, cid  # each child's intake ran it once
        assert len(events(c, cid, "final")) == 1, cid
        gate_runs = [x for x in c.tool_calls() if x["name"] == "wait_for_gate" and x["job"] == cid]
        assert len(gate_runs) == 1, (cid, gate_runs)  # no second copy of the child ran its work


def test_every_child_of_a_cancelled_parent_ends_cancelled_and_none_keeps_running(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.calls.delete(GATE)
    handle = parent(c, "fan_out", goals=[GATED_THEN_MORE] * 3, max_rounds=4)
    wait_for(lambda: handle.status().state == "waiting_for_children", EVENT_SECONDS, "the parent to park")
    children = spawned_children(c, handle.id)  # (the event comes just after the park)
    assert len(children) == 3

    def in_gate() -> bool:  # every child's tool call holds a tools thread on the closed gate
        return all(any(e.name == "wait_for_gate" for e in events(c, x, "tool_call")) for x in children)

    wait_for(in_gate, EVENT_SECONDS, "every child to block on the gate")
    handle.cancel()
    try:
        assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"
    finally:
        c.calls.set(GATE, "1", ex=600)  # the calls under way return; a child the cancel missed goes on
    wait_for(
        lambda: all(c.store.result(x) is not None for x in children), EVENT_SECONDS, "the children to end"
    )
    assert {x: c.store.result(x).status for x in children} == dict.fromkeys(children, "cancelled")  # type: ignore[union-attr]
    assert [c.store.status(x).state for x in children] == ["cancelled"] * 3  # type: ignore[union-attr]
    for x in children:  # the round after the gate never ran
        assert not any(e.name == "sleep_tool" for e in events(c, x, "tool_call")), x
    wait_for(
        lambda: all(parent_tasks(c, x) == [] for x in [*children, handle.id]),
        EVENT_SECONDS,
        "no worker to run a task of the parent or its children",
    )
    assert index(c, handle.id) == sorted(children)


def test_a_job_of_another_tenant_naming_the_parent_does_not_reach_it(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.calls.delete(GATE)
    a = parent(c, "fan_out", goals=[GATED])
    wait_for(lambda: a.status().state == "waiting_for_children", EVENT_SECONDS, "A's job to park")
    own = index(c, a.id)
    assert len(own) == 1
    intruder = c.submit(
        goal=goal_with_plan("join", [[{"name": "sleep_tool", "args": {"seconds": 0.1}}]]),
        reasoner="mono",
        owner="team-b",
        parent_id=a.id,
    )
    assert intruder.result(timeout=RESULT_SECONDS).status == "completed"
    assert index(c, a.id) == own
    assert [e.child_id for e in events(c, a.id, "child_ended")] == []
    assert a.status().state == "waiting_for_children"
    c.calls.set(GATE, "1", ex=600)
    result = a.result(timeout=RESULT_SECONDS)
    assert result.status == "completed" and result.children == own
    assert sorted(e.child_id for e in events(c, a.id, "child_ended")) == own
    [tool_result] = events(c, a.id, "tool_result")
    assert [o["job_id"] for o in json.loads(tool_result.output)] == own


def test_another_tenants_job_under_a_childs_derived_id_does_not_become_the_child(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.calls.delete(GATE)
    a_id = str(uuid.uuid4())
    # Tenant B knows A's job id (an id is no secret) and the documented derivation: it submits
    # first under the ids the spawn may use (round 0 or 1, call 0 or 1, spawn 1, child 1).
    squatted = [child_id(a_id, r, k, 1, 1) for r in (0, 1) for k in (0, 1)]
    intruders = [_submit_as(c, x, a_id) for x in squatted]
    for h in intruders:
        assert h.result(timeout=RESULT_SECONDS).status == "completed"
    plan = [[{"name": "fan_out", "args": {"goals": [GATED]}}]]
    spec = {"goal": goal_with_plan("fan out", plan), "reasoner": "mono", "max_rounds": 4, "owner": "team-a"}
    a = submit(spec, app=c.app, store=c.store, job_id=a_id)
    wait_for(lambda: events(c, a.id, "tool_call"), EVENT_SECONDS, "A's spawning call to run")
    c.calls.set(GATE, "1", ex=600)
    result = a.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    [call] = [e for e in events(c, a.id, "tool_call") if e.name == "fan_out"][:1]
    assert child_id(a.id, call.round, call.index, 1, 1) in squatted  # B took the id the spawn derives
    # B's job is not A's child: not in A's index, its children, its child_ended, its outcomes.
    assert not set(result.children) & set(squatted), result.children
    assert not set(index(c, a.id)) & set(squatted)
    assert not [e for e in events(c, a.id, "child_ended") if e.child_id in squatted]
    [tool_result] = events(c, a.id, "tool_result")
    if tool_result.status == "succeeded":  # the spawn may refuse the taken id, or start others
        assert not {o["job_id"] for o in json.loads(tool_result.output)} & set(squatted)
    for cid in result.children:
        child = c.store.spec(cid)
        assert child is not None and child.owner == "team-a" and child.parent_id == a.id
    for h in intruders:  # and A's end cancelled none of B's jobs
        assert c.store.result(h.id).status == "completed"  # type: ignore[union-attr]


def _submit_as(c: Cluster, job_id: str, parent_id: str) -> JobHandle:
    """Tenant B's job under ``job_id``, naming ``parent_id`` (a broker client picks its job's id)."""
    spec = {
        "goal": goal_with_plan("squat", []),
        "reasoner": "mono",
        "owner": "team-b",
        "parent_id": parent_id,
    }
    return submit(spec, app=c.app, store=c.store, job_id=job_id)


def test_another_tenants_client_listing_its_job_as_a_child_does_not_reach_the_parent(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.calls.delete(GATE)
    a = parent(c, "fan_out", goals=[GATED])
    wait_for(lambda: a.status().state == "waiting_for_children", EVENT_SECONDS, "A's job to park")
    own = index(c, a.id)
    b_id = str(uuid.uuid4())
    with acl_client.client_user(c) as client, contextlib.suppress(NoPermissionError):
        client.zadd(c.store.key(a.id, "children"), {b_id: time.time()})  # as B's broker client
        client.expire(c.store.key(a.id, "children"), 3600)
    try:
        gated = {"goal": GATED, "reasoner": "mono", "owner": "team-b", "parent_id": a.id}
        b = submit(gated, app=c.app, store=c.store, job_id=b_id)
        wait_for(lambda: events(c, b_id, "tool_call"), EVENT_SECONDS, "B's job to block on the gate")
        a.cancel()
        result = a.result(timeout=RESULT_SECONDS)
        assert result.status == "cancelled"
    finally:
        c.calls.set(GATE, "1", ex=600)
    assert b.result(timeout=RESULT_SECONDS).status == "completed"  # A's cancel did not reach it
    assert [e.child_id for e in events(c, a.id, "child_ended") if e.child_id == b_id] == []
    assert result.children == own  # A's result lists only the children A started
    wait_for(lambda: c.store.result(own[0]) is not None, EVENT_SECONDS, "A's own child to end")
    assert c.store.result(own[0]).status == "cancelled"  # type: ignore[union-attr]  # the cascade ran


def test_the_client_user_cannot_write_a_jobs_children_index(cluster: Hosts) -> None:
    c, _, _ = cluster
    a = parent(c, "fan_out", goals=[goal_with_plan("quick", [])])
    key = c.store.key(a.id, "children")
    assert a.result(timeout=RESULT_SECONDS).status == "completed"
    own = index(c, a.id)
    with acl_client.client_user(c) as client, pytest.raises(NoPermissionError):
        try:
            client.zadd(key, {str(uuid.uuid4()): time.time()})
        finally:
            c.redis.expire(key, 3600)
    assert index(c, a.id) == own
