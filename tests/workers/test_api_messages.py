"""``POST /v1/jobs/{id}/messages`` (fakeredis, messages applied at once as a worker's
``tandem.message`` would): 202 with the message's id, the same key answers the same and adds
nothing, an ended job is 409, another tenant's job 404, a missing scope 403, a message no worker
took is withdrawn (504); ``Client.message`` over the same routes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.tokens import ApiToken
from tandem.client.http import AsyncClient, Client, Conflict, NotFound
from tandem.tasks.control.messages import message_job
from tests.tasks.test_approvals import park
from tests.workers.test_api import Fixture
from tests.workers.test_api_decisions import _Sent

A, B, READER = (f"token-{name}-0123456789" for name in ("a", "b", "reader"))
TOKENS = (
    ApiToken(A, "default", frozenset({"submit", "read", "control", "approve"})),
    ApiToken(B, "team-b", frozenset({"submit", "read", "control", "approve"})),
    ApiToken(READER, "default", frozenset({"read"})),
)
HINT = "Use the 2025 figures."


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fixture]:
    fixture = Fixture(tokens=(A,), api=ApiSettings(tokens=TOKENS))
    fixture.workers_up = True  # type: ignore[attr-defined]
    fixture.sent = []  # type: ignore[attr-defined]

    def send_task(name: str, kwargs: dict[str, Any], **_: Any) -> _Sent:
        assert name == "tandem.message"
        fixture.sent.append(kwargs)  # type: ignore[attr-defined]
        if not fixture.workers_up:  # type: ignore[attr-defined]
            return _Sent(None)
        return _Sent(message_job(fixture.store, **kwargs))

    monkeypatch.setattr(fixture.celery, "send_task", send_task)
    park(fixture.store, "J1", now=time.time(), timeout_s=600)  # a mono job parked in round 2
    with fixture.client:
        yield fixture


def people(api: Fixture) -> list[bytes]:
    return [k for k in api.store.redis.hkeys(api.store.key("J1", "memory")) if b":person:" in k]


def test_a_message_is_202_with_its_id_and_the_same_key_adds_nothing(api: Fixture) -> None:
    sent = api.client.post("/v1/jobs/J1/messages", json={"text": HINT}, headers={"Idempotency-Key": "m1"})
    assert sent.status_code == 202, sent.text
    assert sent.json() == {"id": "J1", "message_id": "J1:message:0001", "round": 3}
    again = api.client.post("/v1/jobs/J1/messages", json={"text": HINT, "idempotency_key": "m1"})
    assert again.status_code == 202 and again.json() == sent.json()
    assert people(api) == [b"3:person:J1:message:0001"]
    assert api.sent[0]["owner"] == "default"  # type: ignore[attr-defined]  # the token's tenant


def test_an_ended_job_is_409_and_bad_bodies_422(api: Fixture) -> None:
    for body in ({}, {"text": ""}, {"text": 3}, {"text": HINT, "idempotency_key": ""}):
        bad = api.client.post("/v1/jobs/J1/messages", json=body)
        assert bad.status_code == 422, body
    api.store.redis.hset(api.store.key("J1", "state"), "state", "failed")
    ended = api.client.post("/v1/jobs/J1/messages", json={"text": HINT})
    assert ended.status_code == 409
    assert (
        ended.json()["error"]["code"] == "job_ended"
        and "has ended (failed)" in ended.json()["error"]["message"]
    )
    assert people(api) == []


def test_another_tenant_gets_404_and_a_reader_403(api: Fixture) -> None:
    foreign = api.client.post(
        "/v1/jobs/J1/messages", json={"text": HINT}, headers={"Authorization": f"Bearer {B}"}
    )
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "unknown_job"
    reader = api.client.post(
        "/v1/jobs/J1/messages", json={"text": HINT}, headers={"Authorization": f"Bearer {READER}"}
    )
    assert reader.status_code == 403 and reader.json()["error"]["scope"] == "control"
    assert people(api) == [] and api.sent == []  # type: ignore[attr-defined]


def test_no_worker_means_504_and_the_message_never_arrives(api: Fixture) -> None:
    api.workers_up = False  # type: ignore[attr-defined]
    gone = api.client.post("/v1/jobs/J1/messages", json={"text": HINT, "idempotency_key": "w"})
    assert gone.status_code == 504
    assert gone.json()["error"]["code"] == "no_worker_answered" and gone.json()["error"]["withdrawn"] is True
    late = message_job(api.store, "J1", HINT, "w")  # the queued task runs after all
    assert late["reason"] == "withdrawn" and people(api) == []


def test_the_http_client_sends_messages(api: Fixture) -> None:
    client = Client("http://localhost", token=A, transport=api.transport())
    first = client.message("J1", HINT, idempotency_key="c1")
    assert first == "J1:message:0001"
    assert client.message("J1", HINT, idempotency_key="c1") == first
    assert client.message("J1", "and be brief") == "J1:message:0002"  # a fresh key: a new message
    with pytest.raises(NotFound):
        client.message("nope", HINT)
    api.store.redis.hset(api.store.key("J1", "state"), "state", "completed")
    with pytest.raises(Conflict) as ended:
        client.message("J1", HINT)
    assert ended.value.code == "job_ended"


def test_the_openapi_document_lists_the_route(api: Fixture) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    post = paths["/v1/jobs/{job_id}/messages"]["post"]
    assert post["operationId"] == "sendMessage" and {"202", "403", "404", "409", "504"} <= set(
        post["responses"]
    )


def test_the_async_client_sends_messages(api: Fixture) -> None:
    async def run() -> None:
        async with AsyncClient("http://localhost", A, transport=api.async_transport()) as client:
            assert await client.message("J1", HINT, idempotency_key="a1") == "J1:message:0001"
            assert await client.message("J1", HINT, idempotency_key="a1") == "J1:message:0001"

    asyncio.run(run())
    assert people(api) == [b"3:person:J1:message:0001"]


@pytest.mark.parametrize(
    ("path", "body"), [("resume", {}), ("fork", {"round": 1}), ("follow-up", {"goal": "g"})]
)
def test_a_resume_fork_or_follow_up_no_worker_answers_is_504(
    api: Fixture, monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, Any]
) -> None:
    monkeypatch.setattr(api.celery, "send_task", lambda name, kwargs, **_: _Sent(None))
    gone = api.client.post(f"/v1/jobs/J1/{path}", json=body)
    assert gone.status_code == 504, gone.text
    error = gone.json()["error"]
    assert error["code"] == "no_worker_answered" and "may still happen" in error["message"]
