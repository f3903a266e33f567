"""A hung model host holds a worker's step for ``TANDEM_<ROLE>_TIMEOUT`` at most, then the step is
rescheduled through the durable path (``waiting``, sent again, holding no thread meanwhile).

``TANDEM_ACTOR_TIMEOUT`` bounds one model call, all its attempts included
(``tandem.reasoner.models.attempts``): the host below never answers the first request, so that
call is one attempt of 10 s (ample for an answered call on a loaded machine), not five; the step
parks and runs again, and its second call is answered. The direct path and LiteLLM
(``TANDEM_DIRECT_HTTP=false``), each on the model loop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tandem.tasks.job_events import Waiting
from tests.integration.conftest import Cluster, _make_cluster, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

HANG = 120.0
"""Seconds the hung host waits before its answer (the server stops waiting when it is stopped)."""


@pytest.fixture(params=["direct", "litellm"])
def cluster(request: pytest.FixtureRequest, redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer]]:
    direct = "true" if request.param == "direct" else "false"
    clusters = _make_cluster(redis_base, TANDEM_ACTOR_TIMEOUT="10", TANDEM_DIRECT_HTTP=direct)
    cluster, _thinker, actor = next(clusters)
    cluster.start("actor", "tools")
    yield cluster, actor
    next(clusters, None)


def test_a_hung_call_ends_at_the_timeout_and_the_step_runs_again(
    cluster: tuple[Cluster, OpenAIServer],
) -> None:
    workers, actor = cluster
    goal = goal_with_plan("hung once", [[{"name": "add", "args": {"a": 1, "b": 2}}]])
    mine: list[int] = []

    def hang_first(request: RecordedRequest) -> Reply:
        if "hung once" not in str(request["messages"]):
            return actor_host(request)
        mine.append(request.number)
        reply = actor_host(request)
        if len(mine) == 1:
            reply.delay = HANG
        return reply

    actor.set_script(hang_first)
    handle = workers.submit(goal=goal, reasoner="mono", max_rounds=4)
    result = handle.result(timeout=120)
    events = list(handle.events(timeout=30))

    assert result.status == "completed", result
    assert result.deliverable == "mono plan done"
    waits = [e for e in events if isinstance(e, Waiting)]
    assert [(w.round, w.step, w.reason) for w in waits] == [(0, "actor", "the model host")]
    assert "The call's time ran out (timeout=10s for all its attempts, 1 attempt made)" in waits[0].error
    assert "TANDEM_ACTOR_TIMEOUT" in waits[0].error
    # one attempt for the hung call, then the rescheduled step's call, then round 1's
    assert len(mine) == 3, mine
