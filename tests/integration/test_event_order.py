"""The order of a job's events on real workers with streaming on (docs/events.md, "The order of
events"): a round's ``round_started`` comes before any of its tokens, once, for dual, mono and react
jobs, and when a step runs again after a worker died mid-reply or after a stream broke."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tandem.tasks.job_events import JobEvent, ModelDelta
from tests.event_order import order_problems
from tests.integration import plan_model
from tests.integration.conftest import Cluster, _make_cluster, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_react_job import react_host
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
STREAMING = {"TANDEM_THINKER_STREAM": "true", "TANDEM_ACTOR_STREAM": "true"}
PLAN = [[{"name": "add", "args": {"a": 1, "b": 2}}], [{"name": "add", "args": {"a": 3, "b": 4}}]]


def any_actor(request: RecordedRequest) -> Reply:
    """The Actor role's host for every kind of job: native tool calls for react (its requests
    offer ``tools``), the plan's prompt-mode replies for dual and mono."""
    reply = react_host(request) if request.get("tools") else actor_host(request)
    reply.chunk_size = 6  # several deltas per reply
    return reply


def thinker_host(request: RecordedRequest) -> Reply:
    reply = plan_model.thinker(request)
    reply.chunk_size = 6
    return reply


@pytest.fixture(scope="module")
def streaming(redis_base: str) -> Iterator[Hosts]:
    """Thinker, actor and tools workers whose model hosts stream every reply."""
    gen = _make_cluster(redis_base, **STREAMING)
    cluster, thinker, actor = next(gen)
    thinker.set_script(thinker_host)
    actor.set_script(any_actor)
    cluster.start("thinker", "actor", "tools")
    yield cluster, thinker, actor
    next(gen, None)


def _events(cluster: Cluster, job_id: str) -> list[JobEvent]:
    return cluster.store.read_events(job_id, count=100_000)


@pytest.mark.parametrize("reasoner", ["dual", "mono", "react"])
def test_each_round_starts_before_its_tokens_once(streaming: Hosts, reasoner: str) -> None:
    cluster, _, _ = streaming
    handle = cluster.submit(goal=goal_with_plan(f"order {reasoner}", PLAN), reasoner=reasoner, max_rounds=6)
    result = handle.result(timeout=90)
    assert result.status == "completed", result
    events = _events(cluster, handle.id)

    assert order_problems(events) == []
    kinds = [e.type for e in events]
    rounds = [e.round for e in events if e.type == "round_started"]  # type: ignore[union-attr]
    assert rounds == list(range(result.rounds))
    replies = [e for e in events if e.type == "model_reply"]
    streamed = {(e.round, e.role) for e in events if isinstance(e, ModelDelta)}
    assert streamed == {(e.round, e.role) for e in replies}  # type: ignore[union-attr]
    assert kinds[0] == "job_started" and kinds[-1] == "final"
    # The first delta of each round comes right after its round_started (written together).
    for r in rounds:
        opened = next(i for i, e in enumerate(events) if e.type == "round_started" and e.round == r)  # type: ignore[union-attr]
        first = next(i for i, e in enumerate(events) if isinstance(e, ModelDelta) and e.round == r)
        assert first == opened + 1, (r, kinds[opened : first + 1])


def test_a_stream_that_breaks_is_retried_and_its_round_starts_once(streaming: Hosts) -> None:
    """The Thinker's stream of round 0 breaks after some tokens (a transient failure): the step is
    parked and runs again; its round_started was written with the first attempt's first token and
    is not written again."""
    cluster, thinker, _ = streaming
    goal = goal_with_plan("order broken stream", PLAN[:1])
    broke: list[int] = []

    def breaks_once(request: RecordedRequest) -> Reply:
        reply = thinker_host(request)
        if "order broken stream" in str(request["messages"]) and not broke:
            broke.append(1)
            reply.break_after = 3
        return reply

    thinker.set_script(breaks_once)
    try:
        handle = cluster.submit(goal=goal, max_rounds=4)
        result = handle.result(timeout=90)
    finally:
        thinker.set_script(thinker_host)
    assert result.status == "completed", result
    events = _events(cluster, handle.id)
    assert broke and any(e.type == "waiting" for e in events), [e.type for e in events]
    assert order_problems(events, late_deltas=True) == []
    attempts = {
        e.attempt for e in events if isinstance(e, ModelDelta) and (e.round, e.role) == (0, "thinker")
    }
    assert len(attempts) == 2  # the broken attempt's tokens, then the retried one's
    assert [e.type for e in events].count("round_started") == result.rounds


def test_a_step_run_again_after_its_worker_died_starts_its_round_once(redis_base: str) -> None:
    """The Thinker worker is killed while round 1's reply streams; the step runs again on a new
    worker: round 1's round_started (written with the killed attempt's first token) comes once, before
    both attempts' tokens."""
    gen = _make_cluster(redis_base, TANDEM_LEASE_SECONDS="2", **STREAMING)
    cluster, thinker, actor = next(gen)
    try:

        def slow_round_one(request: RecordedRequest) -> Reply:
            reply = thinker_host(request)
            first_of_round_one = plan_model.turn(request) == 2 and not any(
                plan_model.turn(r) == 2 for r in thinker.requests[:-1]
            )
            reply.chunk_delay = 0.15 if first_of_round_one else 0.0  # the worker is killed during it
            return reply

        thinker.set_script(slow_round_one)
        actor.set_script(any_actor)
        workers = cluster.start("thinker", "actor", "tools")
        handle = cluster.submit(goal=goal_with_plan("order kill", PLAN), max_rounds=6)

        def round_one_deltas() -> list[ModelDelta]:
            return [
                e
                for e in _events(cluster, handle.id)
                if isinstance(e, ModelDelta) and (e.round, e.role) == (1, "thinker")
            ]

        deadline = time.monotonic() + 60
        while len(round_one_deltas()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(round_one_deltas()) >= 2, "the Thinker's round-1 reply never streamed"
        cluster.kill(workers, "thinker")
        cluster.start("thinker")

        result = handle.result(timeout=90)
        assert result.status == "completed", result
        events = _events(cluster, handle.id)
        assert len({d.attempt for d in round_one_deltas()}) >= 2
        assert order_problems(events, late_deltas=True) == []
        assert [e.round for e in events if e.type == "round_started"] == list(range(result.rounds))  # type: ignore[union-attr]
    finally:
        next(gen, None)
