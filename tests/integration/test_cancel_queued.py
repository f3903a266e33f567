"""Cancelling a job that no worker has started yet."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration


def _intake_queued(cluster: Cluster) -> int:
    """Messages in the intake queue, over its priority lists (``celery``, ``celery\x06\x164``, ...)."""
    keys = cluster.redis.scan_iter("celery*")  # also the result backend's ``celery-task-meta-...``
    return sum(int(cluster.redis.llen(key)) for key in keys if cluster.redis.type(key) == b"list")


def test_cancel_before_any_worker_takes_the_job(
    fresh_cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    cluster, thinker, actor = fresh_cluster
    handle = cluster.submit(goal="never started")
    assert handle.status().state == "queued"
    handle.cancel()
    result = handle.result(timeout=10)
    assert (result.status, result.rounds) == ("cancelled", 0)
    assert cluster.app.AsyncResult(handle.id).get(timeout=10)["status"] == "cancelled"
    assert _intake_queued(cluster) == 1
    cluster.start("thinker")  # a worker arriving later (it never saw the revoke) must not run the job
    deadline = time.monotonic() + EVENT_SECONDS
    while _intake_queued(cluster):  # the worker takes the revoked message and drops it
        assert time.monotonic() < deadline, "the worker never took the cancelled job's intake message"
        time.sleep(0.1)
    assert handle.result(timeout=1).status == "cancelled"
    assert thinker.requests == [] and actor.requests == []


def _tool_called(cluster: Cluster, job_id: str, *, round_no: int, index: int) -> bool:
    events = cluster.store.read_events(job_id, count=1000)
    return any(
        e.type == "tool_call" and (e.data["round"], e.data["index"]) == (round_no, index) for e in events
    )


def test_a_cancel_during_a_tool_call_keeps_the_result_of_the_call_that_ran(
    fresh_cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    from tests.integration.plan_model import goal_with_plan

    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "actor", "tools", TANDEM_TOOL_TIMEOUT="30")
    plan = [[{"name": "sleep_tool", "args": {"seconds": 4}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]
    handle = cluster.submit(goal=goal_with_plan("cancel mid-call", plan), max_rounds=6)
    deadline = time.monotonic() + 60
    # The call is under way once its ``tool_call`` event is out: the worker writes it after its last
    # look at the cancel flag, right before the tool runs (a cancel between the claim and that look
    # rightly stores the call as "the job was cancelled", never run).
    while not _tool_called(cluster, handle.id, round_no=0, index=1):
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.05)
    handle.cancel()  # the reconciler sees it within a second (lease 2 s): the call runs 4 s
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "cancelled"
    ran = cluster.store.tool_result(handle.id, 0, 1)  # the side effect that happened is recorded
    assert ran is not None and ran.status.value == "succeeded" and ran.name == "sleep_tool", ran
    events = [e for e in cluster.store.read_events(handle.id, count=1000) if e.type == "tool_result"]
    assert [(e.data["round"], e.data["index"], e.data["status"]) for e in events] == [(0, 1, "succeeded")]
    assert [c["name"] for c in cluster.tool_calls() if c["job"] == handle.id] == ["sleep_tool"]
