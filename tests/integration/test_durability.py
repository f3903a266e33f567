"""Durability against real workers: lost, forged and revoked messages, paused and killed workers,
a rate-limited model host. Each test injects the fault on purpose (see the README's Durability)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.runtime import Runtime
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
TASK_ENDED = re.compile(r"Task tandem\.run_tool\[[^\]]+\] (succeeded|ignored|raised|retry|rejected)")
"""A line of a worker's log (INFO) for a ``run_tool`` message it has done with, whatever the end."""
FAST = {
    "TANDEM_STALL_SECONDS": "3",
    "TANDEM_TOOL_TIMEOUT": "30",
    "TANDEM_TOOLKIT": "tests.integration.tools:durable_toolkit",
}


def wait_for(what: Callable[[], Any], timeout: float = EVENT_SECONDS, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message or what}")


def record(cluster: Cluster, job_id: str) -> dict[str, str]:
    return cluster.store.machine.record(job_id)


def runs(cluster: Cluster, job_id: str, name: str) -> list[dict[str, Any]]:
    return [c for c in cluster.tool_calls() if c["job"] == job_id and c["name"] == name]


def queued(cluster: Cluster, queue: str) -> list[str]:
    """The broker's list keys of ``queue`` (kombu keeps one list per queue and priority)."""
    names = [k.decode() for k in cluster.redis.scan_iter(match=f"{queue}*")]
    return [k for k in names if cluster.redis.type(k) == b"list"]


def test_a_lost_run_tool_message_is_sent_again(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "actor", **FAST)  # no tools worker yet: the call waits in its queue
    plan = [[{"name": "add", "args": {"a": 1, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("lost tool message", plan), max_rounds=4)
    wait_for(
        lambda: record(cluster, handle.id).get("kind") == "tools" and queued(cluster, "tools"), EVENT_SECONDS
    )
    for key in queued(cluster, "tools"):
        cluster.redis.delete(key)  # the run_tool message is lost
    cluster.start("tools", **FAST)

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert len(runs(cluster, handle.id, "add")) == 1


def test_a_lost_intake_message_is_sent_again(fresh_cluster: Hosts, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tandem.infer`` lost before any worker created the job's record (no worker yet, then the
    intake queue emptied): the reconciler sends it again from the spec ``submit`` stored."""
    cluster, _, _ = fresh_cluster
    # The client indexes the job for a look after its own TANDEM_STALL_SECONDS: the workers' 3 s
    # here (the default, 60 s, would only make the test wait).
    client = Runtime(Settings.from_env({**cluster.env, **FAST}))
    monkeypatch.setattr(runtime_module, "_runtime", client)
    plan = [[{"name": "add", "args": {"a": 2, "b": 5}}]]
    handle = cluster.submit(goal=goal_with_plan("lost intake message", plan), max_rounds=4)
    intake = cluster.settings.intake_queue
    wait_for(lambda: queued(cluster, intake), 10, "the intake message")
    for key in queued(cluster, intake):
        cluster.redis.delete(key)  # the tandem.infer message is lost
    assert handle.status().state == "queued"
    cluster.start("thinker", "actor", "tools", **FAST)

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed" and result.deliverable == "all planned calls ran", result
    assert len(runs(cluster, handle.id, "add")) == 1
    assert cluster.store.machine.intake(handle.id) is None  # the stored spec went when the job started


def test_forged_stale_and_wrong_round_messages_change_nothing(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "actor", "tools", **FAST)
    plan = [[{"name": "sleep_tool", "args": {"seconds": 3}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("forged messages", plan), max_rounds=6)
    wait_for(lambda: record(cluster, handle.id).get("kind") == "tools", EVENT_SECONDS, "the tool step")
    job = handle.id
    for name, args in [
        ("tandem.finalize", [job, 0]),  # forged: the job is not finalizing
        ("tandem.finalize", [job, "completed"]),  # the old signature
        ("tandem.thinker_turn", [job, 0]),  # stale: round 0's Thinker already spoke
        ("tandem.actor_turn", [job, 7]),  # a round that does not exist
        ("tandem.collect_tools", [job, 0]),  # early: the call has not reported
        ("tandem.run_tool", [job, 0, 1]),  # a duplicate of the running call
        ("tandem.run_tool", [job, 0, 9]),  # a call that was never made
    ]:
        cluster.app.send_task(name, args=args)

    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed" and result.deliverable == "all planned calls ran", result
    assert result.rounds == 3
    assert len(runs(cluster, job, "sleep_tool")) == 1 and len(runs(cluster, job, "add")) == 1
    keys = [(m.round, m.role) for m in cluster.store.memory(job).get_messages()]
    assert keys == [
        (0, "thinker"),
        (0, "actor"),
        (0, "tool"),
        (1, "thinker"),
        (1, "actor"),
        (1, "tool"),
        (2, "thinker"),
        (2, "actor"),
    ]


def test_revoking_the_job_id_does_not_stop_a_started_job(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "actor", "tools", **FAST)
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]
    handle = cluster.submit(goal=goal_with_plan("revoked", plan), max_rounds=6)
    wait_for(lambda: record(cluster, handle.id).get("state") == "running", EVENT_SECONDS, "the job to start")
    cluster.app.control.revoke(handle.id)  # Flower's "revoke" button
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result


def test_a_worker_paused_past_its_lease_runs_no_at_most_once_call_twice(fresh_cluster: Hosts) -> None:
    """SIGSTOP during a tool call, a replacement takes the calls over, SIGCONT: the paused worker
    stores nothing; the at_most_once call is reported interrupted, the other runs again under the
    same idempotency key."""
    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "actor", **FAST)
    tools = cluster.start("tools", **FAST)
    plan = [
        [
            {"name": "charge_card", "args": {"amount": 5, "seconds": 6}},
            {"name": "sleep_tool", "args": {"seconds": 6}},
        ]
    ]
    handle = cluster.submit(goal=goal_with_plan("paused worker", plan), max_rounds=4)
    job = handle.id
    wait_for(lambda: runs(cluster, job, "charge_card"), EVENT_SECONDS, "the charge to start")
    paused = tools.processes["tools"].pid
    os.kill(paused, signal.SIGSTOP)
    try:
        cluster.start("tools", **FAST)  # the replacement
        wait_for(
            lambda: record(cluster, job).get("kind") != "tools", EVENT_SECONDS, "the takeover of the calls"
        )
    finally:
        os.kill(paused, signal.SIGCONT)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    # The paused worker finishes its two calls and tries to report them: Celery logs each end.
    wait_for(
        lambda: len(TASK_ENDED.findall(tools.log_dir.joinpath("tools.log").read_text())) >= 2,
        EVENT_SECONDS,
        "the paused worker to end both calls",
    )

    charges = runs(cluster, job, "charge_card")
    assert len(charges) == 1 and charges[0]["pid"] == paused, charges
    sleeps = runs(cluster, job, "sleep_tool")
    assert {s["key"] for s in sleeps} == {f"{job}:0:2"}  # one idempotency key for every attempt
    assert sorted(s["attempt"] for s in sleeps) == [1, 2]
    stored = cluster.store.memory(job).get_message(0, "tool")
    assert stored is not None
    charge_result, sleep_result = stored.function_results
    assert charge_result.status == "failed" and "interrupted" in charge_result.output
    assert sleep_result.status == "succeeded"
    record_after = record(cluster, job)
    assert record_after["state"] == "completed"


def test_a_killed_worker_with_a_backlog_fails_no_healthy_job(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    cluster.start("thinker", "tools", **FAST)
    actor = cluster.start("actor", concurrency={"actor": 2}, **FAST)
    plan = [[{"name": "add", "args": {"a": 1, "b": 1}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
    handles = [cluster.submit(goal=goal_with_plan(f"backlog {i}", plan), max_rounds=6) for i in range(10)]
    wait_for(lambda: sum(1 for c in cluster.tool_calls()) >= 3, 90, "some progress")
    cluster.kill(actor, "actor")
    cluster.start("actor", concurrency={"actor": 2}, **FAST)
    results = [h.result(timeout=RESULT_SECONDS) for h in handles]
    assert [r.status for r in results] == ["completed"] * 10, [r.error for r in results]
    for h in handles:
        assert len(runs(cluster, h.id, "add")) == 2


def test_a_rate_limited_model_host_parks_jobs_until_it_answers(fresh_cluster: Hosts) -> None:
    """The Actor's host answers 429 with Retry-After: 20 for 15 s from its first request: jobs wait
    (holding no worker thread: two jobs wait at once on one single-threaded worker) as long as the
    host said, past the time the host refuses, and then complete."""
    cluster, _, actor = fresh_cluster
    opened: list[float] = []  # when the first request came: the workers' start takes no part

    def limited(request: RecordedRequest) -> Reply:
        if not opened:
            opened.append(time.monotonic())
        if time.monotonic() - opened[0] < 15:
            return Reply(status=429, error="rate limited", headers={"Retry-After": "20"})
        return actor_host(request)

    actor.set_script(limited)
    cluster.start("thinker", "tools", **FAST)
    cluster.start("actor", concurrency={"actor": 1}, **FAST)
    handles = [cluster.submit(goal=goal_with_plan(f"limited {i}", []), max_rounds=4) for i in range(2)]

    def both_waiting() -> bool:
        states = [h.status() for h in handles]
        return all(s.state == "waiting" for s in states)

    wait_for(both_waiting, EVENT_SECONDS, "both jobs to wait")
    status = handles[0].status()
    assert status.waiting_for == "the model host" and "429" in (status.error or "")
    assert status.until is not None and status.until > time.time() + 10  # Retry-After, not a back-off
    events = [e["type"] for e in handles[0].events(timeout=1)]
    assert "waiting" in events
    results = [h.result(timeout=RESULT_SECONDS) for h in handles]
    assert [r.status for r in results] == ["completed", "completed"], results
