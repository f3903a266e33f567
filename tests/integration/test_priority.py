"""``JobSpec.priority``: every step of a more urgent job is served first from its queue."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration


def _actor_queue_lengths(cluster: Cluster) -> int:
    return sum(cluster.redis.llen(key) for key in cluster.redis.scan_iter("actor*"))


def test_the_more_urgent_jobs_step_is_taken_first(
    fresh_cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    cluster, _thinker, _actor = fresh_cluster
    cluster.start("tools")  # takes the intake: each job's first step waits in the actor queue
    low = cluster.submit(goal="routine", reasoner="mono", priority=1)
    high = cluster.submit(goal="urgent", reasoner="mono", priority=9)
    deadline = time.monotonic() + 60
    while _actor_queue_lengths(cluster) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _actor_queue_lengths(cluster) == 2
    with cluster.app.connection_for_read() as conn:
        channel = conn.default_channel
        first = channel.basic_get(queue="actor", no_ack=False)
        assert first is not None
        assert first.headers["id"].startswith(f"{high.id}.")  # sent second, served first (a step's id)
        assert json.loads(first.body)[0] == [high.id, 0]
        channel.basic_reject(first.delivery_tag, requeue=True)
    cluster.start("actor")
    assert high.result(timeout=RESULT_SECONDS).status == "completed"
    assert low.result(timeout=RESULT_SECONDS).status == "completed"
