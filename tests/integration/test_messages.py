"""A person's messages into running jobs, on real workers: a message sent twice (the same key)
reaches the leading model once, a parked job reads it when it goes on, the Actor of a dual job
does not get it, resume and fork replay it from memory, and an ended job refuses one.

Every job parks in round 0 (its plan calls ``notify``, which needs approval), so a message sent
then is read at the start of round 1 whatever the timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tandem.client.handle import JobHandle
from tandem.reasoner.messages import ModelMessage
from tandem.tasks.errors import MessageRefused
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
HINT = "Round the totals to whole euros."
PARK = [{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]
ADD = [{"name": "add", "args": {"a": 2, "b": 3}}]


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, TANDEM_STALL_SECONDS="2", TANDEM_LEASE_SECONDS="2")
    hosts = next(clusters)
    hosts[2].set_script(actor_host)
    hosts[0].start("thinker", "actor", "tools")
    yield hosts
    next(clusters, None)


def prompts(server: OpenAIServer, marker: str) -> list[str]:
    """The whole input (every message, as JSON) of each request the server got for the job whose
    goal holds ``marker``, in order."""
    texts = [json.dumps(r["messages"]) for r in server.requests]
    return [t for t in texts if marker in t and f"{marker} fork" not in t]


def park(cluster: Cluster, marker: str, plan: list[Any], reasoner: str = "dual", **spec: Any) -> JobHandle:
    handle = cluster.submit(goal=goal_with_plan(marker, plan), reasoner=reasoner, **spec)
    wait_for(lambda: handle.status().state == "awaiting_approval", EVENT_SECONDS, "the job to park")
    return handle


def person_messages(cluster: Cluster, job_id: str) -> list[ModelMessage]:
    messages = cluster.store.memory(job_id).get_messages()
    return [m for m in messages if m.role == "person"]


def test_a_message_sent_twice_reaches_the_thinker_once_when_the_parked_job_goes_on(cluster: Hosts) -> None:
    workers, thinker, actor = cluster
    marker = "message twice"
    handle = park(workers, marker, [PARK, ADD], max_rounds=6)
    first = handle.message(HINT, idempotency_key="hint-1")
    assert handle.message(HINT, idempotency_key="hint-1") == first  # the same key: the first answer
    bare = Celery(broker=workers.url, backend=workers.url)  # by task name, from any Celery client
    kwargs = {"job_id": handle.id, "text": HINT, "idempotency_key": "hint-1"}
    answer = bare.send_task("tandem.message", kwargs=kwargs).get(timeout=RESULT_SECONDS)
    bare.close()
    assert answer == {"job_id": handle.id, "accepted": True, "message_id": first, "round": 1}
    assert handle.status().state == "awaiting_approval"  # a message does not end a pause

    handle.approve()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.rounds == 3
    seen = [p.count(HINT) for p in prompts(thinker, marker)]
    assert seen == [0, 1, 1]  # round 0 before it came; read once at round 1; kept in round 2
    assert all(HINT not in p for p in prompts(actor, marker))  # the Thinker leads a dual job
    [stored] = person_messages(workers, handle.id)
    assert (stored.round, stored.message_id, stored.content) == (1, first, HINT)
    events = [e for e in handle.events(timeout=10) if e.type == "message_received"]
    assert [(e.data["message_id"], e.data["round"], e.data["text"]) for e in events] == [(first, 1, HINT)]

    # Ended: refused, nothing added (the job's keys keep their end-of-job TTL).
    with pytest.raises(MessageRefused, match="has ended") as refused:
        handle.message("too late")
    assert refused.value.reason == "ended"
    assert len(person_messages(workers, handle.id)) == 1

    # A fork keeping rounds 0..1 replays the message to its Thinker in round 2, once.
    fork = handle.fork(2, goal_with_plan(f"{marker} fork", [PARK, ADD]))
    assert fork.result(timeout=RESULT_SECONDS).status == "completed"
    forked = [json.dumps(r["messages"]) for r in thinker.requests]
    forked = [t for t in forked if f"{marker} fork" in t]
    assert [t.count(HINT) for t in forked] == [1]
    assert [m.message_id for m in person_messages(workers, fork.id)] == [first]


def test_a_mono_model_reads_the_message_and_resume_replays_it(cluster: Hosts) -> None:
    workers, _, actor = cluster
    marker = "message mono resume"
    handle = park(workers, marker, [PARK, ADD, ADD], reasoner="mono", max_rounds=2)
    message_id = handle.message(HINT)
    handle.approve()
    assert handle.result(timeout=RESULT_SECONDS).status == "truncated"
    assert [p.count(HINT) for p in prompts(actor, marker)] == [0, 1]

    handle.resume(max_rounds=6)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [p.count(HINT) for p in prompts(actor, marker)] == [0, 1, 1, 1]
    assert [m.message_id for m in person_messages(workers, handle.id)] == [message_id]


def test_the_cli_sends_a_message_and_an_ended_job_refuses_it(cluster: Hosts) -> None:
    workers, thinker, _ = cluster
    marker = "message cli"
    handle = park(workers, marker, [PARK], max_rounds=4)
    env = {**os.environ, **workers.env}
    cli = [sys.executable, "-m", "tandem.workers.cli", "message", handle.id, HINT, "--key", "cli-1"]
    done = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"message {handle.id}:message:0001 stored" in done.stdout
    handle.approve()
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [p.count(HINT) for p in prompts(thinker, marker)] == [0, 1]

    done = subprocess.run([*cli[:-2], "--key", "cli-2"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "message refused (ended)" in done.stderr
    assert len(person_messages(workers, handle.id)) == 1
