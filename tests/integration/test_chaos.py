"""The chaos test and Redis faults, on a redis-server of this test (never the shared one).

- ``test_chaos``: 30 dual jobs with tools on 2 workers per role; a random worker is SIGKILLed and
  replaced every 1.5 to 3 s, and Redis restarts once (AOF on). Every job completes with the right
  deliverable, no ``at_most_once`` call runs twice, no message is stored twice, no job is left
  running, every job's Celery result is in the backend (what a bare client reads), no key lacks a
  TTL, and no worker exits by itself (only the killed ones are replaced). Bounded: at most 170 s.
- Redis unreachable (SIGSTOP) for 10 s in the middle of a tool call: the job completes and the
  ``at_most_once`` call ran once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.chaos import CHAOS_ENV, OwnRedis, run_chaos
from tests.integration.conftest import RESULT_SECONDS, Cluster, _cluster_on
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@pytest.fixture
def own_redis(redis_base: str) -> Iterator[OwnRedis]:
    server = OwnRedis().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_cluster(own_redis: OwnRedis) -> Iterator[Hosts]:
    yield from _cluster_on(f"{own_redis.base}/0", **CHAOS_ENV)


def test_chaos(own_cluster: Hosts, own_redis: OwnRedis) -> None:
    cluster, _, _ = own_cluster
    # Kills every 1.5–3 s and Redis restarted 5 s in: on a quiet machine the 30 jobs end in about
    # 12 s, and the jobs, not the clock, bound the run (it stops when no job is live), so slower
    # kills would leave too few, and a later restart would come after the last job.
    stats = run_chaos(cluster, own_redis, jobs=30, limit=170, kill_every=(1.5, 3.0), restart_after=5.0)
    print(f"\nchaos: {stats.kills} kills, {stats.redis_restarts} Redis restart, {stats.seconds:.0f} s")
    assert stats.kills >= 4 and stats.redis_restarts == 1
    assert stats.failures == []
    assert (stats.completed, stats.stuck) == (30, 0)
    assert (stats.wrong_deliverable, stats.duplicate_tool_runs, stats.duplicate_messages) == (0, 0, 0)
    assert stats.lost_celery_results == 0  # every bare client gets its result
    assert stats.keys_without_ttl == []


def test_redis_unreachable_for_10_s_mid_step(own_cluster: Hosts, own_redis: OwnRedis) -> None:
    cluster, _, _ = own_cluster
    cluster.start("thinker", "actor", "tools", **CHAOS_ENV)
    plan = [
        [{"name": "charge_card", "args": {"amount": 5, "seconds": 3}}],
        [{"name": "add", "args": {"a": 1, "b": 1}}],
    ]
    from tests.integration.plan_model import goal_with_plan

    handle = cluster.submit(goal=goal_with_plan("redis away", plan), max_rounds=6)
    deadline = time.monotonic() + 60
    while not [c for c in cluster.tool_calls() if c["job"] == handle.id] and time.monotonic() < deadline:
        time.sleep(0.05)
    own_redis.pause()
    time.sleep(10)
    own_redis.resume()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed" and result.deliverable == "all planned calls ran", result
    charges = [c for c in cluster.tool_calls() if c["job"] == handle.id and c["name"] == "charge_card"]
    assert len(charges) == 1
    assert [c for c in cluster.tool_calls() if c["job"] == handle.id and c["name"] == "add"]
