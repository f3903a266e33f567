"""Resume and fork with real workers: a failed job goes on without repeating a stored model or tool
call, a truncated one with a raised budget, a fork runs the rest of a job and leaves it untouched,
and refusals (running, completed, unknown and expired jobs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.errors import ResumeRefused
from tests.integration import plan_model
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
ADD = [[{"name": "add", "args": {"a": 1, "b": 2}}], [{"name": "add", "args": {"a": 2, "b": 3}}]]


@pytest.fixture
def hosts(dual_cluster: Hosts) -> Iterator[Hosts]:
    yield dual_cluster
    dual_cluster[1].set_script(plan_model.thinker)


def asked(server: OpenAIServer, marker: str) -> list[int]:
    """The model turn (1, 2, ...) of every request the server got for the job whose goal holds
    ``marker``, in order."""
    return [plan_model.turn(r) for r in server.requests if marker in json.dumps(r["messages"])]


def adds(cluster: Cluster, job_id: str) -> list[tuple[int, int]]:
    """(round, call index) of every run of the ``add`` tool for the job."""
    calls = cluster.tool_calls()
    return [(c["round"], c["index"]) for c in calls if c["job"] == job_id and c["name"] == "add"]


def started(cluster: Cluster, job: JobHandle, timeout: float = 60.0) -> None:
    """Wait until a worker has started the job (its spec is stored)."""
    deadline = time.monotonic() + timeout
    while cluster.store.spec(job.id) is None:
        assert time.monotonic() < deadline, f"job {job.id} did not start"
        time.sleep(0.05)


def test_a_failed_job_resumes_without_repeating_a_stored_call(hosts: Hosts) -> None:
    cluster, thinker, actor = hosts
    marker = "resume-after-401"
    down = {"now": True}

    def host(request: RecordedRequest) -> Reply:
        if down["now"] and plan_model.turn(request) == 2 and marker in json.dumps(request["messages"]):
            return Reply(status=401, error="invalid api key")
        return plan_model.thinker(request)

    thinker.set_script(host)
    handle = cluster.submit(goal=goal_with_plan(marker, ADD), max_rounds=6)
    failed = handle.result(timeout=RESULT_SECONDS)
    assert failed.status == "failed" and "401" in (failed.error or ""), failed
    assert asked(thinker, marker) == [1, 2] and asked(actor, marker) == [1]
    assert adds(cluster, handle.id) == [(0, 1)]

    down["now"] = False  # the host is back
    assert handle.resume() is handle
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.deliverable == "all planned calls ran"
    # Round 0's Thinker, Actor and tool call ran once; round 1's Thinker is the call that failed.
    assert asked(thinker, marker) == [1, 2, 2, 3]
    assert asked(actor, marker) == [1, 2, 3]
    assert adds(cluster, handle.id) == [(0, 1), (1, 1)]
    assert cluster.app.AsyncResult(handle.id).get(timeout=10)["status"] == "completed"
    events = list(handle.events(timeout=10))
    kinds = [e.type for e in events]
    assert kinds.count("final") == 2 and kinds[-1] == "final"
    resumed = [e for e in events if e.type == "job_started" and e.data.get("resumed")]
    assert len(resumed) == 1 and (resumed[0].data["round"], resumed[0].data["step"]) == (1, "thinker")
    with pytest.raises(ResumeRefused, match="is completed: nothing to resume"):
        handle.resume()


def test_a_job_whose_deadline_passed_resumes_with_a_fresh_deadline(hosts: Hosts) -> None:
    cluster, thinker, actor = hosts
    marker = "deadline-then-back"
    down = {"now": True}

    def host(request: RecordedRequest) -> Reply:
        if down["now"] and plan_model.turn(request) == 2 and marker in json.dumps(request["messages"]):
            return Reply(status=503, error="overloaded")
        return plan_model.thinker(request)

    thinker.set_script(host)
    handle = cluster.submit(goal=goal_with_plan(marker, ADD), max_rounds=6, timeout_s=6)
    failed = handle.result(timeout=RESULT_SECONDS)
    assert failed.status == "failed" and "deadline" in (failed.error or ""), failed
    refused_turns = asked(thinker, marker).count(2)
    assert refused_turns >= 1 and asked(actor, marker) == [1]

    down["now"] = False
    handle.resume()
    record = cluster.store.machine.record(handle.id)
    assert float(record["deadline"]) > float(record["updated_at"])  # a new deadline, 6 s on
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert asked(thinker, marker).count(1) == 1 and asked(actor, marker) == [1, 2, 3]
    assert asked(thinker, marker).count(2) == refused_turns + 1
    assert adds(cluster, handle.id) == [(0, 1), (1, 1)]


def test_a_truncated_job_resumes_with_a_raised_budget_from_the_cli(hosts: Hosts) -> None:
    cluster, thinker, actor = hosts
    marker = "truncated-then-raised"
    plan = [*ADD, [{"name": "add", "args": {"a": 5, "b": 5}}]]
    handle = cluster.submit(goal=goal_with_plan(marker, plan), max_rounds=2)
    assert handle.result(timeout=RESULT_SECONDS).status == "truncated"
    assert adds(cluster, handle.id) == [(0, 1)]  # round 1 was the last: its call did not run
    with pytest.raises(ResumeRefused, match=r"would end truncated again.*max_rounds above 2"):
        handle.resume()

    cli = [sys.executable, "-m", "tandem.workers.cli", "resume", handle.id, "--max-rounds", "6", "--json"]
    env = {**os.environ, **cluster.env}
    done = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job {handle.id} resumed" in done.stdout
    assert "job resumed at the tools step of round 2: dual reasoner, up to 6 rounds" in done.stdout
    assert json.loads(done.stdout[done.stdout.index("{\n") :])["status"] == "completed"
    assert handle.result(timeout=5).rounds == 4
    assert asked(thinker, marker) == [1, 2, 3, 4] and asked(actor, marker) == [1, 2, 3, 4]
    assert adds(cluster, handle.id) == [(0, 1), (1, 1), (2, 1)]
    assert cluster.store.spec(handle.id).max_rounds == 6  # type: ignore[union-attr]


def test_a_fork_runs_the_rest_and_leaves_the_job_untouched(hosts: Hosts) -> None:
    cluster, thinker, actor = hosts
    marker = "fork-source"
    source = cluster.submit(goal=goal_with_plan(marker, ADD), max_rounds=6)
    first = source.result(timeout=RESULT_SECONDS)
    assert (first.status, first.rounds) == ("completed", 3)
    memory_key = cluster.store.key(source.id, "memory")
    before = cluster.redis.hgetall(memory_key)

    other = "fork-with-a-new-goal"
    new_plan = [ADD[0], [{"name": "add", "args": {"a": 40, "b": 2}}]]
    forked = source.fork(1, goal_with_plan(other, new_plan))
    assert isinstance(forked, JobHandle) and forked.id != source.id
    result = forked.result(timeout=RESULT_SECONDS)
    assert (result.status, result.rounds) == ("completed", 3), result
    # Round 0 came from the source; the fork asked the models for rounds 1 and 2 only.
    assert asked(thinker, other) == [2, 3] and asked(actor, other) == [2, 3]
    fork_calls = [c for c in cluster.tool_calls() if c["job"] == forked.id]
    assert [(c["round"], c["name"]) for c in fork_calls] == [(1, "add")]
    assert "42" in forked_tool_output(cluster, forked.id)
    # The source is untouched.
    assert cluster.redis.hgetall(memory_key) == before
    assert source.status().state == "completed" and source.result(timeout=1) == first
    assert asked(thinker, marker) == [1, 2, 3]


def forked_tool_output(cluster: Cluster, job_id: str) -> str:
    tool = cluster.store.memory(job_id).get_message(1, "tool")
    return tool.content if tool else ""


def test_refusals_running_unknown_and_expired_jobs(hosts: Hosts) -> None:
    cluster, _, _ = hosts
    running = cluster.submit(goal="NEVER_DONE refusals", max_rounds=50)
    started(cluster, running)
    try:
        not_ended = rf"job '{running.id}' is (running|waiting), not ended"
        with pytest.raises(ResumeRefused, match=not_ended) as exc:
            running.resume()
        assert exc.value.reason == "state"
        with pytest.raises(ResumeRefused, match="not ended: only an ended job can be forked"):
            running.fork(1)
    finally:
        running.cancel()
    assert running.result(timeout=RESULT_SECONDS).status == "cancelled"

    with pytest.raises(ResumeRefused, match=r"no job 'no-such-job' is known .*its records expired") as exc:
        JobHandle("no-such-job", cluster.store, cluster.app).resume()
    assert exc.value.reason == "unknown"
    for part in ("spec", "memory"):  # what TANDEM_MEMORY_TTL does to an ended job
        cluster.redis.delete(cluster.store.key(running.id, part))
    for ask in (running.resume, lambda: running.fork(1)):
        with pytest.raises(ResumeRefused, match=f"no job {running.id!r} is known") as exc:
            ask()
        assert exc.value.reason == "unknown"


def test_two_resumes_at_once_reopen_the_job_once(hosts: Hosts) -> None:
    cluster, _, _ = hosts
    job = cluster.submit(goal="NEVER_DONE twice", max_rounds=50)
    started(cluster, job)  # a job cancelled while queued never stored a spec: nothing to resume
    job.cancel()
    assert job.result(timeout=RESULT_SECONDS).status == "cancelled"
    sent = [cluster.app.send_task("tandem.resume", kwargs={"job_id": job.id}) for _ in range(2)]
    answers: list[dict[str, Any]] = [s.get(timeout=RESULT_SECONDS) for s in sent]
    assert sorted(a["accepted"] for a in answers) == [False, True], answers
    assert "not ended" in next(a["error"] for a in answers if not a["accepted"])
    assert cluster.store.machine.record(job.id)["resumes"] == "1"
    job.cancel()
    assert job.result(timeout=RESULT_SECONDS).status == "cancelled"
