"""Threads on real workers: a follow-up on an ended job is a new job in its thread that reads the
earlier jobs' goals, the person's messages and answers; the thread lists its jobs in order; the
same key gives the same follow-up; a running job, and another tenant, are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tandem.tasks.control.threads import thread_jobs
from tandem.tasks.errors import ResumeRefused
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
ADD = [[{"name": "add", "args": {"a": 1, "b": 2}}]]
PARK = [[{"name": "notify", "args": {"to": "ops"}}]]


def first_prompt(server: OpenAIServer, marker: str) -> str:
    """The whole input of the first request for the job whose goal holds ``marker``."""
    texts = [json.dumps(r["messages"]) for r in server.requests]
    return next(t for t in texts if marker in t)


def test_a_follow_up_reads_the_thread_and_the_thread_lists_its_jobs(dual_cluster: Hosts) -> None:
    cluster, thinker, _ = dual_cluster
    first = cluster.submit(goal=goal_with_plan("thread first", ADD), max_rounds=4)
    assert first.result(timeout=RESULT_SECONDS).deliverable == "all planned calls ran"

    second = first.follow_up(goal_with_plan("thread second", []), idempotency_key="f-1")
    assert first.follow_up(goal_with_plan("thread second", []), idempotency_key="f-1").id == second.id
    done = second.result(timeout=RESULT_SECONDS)
    assert done.status == "completed" and done.owner == first.status().owner
    spec = cluster.store.spec(second.id)
    assert spec is not None and spec.thread_id == first.id and spec.max_rounds == 4
    seen = first_prompt(thinker, "thread second")
    assert f'<thread id=\\"{first.id}\\">' in seen
    assert "<goal>thread first" in seen and "<answer>all planned calls ran</answer>" in seen
    assert "dropped" not in seen

    third = second.follow_up(goal_with_plan("thread third", []))
    assert third.result(timeout=RESULT_SECONDS).status == "completed"
    seen = first_prompt(thinker, "thread third")
    assert seen.count("<earlier_job") == 2 and "<goal>thread second" in seen
    jobs = thread_jobs(cluster.store, first.id, "default")
    assert [j.job_id for j in jobs] == [first.id, second.id, third.id]
    assert [j.state for j in jobs] == ["completed"] * 3
    assert jobs[1].goal.startswith("thread second") and jobs[0].deliverable == "all planned calls ran"
    assert cluster.redis.ttl(f"{cluster.settings.prefix}:{{{first.id}}}:thread") > 0

    # Another tenant: refused as unknown, and the thread shows it nothing.
    first.owner = "team-b"
    with pytest.raises(ResumeRefused) as foreign:
        first.follow_up("steal the thread")
    assert foreign.value.reason == "unknown"
    assert thread_jobs(cluster.store, first.id, "team-b") == []
    assert len(thread_jobs(cluster.store, first.id, "default")) == 3


def test_a_running_job_refuses_a_follow_up_and_the_cli_starts_one(dual_cluster: Hosts) -> None:
    cluster, thinker, _ = dual_cluster
    parked = cluster.submit(goal=goal_with_plan("thread parked", PARK), max_rounds=3)
    wait_for(lambda: parked.status().state == "awaiting_approval", EVENT_SECONDS, "the job to park")
    with pytest.raises(ResumeRefused, match="send it a message instead") as refused:
        parked.follow_up("too soon")
    assert refused.value.reason == "state"
    parked.message("Mention the ops team by name.")
    parked.approve()
    assert parked.result(timeout=RESULT_SECONDS).status == "completed"

    env = {**os.environ, **cluster.env}
    cli = [
        sys.executable,
        "-m",
        "tandem.workers.cli",
        "follow-up",
        parked.id,
        goal_with_plan("thread cli", []),
    ]
    done = subprocess.run([*cli, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"follows up on {parked.id} (thread {parked.id})" in done.stdout
    assert json.loads(done.stdout[done.stdout.index("{\n") :])["status"] == "completed"
    seen = first_prompt(thinker, "thread cli")
    assert "Mention the ops team by name." in seen  # the person's message, in the thread
    assert [j.goal.split(" PLAN")[0] for j in thread_jobs(cluster.store, parked.id)] == [
        "thread parked",
        "thread cli",
    ]


@pytest.fixture
def small_threads(redis_base: str) -> Iterator[Hosts]:
    """Workers that give a follow-up at most 300 characters of its thread."""
    clusters = _make_cluster(redis_base, TANDEM_MAX_THREAD_CHARS="300")
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools")
    yield hosts
    next(clusters, None)


def test_a_follow_up_over_the_bound_reads_the_newest_and_says_what_was_dropped(small_threads: Hosts) -> None:
    cluster, thinker, _ = small_threads
    first = cluster.submit(goal=goal_with_plan("thread long " + "x" * 400, ADD), max_rounds=4)
    assert first.result(timeout=RESULT_SECONDS).status == "completed"
    second = first.follow_up(goal_with_plan("thread short", []))
    assert second.result(timeout=RESULT_SECONDS).status == "completed"
    seen = first_prompt(thinker, "thread short")
    context = seen[seen.index("<thread id=") : seen.index("</thread>")]
    assert "[1 earlier message(s) of this thread dropped to keep it within 300 characters" in context
    assert "x" * 400 not in context and "<answer>all planned calls ran</answer>" in context
