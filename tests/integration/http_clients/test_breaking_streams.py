"""Breaking tests of ``tandem.Client`` and ``tandem.AsyncClient``, written from docs/api.md alone:
event streams. A stream cut mid-frame, silent, trickled byte by byte, carrying an event type no
client knows, or losing its API process resumes after its last whole event; one ``AsyncClient``
serves many tasks and holds every stream its token may; a busy API's own 429 and 503 (one stream
per token, one job followed); closing a client frees the streams it left open.

The package's docstring says how they are built and run (``tests.integration.http_clients``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from tandem import Client
from tandem.client import events as ev
from tandem.client import http
from tests.integration.http_clients.fault_proxy import FaultProxy, Rule
from tests.integration.http_clients.faults import newer_worker_stream, resumed_from
from tests.integration.http_clients.tasks import hundred_streams, many_jobs
from tests.integration.http_clients.world import (
    ADD,
    ADD_TWICE,
    FULL,
    NOTIFY,
    OTHER,
    READER,
    SILENCE,
    ApiProcess,
    Side,
    World,
    handle_events,
    hold_stream,
    in_background,
    parked_job,
    spec,
)

pytestmark = pytest.mark.integration


# -- event streams that drop, stall, or lose their API ---------------------------------------------


@pytest.mark.parametrize("fault", ["cut", "stall"])
def test_an_event_stream_cut_or_silent_resumes_after_its_last_whole_event(
    world: World, proxy: FaultProxy, side: Side, fault: str
) -> None:
    """``cut``: two events then the connection cut mid-frame, then three more and cut again.
    ``stall``: two events then nothing, not even heartbeats: asked again after ``stream_silence``
    seconds of silence (``SILENCE`` here: five of this world's heartbeats; 45 s by default)."""
    api = side.client(proxy.url, retry_for=60, stream_silence=SILENCE)
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


# -- many tasks and streams on one client ----------------------------------------------------------


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


# -- a busy API: 429 and 503 of its own; closing frees its streams ---------------------------------


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
