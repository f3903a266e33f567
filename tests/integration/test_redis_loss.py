"""A Redis restart without persistence erases the jobs: a handle says so instead of ``queued``.

On a redis-server of this test (``appendonly no``), never the shared one: a job is submitted with no
worker to take it, Redis restarts, and ``status()``/``result()`` raise ``JobLostError`` naming the
restart and the missing persistence (before, ``status()`` said ``queued`` for ever).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tandem.tasks.errors import JobLostError, UnknownJobError
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import Cluster, _cluster_on
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@pytest.fixture
def volatile_redis(redis_base: str) -> Iterator[OwnRedis]:
    server = OwnRedis(appendonly=False).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def volatile_cluster(volatile_redis: OwnRedis) -> Iterator[Hosts]:
    yield from _cluster_on(f"{volatile_redis.base}/0")


def test_a_job_erased_by_a_restart_without_persistence_is_reported_lost(
    volatile_cluster: Hosts, volatile_redis: OwnRedis
) -> None:
    cluster, _, _ = volatile_cluster
    handle = cluster.submit(goal="never taken", max_rounds=2)  # no worker: it stays queued
    assert handle.status().state == "queued"
    time.sleep(1.5)
    volatile_redis.restart(down_for=0.5)

    with pytest.raises(JobLostError, match=r"Redis restarted \d+ s ago.*appendonly no.*Submit it again"):
        handle.status()
    assert isinstance(JobLostError("x"), UnknownJobError)  # callers catching UnknownJobError see it
    started = time.monotonic()
    with pytest.raises(JobLostError, match="appendonly no"):
        handle.result(timeout=30)
    assert time.monotonic() - started < 10  # noticed within seconds, not at the timeout
    with pytest.raises(JobLostError):
        asyncio.run(handle.aresult(timeout=30))
