"""Cancelling a job that no worker has started yet."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import Cluster
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
    deadline = time.monotonic() + 20
    while _intake_queued(cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    assert _intake_queued(cluster) == 0
    assert handle.result(timeout=1).status == "cancelled"
    assert thinker.requests == [] and actor.requests == []
