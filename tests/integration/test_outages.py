"""Workers outlive every Redis outage, on a redis-server of the test's own (never the shared one).

Redis is the broker, the result backend and the job store, as in the default deployment. Each test
runs dual jobs with tools on two workers per role, takes Redis away in the middle of the run while
the workers hold step messages, and checks that:

- no worker process exits (``Cluster.stop`` fails the test if one did: none is ever restarted);
- the workers consume again once Redis is back: every job completes with the right deliverable
  (with persistence), or new jobs complete (after a restart that lost everything).

The faults: a clean restart with AOF, Redis down 5 s; a restart without persistence; a SIGKILL of
Redis (AOF ``everysec``: the last second of writes may be lost, so steps may run again).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.steps.tools import INTERRUPTED
from tests.integration.chaos import CHAOS_ENV, OwnRedis
from tests.integration.conftest import RESULT_SECONDS, Cluster, _cluster_on
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
PLAN = [
    [
        {"name": "charge_card", "args": {"amount": 1, "seconds": 0.5}},
        {"name": "sleep_tool", "args": {"seconds": 1}},
    ],
    [{"name": "add", "args": {"a": 3, "b": 4}}],
]
JOBS = 40
CONCURRENCY = {"thinker": 16, "actor": 16, "tools": 16}


def _own(appendonly: bool) -> Iterator[tuple[Hosts, OwnRedis]]:
    server = OwnRedis(appendonly=appendonly).start()
    # The tools record their calls in a Redis that stays up: a SIGKILL of the job store's loses
    # its last second of writes, and with it the record of a call that ran (the job completes).
    calls = OwnRedis(appendonly=False).start()
    try:
        for hosts in _cluster_on(f"{server.base}/0", TEST_CALLS_REDIS_URL=f"{calls.base}/0", **CHAOS_ENV):
            yield hosts, server
    finally:
        server.stop()
        calls.stop()


@pytest.fixture
def persistent() -> Iterator[tuple[Hosts, OwnRedis]]:
    yield from _own(appendonly=True)


@pytest.fixture
def volatile() -> Iterator[tuple[Hosts, OwnRedis]]:
    yield from _own(appendonly=False)


def _mid_run(cluster: Cluster, jobs: int = JOBS) -> list[JobHandle]:
    """Start the workers, submit ``jobs`` jobs and return once tools run and most jobs are live."""
    for name in ("a", "b"):  # idle threads: the workers wait in BRPOP too when Redis goes away
        cluster.start("thinker", "actor", "tools", concurrency=CONCURRENCY, name=name, **CHAOS_ENV)
    handles = [cluster.submit(goal=goal_with_plan(f"outage {i}", PLAN), max_rounds=6) for i in range(jobs)]
    deadline = time.monotonic() + 60
    while len({c["job"] for c in cluster.tool_calls()}) < 3:
        assert time.monotonic() < deadline, "no tool ran within 60 s"
        time.sleep(0.05)
    return handles


def _held_messages(cluster: Cluster) -> int:
    """How many steps and tool calls workers hold now (taken from their queues, running, not yet
    acknowledged): the live holders in the jobs' records and calls."""
    redis, prefix = cluster.redis, cluster.settings.prefix
    steps = sum(
        1 for k in redis.scan_iter(match=f"{prefix}:*:state") if redis.hget(k, "holder") not in (None, b"")
    )
    calls = sum(
        1
        for k in redis.scan_iter(match=f"{prefix}:*:calls")
        for field, holder in redis.hgetall(k).items()
        if field.endswith(b":holder") and holder
    )
    return steps + calls


def _all_complete(cluster: Cluster, handles: list[JobHandle], *, crash: bool = False) -> None:
    """Every job completes, and its charge_card ran; after a ``crash`` of Redis, a charge_card that
    did not run may instead be reported interrupted (Redis took the call's start mark and died
    before the worker heard back: the worker cannot know whether the tool ran)."""
    for h in handles:
        result = h.result(timeout=RESULT_SECONDS)
        assert (result.status, result.deliverable) == ("completed", "all planned calls ran"), result
        charges = [c for c in cluster.tool_calls() if c["job"] == h.id and c["name"] == "charge_card"]
        if charges or not crash:
            assert charges, f"{h.id}: charge_card never ran"
            continue
        outputs = cluster.redis.hvals(cluster.store.key(h.id, "tools"))
        reported = any(INTERRUPTED.encode() in o for o in outputs)
        assert reported, f"{h.id}: charge_card neither ran nor was reported interrupted"


def _states(cluster: Cluster, handles: list[JobHandle]) -> Counter[str]:
    """How many of ``handles``' jobs are in each state now (``unknown``: no record)."""
    records = (cluster.store.status(h.id) for h in handles)
    return Counter("unknown" if r is None else r.state for r in records)


def _survives(cluster: Cluster, fault: Callable[[], None], handles: list[JobHandle]) -> None:
    """Inject ``fault`` while the workers hold steps; no worker may exit.

    On a loaded machine the jobs of ``handles`` may all have ended before the next fault: more are
    submitted (and added to ``handles``), so that each fault lands mid-run, as the test means."""
    deadline = time.monotonic() + 60
    while _held_messages(cluster) == 0:  # the fault comes while workers hold steps
        states = _states(cluster, handles)
        assert time.monotonic() < deadline, f"the workers held no step for 60 s; the jobs' states: {states}"
        if sum(n for state, n in states.items() if state in FINAL_STATES) == len(handles):
            more = (goal_with_plan(f"more {i}", PLAN) for i in range(8))
            handles.extend(cluster.submit(goal=goal, max_rounds=6) for goal in more)
        time.sleep(0.05)
    fault()
    time.sleep(3)  # Celery notices the lost connection and reconnects in this time
    assert cluster.exited() == []


def test_workers_outlive_a_redis_restart_with_aof_down_5_s(persistent: tuple[Hosts, OwnRedis]) -> None:
    (cluster, _, _), server = persistent
    handles = _mid_run(cluster)
    for _ in range(2):  # a worker died at one restart in two, or more, before the fix
        _survives(cluster, lambda: server.restart(down_for=5.0), handles)
    # A start mark whose reply the shutdown cut off leaves the call reported interrupted, as after
    # a crash: the worker cannot know the mark was taken (Redis ran it, then closed the connection).
    _all_complete(cluster, handles, crash=True)
    for h in handles:  # no at_most_once call ran twice
        charges = [c for c in cluster.tool_calls() if c["job"] == h.id and c["name"] == "charge_card"]
        assert len(charges) <= 1, charges
    assert cluster.exited() == []


def test_workers_outlive_a_sigkill_of_redis(persistent: tuple[Hosts, OwnRedis]) -> None:
    (cluster, _, _), server = persistent
    handles = _mid_run(cluster)
    for _ in range(2):
        _survives(cluster, lambda: server.crash(down_for=2.0), handles)
    _all_complete(cluster, handles, crash=True)
    assert cluster.exited() == []


def test_workers_outlive_a_restart_that_lost_everything(volatile: tuple[Hosts, OwnRedis]) -> None:
    (cluster, _, _), server = volatile
    lost = _mid_run(cluster)
    _survives(cluster, lambda: server.restart(down_for=1.0), lost)
    assert not list(cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{*}}:state"))
    # The same workers take new jobs (nothing was restarted), and outlive a second loss.
    again = [cluster.submit(goal=goal_with_plan(f"again {i}", PLAN), max_rounds=6) for i in range(JOBS)]
    _survives(cluster, lambda: server.restart(down_for=0.2), again)
    fresh = [cluster.submit(goal=goal_with_plan(f"after {i}", PLAN), max_rounds=6) for i in range(4)]
    _all_complete(cluster, fresh)
    assert cluster.exited() == []
