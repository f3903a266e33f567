"""``tandem.Client`` and ``tandem.AsyncClient`` built as docs/api.md builds them, from a URL and a
token, against a real ``tandem api`` process and real workers.

Every scenario is written once, in the async shape, and runs for both clients: ``AsyncClient`` as
it is, ``Client`` behind ``Blocking`` (each call made as is, blocking; its ``events`` read one by
one). Nothing here hands a client a ready-made connection: each request is the one the client
built. The 503 a read rides out comes from the API itself, with its Redis stopped; the test only
watches the answers go by (``Watching``) to know the read saw one before Redis comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from tandem import AsyncClient, Client
from tandem.client.events import (
    ApprovalRequested,
    Final,
    JobStarted,
    MessageReceived,
    QuestionAsked,
    ToolCall,
    ToolResult,
)
from tandem.client.http import ConnectionFailed, RemoteJob, Unauthorized
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import free_port
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_api_redis_restart import OwnRedis, own_redis  # noqa: F401 (a fixture)
from tests.integration.test_decide import any_host

pytestmark = pytest.mark.integration

TOKEN = "http-clients-test-token-0123"
ADD = [{"name": "add", "args": {"a": 2, "b": 3}}]
PARK = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
COLOUR = {"type": "string", "enum": ["teal-4471", "amber-9032"]}
ASK = [[{"name": "ask_person", "args": {"question": "Which colour?", "answer_schema": COLOUR}}]]
DRIVERS = ["sync", "async"]


class Setup:
    """The workers, their Redis and the API process of this module."""

    def __init__(self, cluster: Cluster, api: ApiProcess) -> None:
        self.cluster = cluster
        self.url = api.url


@pytest.fixture(scope="module")
def setup(redis_base: str) -> Iterator[Setup]:
    clusters = _make_cluster(
        redis_base, TANDEM_API_TOKENS=TOKEN, TANDEM_STALL_SECONDS="2", TANDEM_LEASE_SECONDS="2"
    )
    cluster, _, actor = next(clusters)
    actor.set_script(any_host)
    cluster.start("thinker", "actor", "tools")
    api = ApiProcess(cluster.env)
    try:
        yield Setup(cluster, api)
    finally:
        api.stop()
        next(clusters, None)  # stops the workers: fails if one exited by itself


# -- one scenario, both clients --------------------------------------------------------------


async def _each(iterator: Iterator[Any]) -> AsyncIterator[Any]:
    try:
        for item in iterator:
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


class Blocking:
    """``Client`` (or a ``RemoteJob``) in the shape of ``AsyncClient``: each call is made as is,
    blocking, and its value handed back awaited; ``events`` gives the sync iterator's events."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.target, name)
        if not callable(value):
            return value
        if name == "events":
            return lambda *args, **kwargs: _each(value(*args, **kwargs))

        async def call(*args: Any, **kwargs: Any) -> Any:
            got = value(*args, **kwargs)
            return Blocking(got) if isinstance(got, RemoteJob) else got

        return call


@asynccontextmanager
async def connect(driver: str, url: str, token: str = TOKEN, **options: Any) -> AsyncIterator[Any]:
    """A client of ``driver`` built as docs/api.md builds it: ``Client(url, token)``."""
    if driver == "async":
        async with AsyncClient(url, token, **options) as api:
            yield api
    else:
        with Client(url, token, **options) as api:
            yield Blocking(api)


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())


async def until(job: Any, kind: str) -> Any:
    """The job's first event of ``kind``, read from its stream as it comes."""
    async for event in job.events():
        if event.type == kind:
            return event
        assert event.type != "final", f"job {job.id} ended before any {kind}: {event}"
    raise AssertionError(f"the events of job {job.id} ended without {kind}")


# -- the scenarios -------------------------------------------------------------------------


def docs_examples() -> list[str]:
    """The first two Python examples of docs/api.md's "From Python over HTTP": one per client."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = page.split("## From Python over HTTP", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)[:2]


@pytest.mark.parametrize("index", [0, 1], ids=["Client", "AsyncClient"])
def test_the_docs_examples_run_as_written(index: int, setup: Setup) -> None:
    example = docs_examples()[index]
    assert ("AsyncClient(" in example) == (index == 1) and "TOKEN" in example
    code = example.replace("http://127.0.0.1:8000", setup.url)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"docs/api.md example {index + 1}", "exec"), {"TOKEN": TOKEN})
    assert printed.getvalue().rstrip().endswith("completed all planned calls ran")



@pytest.mark.parametrize("driver", DRIVERS)
def test_submit_gives_a_handle_its_events_are_typed_and_the_direct_clients(driver: str, setup: Setup) -> None:
    async def scenario() -> tuple[Any, list[Any], Any, Any]:
        async with connect(driver, setup.url) as api:
            job = await api.submit(goal=goal_with_plan("add over http", [ADD]), max_rounds=5)
            events = [e async for e in job.events()]
            outcome = await job.result(timeout=120)
            return job, events, outcome, await api.result(job.id)

    job, events, outcome, by_id = run(scenario)
    assert isinstance(events[0], JobStarted) and isinstance(events[-1], Final)
    assert [type(e) for e in events if isinstance(e, ToolCall | ToolResult)] == [ToolCall, ToolResult]
    assert events == setup.cluster.store.read_events(job.id, count=1000)  # the same typed models
    assert (outcome.status, outcome.deliverable) == ("completed", "all planned calls ran")
    assert events[-1].result().deliverable == outcome.deliverable == by_id.deliverable


@pytest.mark.parametrize("driver", DRIVERS)
def test_cancel_a_running_job(driver: str, setup: Setup) -> None:
    async def scenario() -> tuple[str, Any]:
        async with connect(driver, setup.url) as api:
            job = await api.submit(goal=goal_with_plan("slow NEVER_DONE", [ADD] * 50), max_rounds=40)
            await until(job, "tool_result")
            cancelled = await job.cancel()
            return cancelled.state, await job.result(timeout=120)

    state, outcome = run(scenario)
    assert state in {"running", "cancelled"}  # the flag is set; the job ends at its next step
    assert outcome.status == "cancelled"


@pytest.mark.parametrize("driver", DRIVERS)
def test_resume_a_truncated_job_and_fork_it(driver: str, setup: Setup) -> None:
    async def scenario() -> tuple[Any, str, Any, Any, str]:
        async with connect(driver, setup.url) as api:
            job = await api.submit(goal=goal_with_plan("two rounds", [ADD, ADD]), max_rounds=1)
            truncated = await job.result(timeout=120)
            resumed = await job.resume(max_rounds=4)
            done = await api.result(job, timeout=120)  # a handle where an id goes
            fork = await job.fork(1, goal=goal_with_plan("forked", [ADD]), max_rounds=4)
            return truncated, resumed.state, done, await fork.result(timeout=120), fork.id

    truncated, resumed, done, forked, fork_id = run(scenario)
    assert (truncated.status, truncated.rounds) == ("truncated", 1)
    assert resumed in {"queued", "running"}
    assert (done.status, done.deliverable) == ("completed", "all planned calls ran")
    assert forked.status == "completed" and forked.job_id == fork_id


@pytest.mark.parametrize("driver", DRIVERS)
def test_decide_and_approve_a_parked_job(driver: str, setup: Setup) -> None:
    async def scenario() -> tuple[Any, list[Any], Any]:
        async with connect(driver, setup.url) as api:
            job = await api.submit(
                goal=goal_with_plan("approval over http", PARK), reasoner="mono", max_rounds=4
            )
            asked = await until(job, "approval_requested")
            decided = await job.decide([{"index": 2, "approve": False, "reason": "not now"}])
            return asked, decided, await job.result(timeout=120)

    asked, decided, outcome = run(scenario)
    assert isinstance(asked, ApprovalRequested) and [p.tool for p in asked.pending] == ["notify"]
    assert decided[0]["index"] == 2 and decided[0]["approve"] is False
    assert outcome.status == "completed"

    async def approve() -> Any:
        async with connect(driver, setup.url) as api:
            job = await api.submit(goal=goal_with_plan("approve all", PARK), reasoner="mono", max_rounds=4)
            await until(job, "approval_requested")
            assert [d["approve"] for d in await api.approve(job.id)] == [True]
            return await job.result(timeout=120)

    assert run(approve).status == "completed"


@pytest.mark.parametrize("driver", DRIVERS)
def test_answer_a_question(driver: str, setup: Setup) -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        async with connect(driver, setup.url) as api:
            goal = goal_with_plan("question over http", ASK)
            job = await api.submit(goal=goal, reasoner="mono", max_rounds=4, ask_person=True)
            asked = await until(job, "question_asked")
            stored = await job.answer("teal-4471")
            return asked, stored, await job.result(timeout=120)

    asked, stored, outcome = run(scenario)
    assert isinstance(asked, QuestionAsked) and asked.question == "Which colour?"
    assert stored == "teal-4471" and outcome.status == "completed"


@pytest.mark.parametrize("driver", DRIVERS)
def test_message_follow_up_and_thread(driver: str, setup: Setup) -> None:
    async def scenario() -> tuple[str, Any, Any, list[str], list[str], str]:
        async with connect(driver, setup.url) as api:
            job = await api.submit(goal=goal_with_plan("talk over http", PARK), max_rounds=4)
            await until(job, "approval_requested")
            message_id = await job.message("Round the totals to whole euros.")
            await job.approve()
            received = await until(job, "message_received")
            outcome = await job.result(timeout=120)
            follow = await job.follow_up(goal_with_plan("and once more", [ADD]))
            await follow.result(timeout=120)
            by_handle = [j.job_id for j in await follow.thread()]
            by_id = [j.job_id for j in await api.thread(job.id)]
            return message_id, received, outcome, by_handle, by_id, follow.id

    message_id, received, outcome, by_handle, by_id, follow_id = run(scenario)
    assert isinstance(received, MessageReceived) and received.message_id == message_id
    assert received.text == "Round the totals to whole euros." and outcome.status == "completed"
    assert by_handle == by_id and by_id[-1] == follow_id and len(by_id) == 2


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_wrong_token_is_unauthorized_and_an_unreachable_url_fails_clearly(
    driver: str, setup: Setup
) -> None:
    async def wrong() -> None:
        async with connect(driver, setup.url, "a-wrong-token-0123456789") as api:
            await api.jobs()

    with pytest.raises(Unauthorized) as refused:
        run(wrong)
    assert refused.value.status == 401

    url = f"http://127.0.0.1:{free_port()}"

    async def nowhere() -> None:
        async with connect(driver, url, retry_for=0.5) as api:
            await api.status("some-job")

    with pytest.raises(ConnectionFailed, match=f"the tandem API at {url} does not answer"):
        run(nowhere)


# -- a read rides out a 503 ----------------------------------------------------------------


class Watching(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """httpx's own transport, noting the status of each answer (it builds nothing, changes nothing)."""

    def __init__(self) -> None:
        self.sync = httpx.HTTPTransport()
        self.aio = httpx.AsyncHTTPTransport()
        self.statuses: list[int] = []
        self.saw_503 = threading.Event()

    def _note(self, response: httpx.Response) -> httpx.Response:
        self.statuses.append(response.status_code)
        if response.status_code == 503:
            self.saw_503.set()
        return response

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._note(self.sync.handle_request(request))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return self._note(await self.aio.handle_async_request(request))


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_read_rides_out_a_503(driver: str, own_redis: OwnRedis) -> None:  # noqa: F811
    url = own_redis.url
    env = {"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}
    api = ApiProcess({**env, "TANDEM_API_TOKENS": TOKEN})
    JobStore(Redis.from_url(url)).create("job-503", JobSpec(goal="g"))
    watching = Watching()
    try:
        own_redis.stop()  # the API answers 503 (redis_unavailable) until it is back
        restarted = threading.Thread(target=lambda: watching.saw_503.wait(60) and own_redis.start())
        restarted.start()

        async def read() -> Any:
            async with connect(driver, api.url, transport=watching, retry_for=60) as client:
                return await client.status("job-503")

        try:
            status = run(read)
        finally:
            restarted.join(90)
    finally:
        api.stop()
    assert status.job_id == "job-503" and status.state == "queued"
    assert 503 in watching.statuses and watching.statuses[-1] == 200
