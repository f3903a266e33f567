"""A client following a job rides out a Redis restart, and names the restart when it erased the job.

On a redis-server of this test (``OwnRedis``, never the shared one), with real workers:

- AOF on, Redis down about 5 s while the job runs a tool: ``result()``, ``aresult()`` and an
  ``events()`` iterator, all waiting across the outage, end with the completed job; the iterator
  yields every event of the stream once, in order (before, the three raised
  ``redis.ConnectionError``).
- No persistence, Redis restarted after the job started: ``result()``, ``aresult()`` and
  ``events()``, waiting across the restart, raise ``JobLostError`` naming the restart and the missing
  persistence, also on a handle that did not submit the job but saw it running.

Every worker must still be alive at the end: none may exit because Redis went away.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.errors import JobLostError
from tandem.tasks.job_events import JobEvent
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import RESULT_SECONDS, Cluster, _cluster_on
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
FAST = {"TANDEM_LEASE_SECONDS": "2", "TANDEM_STALL_SECONDS": "4", "TANDEM_TOOL_TIMEOUT": "60"}
"""Short leases and stall time, so a step lost in the outage is taken over within seconds."""


@pytest.fixture
def aof_redis(redis_base: str) -> Iterator[OwnRedis]:
    server = OwnRedis(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def volatile_redis(redis_base: str) -> Iterator[OwnRedis]:
    server = OwnRedis(appendonly=False).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def aof_cluster(aof_redis: OwnRedis) -> Iterator[Hosts]:
    yield from _cluster_on(f"{aof_redis.base}/0", **FAST)


@pytest.fixture
def volatile_cluster(volatile_redis: OwnRedis) -> Iterator[Hosts]:
    yield from _cluster_on(f"{volatile_redis.base}/0", **FAST)


class Waiter(threading.Thread):
    """Runs ``wait`` in a thread and keeps what it returned or raised."""

    def __init__(self, name: str, wait: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.wait = wait
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.wait()
        except BaseException as exc:  # the test reports it
            self.error = exc


def _when_running_a_tool(cluster: Cluster, handle: JobHandle, timeout: float = 60.0) -> None:
    """Wait until the job's first tool call has started (its ``tool_call`` event is out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.type == "tool_call" for e in cluster.store.read_events(handle.id)):
            return
        time.sleep(0.05)
    raise AssertionError(f"job {handle.id} started no tool call in {timeout:g} s")


def _restart_in_background(redis: OwnRedis, down_for: float) -> tuple[threading.Thread, dict[str, float]]:
    """Restart ``redis`` in a thread (down ``down_for`` s); the times it went down and came back."""
    times: dict[str, float] = {}

    def restart() -> None:
        times["down"] = time.time()
        redis.restart(down_for=down_for)
        times["up"] = time.time()

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread, times


def _exited(cluster: Cluster) -> dict[str, int | None]:
    """The workers that exited (none may: a Redis restart must not end a worker), with their codes."""
    return {
        f"{role} worker (log {group.log_dir / (role + '.log')})": proc.poll()
        for group in cluster.groups
        for role, proc in group.processes.items()
        if proc.poll() is not None
    }


def test_waits_ride_out_a_redis_restart(aof_cluster: Hosts, aof_redis: OwnRedis) -> None:
    cluster, _, _ = aof_cluster
    cluster.start("thinker", "actor", "tools", concurrency={"thinker": 2, "actor": 2, "tools": 2})
    plan = [[{"name": "sleep_tool", "args": {"seconds": 3}}], [{"name": "add", "args": {"a": 1, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("ride out a restart", plan), max_rounds=6)
    _when_running_a_tool(cluster, handle)

    waiters = [
        Waiter("result", lambda: handle.result(timeout=RESULT_SECONDS)),
        Waiter("aresult", lambda: asyncio.run(handle.aresult(timeout=RESULT_SECONDS))),
        Waiter("events", lambda: list(handle.events(timeout=RESULT_SECONDS))),
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.5)  # every waiter is inside its wait
    restarter, times = _restart_in_background(aof_redis, down_for=5.0)
    restarter.join(60)
    for waiter in waiters:
        waiter.join(RESULT_SECONDS + 30)  # each wait ends with the job, or by its own timeout

    # A worker lost in the restart (the transport's restore bug) leaves the job without an end.
    assert _exited(cluster) == {}, "workers exited during the Redis restart"
    errors = {w.name: repr(w.error) for w in waiters if w.error is not None}
    assert errors == {}, f"waits that did not ride out the restart: {errors}"
    result, aresult, events = (w.value for w in waiters)
    assert (result.status, result.deliverable) == ("completed", "all planned calls ran"), result
    assert aresult == result

    stream: list[JobEvent] = cluster.store.read_events(handle.id, count=10_000)
    assert [e.id for e in events] == [e.id for e in stream]  # none lost, none twice, in order
    assert events[-1].type == "final" and events[-1].data["deliverable"] == result.deliverable
    assert events[-1].at > times["up"]  # the job ended after Redis came back: every wait spanned it
    assert any(e.at < times["down"] for e in events)


def test_a_restart_without_persistence_after_the_start_is_named(
    volatile_cluster: Hosts, volatile_redis: OwnRedis
) -> None:
    cluster, _, _ = volatile_cluster
    cluster.start("thinker", "actor", "tools", concurrency={"thinker": 2, "actor": 2, "tools": 2})
    plan = [[{"name": "sleep_tool", "args": {"seconds": 8}}], [{"name": "add", "args": {"a": 1, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("erased by a restart", plan), max_rounds=6)
    _when_running_a_tool(cluster, handle)
    # A handle that did not submit the job, but sees it running before the restart.
    follower = JobHandle(handle.id, cluster.store, cluster.app)
    assert follower.status().state == "running"

    waiters = [
        Waiter("result", lambda: handle.result(timeout=60)),
        Waiter("aresult", lambda: asyncio.run(handle.aresult(timeout=60))),
        Waiter("events", lambda: list(handle.events(timeout=60))),
        Waiter("follower result", lambda: follower.result(timeout=60)),
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.5)
    restarter, _ = _restart_in_background(volatile_redis, down_for=2.0)
    restarter.join(60)
    for waiter in waiters:
        waiter.join(90)

    named = r"Redis restarted \d+ s ago.*without persistence \(appendonly no\).*Submit it again"
    unnamed = {
        w.name: repr(w.error) if w.error is not None else f"returned {w.value!r}"
        for w in waiters
        if not (isinstance(w.error, JobLostError) and re.search(named, str(w.error)))
    }
    assert unnamed == {}, f"waits that did not raise JobLostError naming the restart: {unnamed}"
    with pytest.raises(JobLostError, match=named):  # asked after the restart, by a handle that saw it
        follower.status()
    assert not cluster.redis.exists(cluster.store.key(handle.id, "state"))  # nothing brought it back
    assert _exited(cluster) == {}, "workers exited during the Redis restart"
