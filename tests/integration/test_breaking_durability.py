"""Attacks on the README's durability promises (issue 22), written from the README alone: Redis
outages while jobs run.

Every test runs real ``tandem worker`` processes on a redis-server of its own (``OwnRedis``),
never the shared one, and fails when a worker exits by itself (the cluster's teardown).

- "Workers outlive every Redis or broker outage ... down for a fraction of a second or for hours":
  Redis down 40 s (longer than Celery's reconnect back-off of up to 30 s), and Redis hung (SIGSTOP)
  for 20 s, ten times the lease, while six jobs hold steps and tool calls; six restarts in twelve
  seconds; a broker that forgets every message.
- "Redis restarts. With append-only persistence a restart loses no job": a restart in the middle
  of a burst of submissions, while workers hold intake messages.

The other attacks on the same promises are in ``test_breaking_parked.py`` (parked steps),
``test_breaking_client_waits.py`` (client waits, bare clients) and ``test_breaking_rabbitmq.py``.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.breaking import (
    FAST,
    SMALL,
    checked,
    each_event_once,
    ended,
    jobs_with_charges,
    own_cluster,
    plan_jobs,
    poll,
)
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, _cluster_on, _exclusive_db

pytestmark = pytest.mark.integration


def test_every_worker_takes_work_again_after_redis_was_down_40_s() -> None:
    """Down longer than the consumer's longest reconnect wait (30 s): each role has one worker, so
    every job completing proves each came back; a job submitted after the outage completes too."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "long outage")
        poll(lambda: jobs_with_charges(cluster, 3), EVENT_SECONDS, "three jobs in their first tool round")
        server.restart(down_for=40)
        handles += plan_jobs(cluster, 1, "after the outage")
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        assert cluster.exited() == []


def test_redis_hung_ten_leases_long_while_six_jobs_hold_steps() -> None:
    """SIGSTOP for 20 s (connections hang, nothing is refused) with leases of 2 s: every step and
    tool call under way loses its lease; the reconciler takes them over, the paused holders'
    late commits are fenced, and no ``at_most_once`` call runs twice."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "hung redis")
        poll(lambda: jobs_with_charges(cluster, 2), EVENT_SECONDS, "two jobs in their first tool round")
        server.pause()
        time.sleep(20)
        server.resume()
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)


def test_a_restart_in_the_middle_of_a_burst_of_submissions_loses_no_job() -> None:
    """Twelve jobs submitted at once and Redis restarted (AOF, down 2 s) right after the last:
    workers hold intake messages they took, and some are still queued."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 12, "burst")
        server.restart(down_for=2)
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)


def test_redis_flapping_six_restarts_in_twelve_seconds() -> None:
    """Six restarts (AOF, down 0.3 s) two seconds apart while ten jobs commit steps and tool
    results with eight tool threads: commits cut off mid-way are retried, none stored twice."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency={"thinker": 2, "actor": 2, "tools": 8})
        handles = plan_jobs(cluster, 10, "flapping")
        poll(lambda: jobs_with_charges(cluster, 2), EVENT_SECONDS, "two jobs in their first tool round")
        for _ in range(6):
            server.restart(down_for=0.3)
            time.sleep(2)
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        assert [line for h in handles for line in each_event_once(cluster, h.id)] == []


def test_a_broker_that_forgets_every_message_loses_no_job(redis_base: str) -> None:
    """The broker is a Redis of its own without persistence (the job store another, untouched):
    restarted mid-run it comes back empty, without a queued step, intake message or kombu binding.
    The reconciler must send every step again and every job complete."""
    broker = OwnRedis(appendonly=False).start()
    try:
        with _exclusive_db() as db:
            clusters = _cluster_on(f"{redis_base}/{db}", TANDEM_BROKER_URL=f"{broker.base}/0", **FAST)
            cluster, _, _ = next(clusters)
            try:
                cluster.start("thinker", "actor", "tools", concurrency=SMALL)
                handles = plan_jobs(cluster, 8, "forgetful broker")
                poll(
                    lambda: jobs_with_charges(cluster, 2), EVENT_SECONDS, "two jobs in their first tool round"
                )
                broker.restart(down_for=1)
                ended(cluster, handles, RESULT_SECONDS)
                checked(cluster, handles)
                assert [line for h in handles for line in each_event_once(cluster, h.id)] == []
            finally:
                next(clusters, None)
    finally:
        broker.stop()
