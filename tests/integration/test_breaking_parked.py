"""Attacks on the README's durability promises for parked steps (issue 22), written from the
README alone: "No worker thread is held while it waits", "A job awaiting approval holds nothing".

A Redis restart while every job waits out a host's Retry-After or a capacity slot, and a restart
and a crash while jobs await approval. Real ``tandem worker`` processes on a redis-server of their
own; a worker exiting by itself fails the test.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.breaking import (
    FAST,
    SMALL,
    checked,
    ended,
    own_cluster,
    plan_jobs,
    poll,
)
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_durability import runs

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("parked_on", ["backoff", "in_flight"])
def test_steps_parked_for_the_model_host_survive_a_restart(parked_on: str) -> None:
    """Every job's Actor step is parked (a 429 with Retry-After 15 s, or a host capped at one call
    in flight with 2 s replies) when Redis restarts: a countdown copy held in a worker's memory is
    dropped with the connection, and the job must still go on once the host answers."""
    env = dict(FAST)
    if parked_on == "in_flight":
        env["TANDEM_ACTOR_MAX_IN_FLIGHT"] = "1"
    with own_cluster(env) as ((cluster, _, actor), server):
        if parked_on == "backoff":  # from the first Actor call: a slow start does not outlast it
            actor.storm(20, retry_after=15, from_next_request=True)
        else:
            actor.latency = 2.0
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 4, f"parked {parked_on}")
        want = 4 if parked_on == "backoff" else 2

        def parked() -> bool:
            states = [h.status() for h in handles]
            return sum(1 for s in states if s.state == "waiting") >= want

        poll(parked, EVENT_SECONDS, f"{want} jobs parked on {parked_on}")
        seen = {h.id: (h.status().state, h.status().waiting_for) for h in handles}
        server.restart(down_for=2)
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        assert any(state == "waiting" for state, _ in seen.values()), seen


def test_jobs_awaiting_approval_outlive_a_restart_and_a_crash() -> None:
    """Three jobs parked awaiting approval (nothing queued for them), Redis restarted, then
    SIGKILLed (AOF ``everysec``, the park long written): each decision then runs its call once."""
    plan = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = [
            cluster.submit(goal=goal_with_plan(f"approval {i}", plan), reasoner="mono", max_rounds=4)
            for i in range(3)
        ]

        def all_parked() -> bool:
            return all(
                h.status().state == "awaiting_approval" and cluster.store.tool_result(h.id, 0, 1)
                for h in handles
            )

        poll(all_parked, EVENT_SECONDS, "three jobs awaiting approval")
        time.sleep(2)  # appendfsync everysec: the parked records are on disk
        server.restart(down_for=2)
        server.crash(down_for=2)
        for h in handles:
            assert h.status().state == "awaiting_approval"
            assert [(p.index, p.tool) for p in h.status().pending_approval or []] == [(2, "notify")]
        for h in handles:
            h.approve(timeout=60)
        for h in handles:
            result = h.result(timeout=RESULT_SECONDS)
            assert result.status == "completed", result
            assert len(runs(cluster, h.id, "notify")) == 1
            assert len(runs(cluster, h.id, "add")) == 1
