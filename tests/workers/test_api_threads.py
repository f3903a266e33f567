"""``GET /v1/threads/{id}`` and ``POST /v1/jobs/{id}/follow-up`` (fakeredis; the follow-up's worker
answer stubbed): a thread lists the tenant's jobs in order, another tenant gets 404 for the thread
and for a follow-up, a running job's follow-up is 409, a missing scope 403; ``Client.thread``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.tokens import ApiToken
from tandem.client.http import AsyncClient, Client, NotFound
from tandem.tasks.control.threads import index_job
from tandem.tasks.spec import JobResult, JobSpec
from tests.workers.test_api import Fixture
from tests.workers.test_api_decisions import _Sent

A, B, READER = (f"token-{name}-0123456789" for name in ("a", "b", "reader"))
TOKENS = (
    ApiToken(A, "team-a", frozenset({"submit", "read", "control"})),
    ApiToken(B, "team-b", frozenset({"submit", "read", "control"})),
    ApiToken(READER, "team-a", frozenset({"read"})),
)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fixture]:
    fixture = Fixture(api=ApiSettings(tokens=TOKENS))
    fixture.sent = []  # type: ignore[attr-defined]

    def send_task(name: str, kwargs: dict[str, Any], **_: Any) -> _Sent:
        fixture.sent.append((name, kwargs))  # type: ignore[attr-defined]
        assert name == "tandem.follow_up"
        job = kwargs["job_id"]
        if fixture.store.status(job).state not in ("completed", "failed"):  # type: ignore[union-attr]
            return _Sent(
                {
                    "job_id": job,
                    "accepted": False,
                    "reason": "state",
                    "error": f"job {job!r} is still running",
                }
            )
        ended(fixture, "t2", "second", owner=kwargs["owner"], thread="t1", state="running")
        return _Sent({"job_id": job, "accepted": True, "follow_up_id": "t2", "thread_id": "t1", "dropped": 0})

    monkeypatch.setattr(fixture.celery, "send_task", send_task)
    ended(fixture, "t1", "first", owner="team-a")
    index_job(fixture.store, "t1", "t1", 600, at=1.0)
    with fixture.client:
        yield fixture


def ended(
    api: Fixture, job_id: str, goal: str, *, owner: str, thread: str | None = None, state: str = "completed"
) -> None:
    api.store.create(job_id, JobSpec(goal=goal, owner=owner, thread_id=thread))
    api.store.mark_queued(job_id, owner=owner)
    if state == "completed":
        api.store.finish(
            JobResult(job_id=job_id, status="completed", deliverable=f"{goal} done", owner=owner)
        )
    else:
        api.store.set_status(job_id, state=state)
    if thread is not None:
        index_job(api.store, thread, job_id, 600, at=2.0)


def test_a_follow_up_is_202_in_the_thread_and_the_thread_lists_both(api: Fixture) -> None:
    made = api.client.post("/v1/jobs/t1/follow-up", json={"goal": "second"}, headers=auth(A))
    assert made.status_code == 202, made.text
    body = made.json()
    assert (body["id"], body["follow_up_of"], body["thread_id"]) == ("t2", "t1", "t1")
    assert made.headers["location"] == "/v1/jobs/t2"
    [(_, kwargs)] = api.sent  # type: ignore[attr-defined]
    assert kwargs["owner"] == "team-a" and kwargs["goal"] == "second" and "idempotency_key" not in kwargs
    thread = api.client.get("/v1/threads/t1", headers=auth(A))
    assert thread.status_code == 200
    jobs = thread.json()["jobs"]
    assert [(j["job_id"], j["goal"], j["state"]) for j in jobs] == [
        ("t1", "first", "completed"),
        ("t2", "second", "running"),
    ]
    assert jobs[0]["deliverable"] == "first done"
    client = Client("http://localhost", token=A, transport=api.transport())
    assert [j.job_id for j in client.thread("t1")] == ["t1", "t2"]


def test_another_tenant_gets_404_for_the_thread_and_a_follow_up(api: Fixture) -> None:
    thread = api.client.get("/v1/threads/t1", headers=auth(B))
    assert thread.status_code == 404 and thread.json()["error"]["code"] == "unknown_thread"
    follow = api.client.post("/v1/jobs/t1/follow-up", json={"goal": "mine now"}, headers=auth(B))
    assert follow.status_code == 404 and follow.json()["error"]["code"] == "unknown_job"
    assert api.sent == []  # type: ignore[attr-defined]
    client = Client("http://localhost", token=B, transport=api.transport())
    with pytest.raises(NotFound):
        client.thread("t1")


def test_a_reader_cannot_follow_up_a_running_job_is_409_bad_goals_422(api: Fixture) -> None:
    reader = api.client.post("/v1/jobs/t1/follow-up", json={"goal": "x"}, headers=auth(READER))
    assert reader.status_code == 403 and reader.json()["error"]["scope"] == "control"
    assert api.client.get("/v1/threads/t1", headers=auth(READER)).status_code == 200
    for body in ({}, {"goal": " "}, {"goal": 1}):
        assert api.client.post("/v1/jobs/t1/follow-up", json=body, headers=auth(A)).status_code == 422
    ended(api, "r1", "busy", owner="team-a", state="running")
    running = api.client.post("/v1/jobs/r1/follow-up", json={"goal": "next"}, headers=auth(A))
    assert running.status_code == 409 and running.json()["error"]["code"] == "job_state"


def test_the_async_client_follows_up_and_reads_the_thread(api: Fixture) -> None:
    async def run() -> None:
        async with AsyncClient("http://localhost", A, transport=api.async_transport()) as client:
            follow = await client.follow_up("t1", "second")
            assert (follow.id, follow.thread_id) == ("t2", "t1")
            assert [j.goal for j in await client.thread("t1")] == ["first", "second"]

    asyncio.run(run())
