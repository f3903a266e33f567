"""Tool approval on real workers: a job parks in ``awaiting_approval`` holding no worker and no
queued task, and a decision (by task name from a bare Celery client, ``JobHandle``, or
``tandem approve``) lets it go on. Dual, mono and react jobs.

The plan of every job's first round calls ``add`` (needs no approval: it runs at once) and
``notify`` (``requires_approval``: held). The SIGKILL test comes last: it replaces workers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tandem.client.handle import JobHandle
from tandem.tasks.errors import DecisionRefused
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_durability import runs, wait_for
from tests.integration.test_react_job import react_host
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
PLAN = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
FAST = {"TANDEM_STALL_SECONDS": "2", "TANDEM_LEASE_SECONDS": "2"}


def any_host(request: RecordedRequest) -> Reply:
    """React jobs call tools natively (the request carries ``tools``); dual and mono in prompt mode."""
    return react_host(request) if request.get("tools") else actor_host(request)


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, **FAST)
    hosts = next(clusters)
    hosts[2].set_script(any_host)
    hosts[0].start("thinker", "actor", "tools")
    yield hosts
    next(clusters, None)


def submit(cluster: Cluster, reasoner: str = "mono", plan: Any = PLAN, **spec: Any) -> JobHandle:
    goal = goal_with_plan(f"approval {reasoner}", plan)
    return cluster.submit(goal=goal, reasoner=reasoner, max_rounds=4, **spec)


def parked(cluster: Cluster, handle: JobHandle, free: tuple[int, ...] = (1,)) -> None:
    """Wait until the job awaits approval and its free calls have reported."""
    wait_for(
        lambda: handle.status().state == "awaiting_approval"
        and all(cluster.store.tool_result(handle.id, 0, i) for i in free),
        EVENT_SECONDS,
        "the job to park",
    )


def idle(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    """The messages in the broker's queues (kombu's lists and its unacked hash), and what every
    worker is running."""
    names = [k.decode() for k in cluster.redis.scan_iter() if cluster.redis.type(k) == b"list"]
    queued = sum(cluster.redis.llen(k) for k in names if not k.startswith(("tandem", "test:")))
    queued += cluster.redis.hlen("unacked")
    return queued, cluster.app.control.inspect(timeout=3).active() or {}


def settled(cluster: Cluster) -> bool:
    """Nothing queued, every worker answering and running nothing."""
    queued, active = idle(cluster)
    return queued == 0 and bool(active) and not any(active.values())


def bare_client(cluster: Cluster) -> Celery:
    return Celery(broker=cluster.url, backend=cluster.url)  # knows task names, nothing else


def seen_by_model(server: OpenAIServer, text: str) -> bool:
    return any(text in str(r["messages"]) for r in server.requests)


@pytest.mark.parametrize("reasoner", ["dual", "mono", "react"])
def test_a_job_parks_holding_nothing_and_a_decision_by_name_resumes_it(cluster: Hosts, reasoner: str) -> None:
    c, _, actor = cluster
    handle = submit(c, reasoner)
    parked(c, handle)
    status = handle.status()
    waiting = [(p.index, p.tool, p.args) for p in status.pending_approval or []]
    assert waiting == [(2, "notify", {"to": "ops"})]
    assert status.approval_until is not None and status.step == "tools"
    # The free call's task is acknowledged and nothing runs: waited for (a loaded machine is slow
    # to acknowledge), then held for a stall period below.
    wait_for(lambda: settled(c), EVENT_SECONDS, "nothing queued and no task running")
    time.sleep(3.0)  # past TANDEM_STALL_SECONDS: the reconciler sends nothing for a parked job
    assert idle(c)[0] == 0 and handle.status().state == "awaiting_approval"
    assert runs(c, handle.id, "notify") == []

    bare = bare_client(c)
    try:
        refused = bare.send_task(
            "tandem.decide", kwargs={"job_id": handle.id, "decisions": [{"index": 1, "approve": True}]}
        ).get(timeout=RESULT_SECONDS)
        assert refused["accepted"] is False and "no call 1 is waiting" in refused["error"]
        accepted = bare.send_task(
            "tandem.decide", kwargs={"job_id": handle.id, "decisions": [{"index": 2, "approve": True}]}
        ).get(timeout=RESULT_SECONDS)
        assert accepted["accepted"] is True and accepted["complete"] is True
    finally:
        bare.close()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert len(runs(c, handle.id, "notify")) == 1 and len(runs(c, handle.id, "add")) == 1
    assert seen_by_model(actor, "notified ops")
    kinds = [e.type for e in handle.events()]
    assert kinds.count("approval_requested") == 1 and kinds.count("approval_decided") == 1


def test_a_rejection_reaches_the_model_with_its_reason(cluster: Hosts) -> None:
    c, thinker, actor = cluster
    handle = submit(c, "dual")
    parked(c, handle)
    done = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "approve", handle.id, "--reject", "not on a weekend"],
        env={**os.environ, **c.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "call 2: rejected: not on a weekend" in done.stdout and "the job goes on" in done.stdout
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert runs(c, handle.id, "notify") == []
    rejected = c.store.tool_result(handle.id, 0, 2)
    assert rejected is not None and rejected.status == "failed"
    for model in (actor, thinker):  # both roles read the FAILED result with the reason
        assert seen_by_model(model, "Reason: not on a weekend")
    again = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "approve", handle.id],
        env={**os.environ, **c.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2 and "not waiting for a decision" in again.stderr


def test_edited_args_are_validated_and_used(cluster: Hosts) -> None:
    c, _, actor = cluster
    handle = submit(c, "mono")
    parked(c, handle)
    with pytest.raises(DecisionRefused, match=r"edited args of call 2 \('notify'\)"):
        handle.approve(2, args={"recipient": "ops"})
    assert handle.status().state == "awaiting_approval"
    decided = handle.approve(2, args={"to": "ops-oncall"})
    assert [(d.index, d.args) for d in decided] == [(2, {"to": "ops-oncall"})]
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    ran = c.store.tool_result(handle.id, 0, 2)
    assert ran is not None and ran.status == "succeeded" and "notified ops-oncall" in str(ran.output)
    assert seen_by_model(actor, "notified ops-oncall")


def test_the_async_controls_decide_and_fork_on_workers(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, "mono")
    parked(c, handle)

    async def decide_then_fork() -> tuple[Any, ...]:
        pending = await handle.apending_approval()
        decided = await handle.aapprove(2, args={"to": "async-ops"})
        result = await handle.aresult(timeout=RESULT_SECONDS)
        forked = await handle.afork(1, max_rounds=4)
        return pending, decided, result, forked

    pending, decided, result, forked = asyncio.run(decide_then_fork())
    assert pending is not None and [p.index for p in pending.undecided()] == [2]
    assert [(d.index, d.args) for d in decided] == [(2, {"to": "async-ops"})]
    assert result.status == "completed"
    ran = c.store.tool_result(handle.id, 0, 2)
    assert ran is not None and "notified async-ops" in str(ran.output)
    assert forked.id != handle.id and forked.result(timeout=RESULT_SECONDS).status == "completed"


def test_no_decision_in_time_rejects_and_the_job_goes_on(cluster: Hosts) -> None:
    c, _, actor = cluster
    # approve_tools holds "add" too: no call runs before the decision (or the timeout).
    handle = submit(c, "mono", approve_tools=["add"], approval_timeout_s=3)
    parked(c, handle, free=())
    assert [p.index for p in handle.status().pending_approval or []] == [1, 2]
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert runs(c, handle.id, "add") == [] and runs(c, handle.id, "notify") == []
    assert seen_by_model(actor, "no decision within 3 s")
    decided = [e for e in handle.events() if e.type == "approval_decided"]
    assert [e.data["by"] for e in decided] == ["timeout"]


def test_two_racing_decisions_the_first_wins(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, "mono")
    parked(c, handle)
    bare = bare_client(c)
    replies: list[dict[str, Any]] = []
    start = threading.Barrier(2)

    def decide(approve: bool) -> None:
        start.wait()
        decision = {"index": 2, "approve": approve, "reason": "raced"}
        sent = bare.send_task("tandem.decide", kwargs={"job_id": handle.id, "decisions": [decision]})
        replies.append({"approve": approve, **sent.get(timeout=RESULT_SECONDS)})

    try:
        threads = [threading.Thread(target=decide, args=(a,)) for a in (True, False)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        bare.close()
    [winner] = [r for r in replies if r["accepted"]]
    [loser] = [r for r in replies if not r["accepted"]]
    # Refused either way, changing nothing: while the pause lasts the call is decided already; a
    # loser read after the winner completed the pause finds the job no longer waiting.
    assert "decided already" in loser["error"] or "is not waiting for a decision" in loser["error"]
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert len(runs(c, handle.id, "notify")) == (1 if winner["approve"] else 0)


def test_a_worker_killed_while_the_job_waits_changes_nothing(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, "mono")
    parked(c, handle)
    before = c.store.machine.record(handle.id)
    group = c.groups[0]
    c.kill(group, "tools")
    c.kill(group, "actor")
    time.sleep(6.0)  # three stall periods: the remaining worker's reconciler looks at the job
    after = c.store.machine.record(handle.id)
    same = ("state", "round", "kind", "held", "pending", "epoch", "deadline", "expiries")
    assert {k: after[k] for k in same} == {k: before[k] for k in same}
    assert idle(c)[0] == 0 and runs(c, handle.id, "notify") == []
    c.start("actor", "tools", name="replacement")
    handle.approve()
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert len(runs(c, handle.id, "notify")) == 1
