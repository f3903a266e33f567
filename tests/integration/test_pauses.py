"""Decisions bound to their pause, on real workers (issue 25, "a late decision lands on a
different call").

The mono jobs here follow a plan of one ``notify`` call per round (``requires_approval``): round 0
notifies ann, round 1 notifies eve. Each round is a pause of its own, with its own id; a decision
for the first must never reach the second, and a decision queued while no worker runs must never
win over what the person decided since.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tandem.client.handle import JobHandle
from tandem.tasks.errors import DecisionTimeout, StalePauseError
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_decide import any_host, idle, settled
from tests.integration.test_durability import runs, wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
ANN_THEN_EVE = [[{"name": "notify", "args": {"to": "ann"}}], [{"name": "notify", "args": {"to": "eve"}}]]
FAST = {"TANDEM_STALL_SECONDS": "1", "TANDEM_LEASE_SECONDS": "2"}


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, **FAST)
    hosts = next(clusters)
    hosts[2].set_script(any_host)
    hosts[0].start("thinker", "actor", "tools", name="first")
    yield hosts
    next(clusters, None)


def submit(cluster: Cluster, plan: Any, **spec: Any) -> JobHandle:
    goal = goal_with_plan("pauses", plan)
    return cluster.submit(goal=goal, reasoner="mono", max_rounds=4, **spec)


def paused(handle: JobHandle, seq: int, timeout: float = 60) -> str:
    """Wait for the job's pause number ``seq``; its id."""
    wait_for(
        lambda: (
            handle.status().state == "awaiting_approval"
            and (handle.status().pause_id or "").endswith(f":{seq}")
        ),
        timeout,
        f"pause {seq} of {handle.id}",
    )
    pause = handle.status().pause_id
    assert pause is not None
    return pause


def test_a_late_approve_of_the_first_pause_never_reaches_the_second(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, ANN_THEN_EVE, approval_timeout_s=4)
    first = paused(handle, 1)
    pending = handle.pending_approval()
    assert pending is not None and pending.pause_id == first and pending.pending[0].args == {"to": "ann"}
    # The person looks at pause 1 (call 1: ann) and is slow: its timeout rejects it, the job pauses again.
    second = paused(handle, 2, timeout=30)
    assert second != first and second.startswith(f"{handle.id}:1:tools:")
    now = handle.pending_approval()
    assert now is not None and now.pending[0].args == {"to": "eve"} and now.pending[0].index == 1
    with pytest.raises(StalePauseError) as late:
        handle.approve(1, pause_id=first)  # the late approve(call=1) of pause 1
    assert late.value.current_pause == second and late.value.pause_id == first
    assert handle.pending_approval().decisions == []  # type: ignore[union-attr]
    result = handle.result(timeout=RESULT_SECONDS)  # pause 2 times out too
    assert result.status == "completed", result
    assert runs(c, handle.id, "notify") == []  # neither ann's nor eve's mail was sent
    asked = [e.data for e in handle.events() if e.type == "approval_requested"]
    assert [(a["pause_id"], a["round"]) for a in asked] == [(first, 0), (second, 1)]
    decided = [e.data for e in handle.events() if e.type == "approval_decided"]
    assert [(d["pause_id"], d["by"]) for d in decided] == [(first, "timeout"), (second, "timeout")]


def test_decisions_queued_while_no_worker_runs_never_win(cluster: Hosts) -> None:
    """Job A: the approve times out on the client (no worker) and is withdrawn; the person then
    rejects. Job B: a bare Celery client's approve waits in the queue until B's pause has ended.
    Once workers start, neither queued approve applies."""
    c, _, _ = cluster
    a = submit(c, ANN_THEN_EVE[:1], approval_timeout_s=600)
    b = submit(c, ANN_THEN_EVE[:1], approval_timeout_s=4)
    pause_a, pause_b = paused(a, 1), paused(b, 1)
    wait_for(lambda: settled(c), EVENT_SECONDS, "the park's messages acknowledged, no task running")
    first = c.groups[0]
    for role in ("thinker", "actor", "tools"):
        c.kill(first, role)

    started = time.monotonic()
    with pytest.raises(DecisionTimeout, match="withdrawn: it will never apply"):
        a.approve(1, timeout=2)  # no bare Celery TimeoutError
    assert time.monotonic() - started < 10
    bare = Celery(broker=c.url, backend=c.url)
    try:
        queued_b = bare.send_task(
            "tandem.decide",
            kwargs={"job_id": b.id, "pause_id": pause_b, "decisions": [{"index": 1, "approve": True}]},
        )
        wait_for(lambda: time.time() > (b.status().approval_until or 0) + 0.5, 30, "pause b's deadline")
        c.start("thinker", "actor", "tools", name="second")
        answer_b = queued_b.get(timeout=RESULT_SECONDS)
    finally:
        bare.close()
    assert answer_b["accepted"] is False and answer_b["reason"] == "stale_pause", answer_b
    # Either the reconciler's timeout came first, or the late decision itself made it apply.
    assert any(
        t in answer_b["error"] for t in ("decided already (by timeout)", "after the 4 s approval timeout")
    )
    wait_for(lambda: idle(c)[0] == 0, EVENT_SECONDS, "the queues to drain")  # A's queued approve was consumed
    record_a = a.pending_approval()
    assert record_a is not None and record_a.pause_id == pause_a and record_a.decisions == []
    decided = a.reject("not ann", pause_id=pause_a)
    assert [(d.index, d.approve) for d in decided] == [(1, False)]
    assert a.result(timeout=RESULT_SECONDS).status == "completed"
    assert b.result(timeout=RESULT_SECONDS).status == "completed"
    assert runs(c, a.id, "notify") == [] and runs(c, b.id, "notify") == []
