"""Live tokens across a worker's death: the step's new model call streams under a new ``attempt``,
and the deltas of the attempt that was stored add up to the stored reply."""

from __future__ import annotations

import time

import pytest

from tandem.tasks.job_events import ModelDelta, ModelReply
from tests.integration import plan_model
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


def test_a_thinker_killed_mid_stream_restarts_its_reply_under_a_new_attempt(fresh_cluster: Hosts) -> None:
    cluster, thinker, _ = fresh_cluster

    def slow_stream(request: RecordedRequest) -> Reply:
        reply = plan_model.thinker(request)
        reply.chunk_size = 8
        first_of_round_one = plan_model.turn(request) == 2 and not any(
            plan_model.turn(r) == 2 for r in thinker.requests[:-1]
        )
        reply.chunk_delay = 0.15 if first_of_round_one else 0.0  # the worker is killed during it
        return reply

    thinker.set_script(slow_stream)
    workers = cluster.start("thinker", "actor", "tools", TANDEM_THINKER_STREAM="true")
    plan = [[{"name": "add", "args": {"a": 1, "b": 1}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("two rounds", plan), max_rounds=6)

    def round_one_deltas() -> list[ModelDelta]:
        return [
            e
            for e in cluster.store.read_events(handle.id, count=100_000)
            if isinstance(e, ModelDelta) and (e.round, e.role) == (1, "thinker")
        ]

    deadline = time.monotonic() + 60
    while len(round_one_deltas()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(round_one_deltas()) >= 2, "the Thinker's round-1 reply never streamed"
    cluster.kill(workers, "thinker")
    cluster.start("thinker", TANDEM_THINKER_STREAM="true")

    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    events = list(handle.events(timeout=30))
    replies = [e for e in events if isinstance(e, ModelReply) and (e.round, e.role) == (1, "thinker")]
    assert len(replies) == 1  # stored and published once
    deltas = [e for e in events if isinstance(e, ModelDelta) and (e.round, e.role) == (1, "thinker")]
    attempts = list(dict.fromkeys(d.attempt for d in deltas))
    assert len(attempts) >= 2, "the replacement's call should stream under a new attempt"
    killed = [d for d in deltas if d.attempt == attempts[0]]
    assert "".join(d.content for d in killed) != replies[0].content  # cut off mid-reply
    # Under load a model call may run twice (a starved heartbeat): the reply stored is one
    # attempt's, and that attempt's deltas, in order, are the reply.
    by_attempt = {a: [d for d in deltas if d.attempt == a] for a in attempts[1:]}
    stored = [
        a
        for a, ds in by_attempt.items()
        if "".join(d.content for d in ds) == replies[0].content
        and "".join(d.reasoning for d in ds) == replies[0].reasoning
    ]
    assert stored, "no attempt's deltas add up to the stored reply"
    chosen = by_attempt[stored[0]]
    assert [d.seq for d in chosen] == list(range(len(chosen)))
    assert events.index(chosen[-1]) < events.index(replies[0])
