"""Both HTTP clients against ``tandem api`` in process (fakeredis, a Celery app on an in-memory
broker): each request as the client builds it (URL, token) is answered by the app itself."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

from tandem.client.events import Final, JobStarted, ModelDelta
from tandem.client.http import (
    AsyncClient,
    AsyncRemoteJob,
    Client,
    Conflict,
    InvalidRequest,
    NotFound,
    RemoteJob,
    Unauthorized,
    WaitTimeout,
)
from tandem.tasks.job_events import RoundStarted
from tandem.tasks.spec import JobResult, JobSpec
from tests.workers.test_api import TOKEN, Fixture


@pytest.fixture
def api() -> Iterator[tuple[Fixture, Client]]:
    fixture = Fixture()
    with fixture.client:
        yield fixture, Client("http://localhost", retry_for=0.5, transport=fixture.transport())


def test_submit_read_list_and_cancel(api: tuple[Fixture, Client]) -> None:
    _, client = api
    job = client.submit({"goal": "count", "reasoner": "mono"}, max_rounds=3)
    assert isinstance(job, RemoteJob) and job.client is client
    view = job.info()
    assert (view.id, view.status.state, view.status.reasoner, view.result) == (job.id, "queued", "mono", None)
    assert [j.job_id for j in client.jobs()] == [job.id]
    assert job.cancel().state == "cancelled"
    assert client.result(job, timeout=1).status == "cancelled"  # a handle or an id
    with pytest.raises(Conflict) as refused:
        client.cancel(job.id)
    assert (refused.value.status, refused.value.code) == (409, "job_ended")
    assert "already ended (cancelled)" in str(refused.value)


def test_events_run_to_the_final_event_and_resume_after_an_id(api: tuple[Fixture, Client]) -> None:
    fixture, client = api
    ids = fixture.ended_job("done-1")
    events = list(client.events("done-1"))
    assert [e.id for e in events] == ids
    assert [type(e) for e in events] == [JobStarted, RoundStarted, ModelDelta, Final]  # the typed union
    assert events == fixture.store.read_events("done-1")  # the models the direct client reads
    delta, final = events[2], events[-1]
    assert isinstance(delta, ModelDelta) and isinstance(final, Final)
    assert delta.content == "Hel" and final.deliverable == "Hello" and final.result().status == "completed"
    assert [e.id for e in client.events("done-1", after=ids[1])] == ids[2:]
    assert list(client.events("done-1", after=ids[-1])) == []  # ended: nothing more, no wait
    assert client.result("done-1").deliverable == "Hello"


def test_result_follows_the_events_of_a_live_job(api: tuple[Fixture, Client]) -> None:
    fixture, client = api
    fixture.store.create("live", JobSpec(goal="g"))
    fixture.store.set_status("live", state="running")
    with pytest.raises(WaitTimeout, match=re.escape("'live' had not ended after 0.3 s (it is running)")):
        client.result("live", timeout=0.3)
    fixture.store.publish("live", RoundStarted(round=0, max_rounds=1))
    fixture.store.finish(JobResult(job_id="live", status="completed", deliverable="done"), ttl=60)
    assert client.result("live", timeout=5).deliverable == "done"


def test_the_apis_refusals_are_typed_errors(api: tuple[Fixture, Client]) -> None:
    _, client = api
    with pytest.raises(NotFound) as unknown:
        client.job("nope")
    assert unknown.value.code == "unknown_job" and unknown.value.status == 404
    with pytest.raises(InvalidRequest) as bad:
        client.submit(goal="g", max_rounds=0)
    assert bad.value.code == "invalid_spec" and bad.value.fields[0]["field"] == "max_rounds"
    with pytest.raises(InvalidRequest, match="a job needs a goal"):
        client.submit(max_rounds=3)  # refused before any request
    with pytest.raises(NotFound):
        list(client.events("nope"))
    with pytest.raises(InvalidRequest, match="job_id must be a non-empty string"):
        client.job("")


def test_a_job_id_cannot_reach_another_path(api: tuple[Fixture, Client]) -> None:
    _, client = api
    with pytest.raises(NotFound):
        client.cancel("../../v1/jobs")  # quoted: one path segment, an unknown job


def test_a_token_is_sent_and_a_missing_one_is_unauthorized() -> None:
    fixture = Fixture(tokens=(TOKEN,))
    with fixture.client:
        with pytest.raises(Unauthorized) as refused:
            Client("http://localhost", transport=fixture.transport()).jobs()
        assert refused.value.status == 401
        assert Client("http://localhost", TOKEN, transport=fixture.transport()).jobs() == []


# -- the async client ---------------------------------------------------------------------------------


def test_the_async_client_does_what_the_blocking_one_does() -> None:
    fixture = Fixture()
    fixture.ended_job("done-1")

    async def run() -> None:
        async with AsyncClient(
            "http://localhost", retry_for=0.5, transport=fixture.async_transport()
        ) as client:
            events = [e async for e in client.events("done-1")]
            assert events == fixture.store.read_events("done-1")
            assert (await client.result("done-1")).deliverable == "Hello"
            job = await client.submit(goal="g")
            assert isinstance(job, AsyncRemoteJob)
            assert (await job.status()).state == "queued"
            assert (await job.cancel()).state == "cancelled"
            with pytest.raises(Conflict):
                await client.cancel(job)
            with pytest.raises(NotFound):
                await client.job("nope")

    asyncio.run(run())
