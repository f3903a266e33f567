"""A model host's 200 answers that hold no chat completion, against real workers (issue 22, item 5).

A proxy's HTML page, JSON cut short, an empty body: transient, so the call is tried again with
back-off inside the step (no reschedule), a bounded number of times (``max_retries`` + 1 = 5). A host
that answers so twice and then well costs the job nothing; one that always answers so fails the job
with an error that says what came, how often, and what to check, long before the job's deadline.
Before, the first such answer failed the job at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.integration.conftest import RESULT_SECONDS, Cluster, actor_host
from tests.integration.plan_model import goal_with_plan, thinker
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}]]


def garbage_first(count: int, then: Callable[[RecordedRequest], Reply]) -> Callable[[RecordedRequest], Reply]:
    """A script answering its first ``count`` requests with a proxy's HTML page, then as ``then``."""
    seen = [0]

    def script(request: RecordedRequest) -> Reply:
        seen[0] += 1
        return Reply.malformed("html") if seen[0] <= count else then(request)

    return script


@pytest.fixture
def hosts(dual_cluster: Hosts) -> Iterator[Hosts]:
    """The shared cluster; its model hosts get their plan scripts back after the test."""
    yield dual_cluster
    _, thinker_host, actor = dual_cluster
    thinker_host.set_script(thinker)
    actor.set_script(actor_host)


def test_a_host_that_answers_garbage_twice_then_well_costs_the_job_nothing(hosts: Hosts) -> None:
    cluster, thinker_host, _ = hosts
    thinker_host.set_script(garbage_first(2, thinker))
    thinker_host.clear()
    handle = cluster.submit(goal=goal_with_plan("garbage twice", PLAN), max_rounds=4)

    result = handle.result(timeout=RESULT_SECONDS)

    assert result.status == "completed" and result.deliverable == "all planned calls ran", result
    assert result.rounds == 2
    assert thinker_host.request_count == 2 + 2  # two Thinker turns, the first tried three times
    record = cluster.store.machine.record(handle.id)
    assert int(record.get("retries") or 0) == 0, "retried inside the call, not rescheduled"


def test_a_host_that_always_answers_garbage_fails_the_job_with_a_clear_error(hosts: Hosts) -> None:
    cluster, _, actor = hosts
    actor.set_script(Reply.malformed("html"))
    actor.clear()
    handle = cluster.submit(goal=goal_with_plan("always garbage", PLAN), max_rounds=4, timeout_s=3600)

    result = handle.result(timeout=RESULT_SECONDS)

    assert result.status == "failed", result
    assert actor.request_count == 5  # max_retries (4) + 1, then the job failed: not at its deadline
    error = result.error or ""
    assert f"model 'openai/actor-model' at {actor.url}: no chat completion in 5 tries in a row" in error
    assert "the last answer was HTTP 200 with text/html that is not JSON: '<html><head><title>502" in error
    assert "check that TANDEM_ACTOR_API_BASE (api_base=) is the server's OpenAI-compatible /v1" in error
    assert "deadline" not in error


def test_a_streamed_call_through_litellm_is_bounded_too(fresh_cluster: Hosts) -> None:
    """Through LiteLLM, streamed: an HTML page answered to a streamed request used to read as an
    empty reply (LiteLLM skips what is not an event and ends the stream itself)."""
    cluster, _, actor = fresh_cluster
    actor.set_script(Reply.malformed("html"))
    cluster.start("thinker", "actor", "tools", TANDEM_ACTOR_STREAM="true", TANDEM_DIRECT_HTTP="false")
    handle = cluster.submit(goal=goal_with_plan("streamed garbage", PLAN), max_rounds=4, timeout_s=3600)

    result = handle.result(timeout=RESULT_SECONDS)

    assert result.status == "failed", result
    assert actor.request_count == 5
    assert actor.requests[0].get("stream") is True
    assert "no chat completion in 5 tries in a row; the last answer was HTTP 200 with text/html instead " in (
        result.error or ""
    )
