"""``POST /v1/jobs/{id}/answers`` and ``tandem.Client.answer`` on a job parked on a question
(fakeredis, answers applied at once as a worker's ``tandem.answer`` would): 200 with the answer,
409 ``stale_pause`` naming the current pause, 422 naming the schema error, 504 withdrawn."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.http import AsyncClient, Client, InvalidRequest, StalePauseError
from tandem.tasks.control.answer import answer_job
from tandem.tasks.control.questions import QuestionStore
from tests.tasks.test_questions import ask, start_round
from tests.workers.test_api import Fixture
from tests.workers.test_api_decisions import _Sent

PAUSE = "J1:2:tools:1"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fixture]:
    fixture = Fixture()
    fixture.workers_up = True  # type: ignore[attr-defined]

    def send_task(name: str, kwargs: dict[str, Any], **_: Any) -> _Sent:
        assert name == "tandem.answer"
        if not fixture.workers_up:  # type: ignore[attr-defined]
            return _Sent(None)
        return _Sent(answer_job(QuestionStore(fixture.store), **kwargs))

    monkeypatch.setattr(fixture.celery, "send_task", send_task)
    start_round(fixture.store, "J1")
    assert ask(fixture.store, job_id="J1", timeout_s=600) == "parked"
    with fixture.client:
        yield fixture


def test_the_job_view_shows_the_question(api: Fixture) -> None:
    status = api.client.get("/v1/jobs/J1").json()["status"]
    assert (status["state"], status["pause_kind"], status["pause_id"]) == (
        "awaiting_approval",
        "question",
        PAUSE,
    )
    assert status["question"]["text"] == "Which city?" and status["question"]["call_index"] == 1


def test_stale_and_unfitting_answers_are_refused_and_change_nothing(api: Fixture) -> None:
    stale = api.client.post(
        "/v1/jobs/J1/answers", json={"pause_id": "J1:1:tools:0", "answer": {"city": "Oslo"}}
    )
    assert stale.status_code == 409
    error = stale.json()["error"]
    assert (error["code"], error["pause_id"], error["current_pause"]) == (
        "stale_pause",
        "J1:1:tools:0",
        PAUSE,
    )
    bad = api.client.post("/v1/jobs/J1/answers", json={"pause_id": PAUSE, "answer": {"town": "Oslo"}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_answer"
    assert "'city' is a required property" in bad.json()["error"]["message"]
    missing = api.client.post("/v1/jobs/J1/answers", json={"pause_id": PAUSE})
    assert missing.status_code == 422 and missing.json()["error"]["fields"][0]["field"] == "answer"
    assert api.client.get("/v1/jobs/J1").json()["status"]["pause_id"] == PAUSE  # still waiting
    ok = api.client.post(
        "/v1/jobs/J1/answers",
        json={"pause_id": PAUSE, "answer": {"city": "Oslo"}},
        headers={"Idempotency-Key": "k"},
    )
    assert ok.status_code == 200
    assert ok.json() == {
        "id": "J1",
        "pause_id": PAUSE,
        "round": 2,
        "call_index": 1,
        "answer": {"city": "Oslo"},
    }
    again = api.client.post("/v1/jobs/J1/answers", json={"pause_id": PAUSE, "answer": {"city": "Rome"}})
    assert again.status_code == 409 and again.json()["error"]["code"] == "stale_pause"


def test_no_worker_means_504_and_the_answer_never_applies(api: Fixture) -> None:
    api.workers_up = False  # type: ignore[attr-defined]
    late = api.client.post(
        "/v1/jobs/J1/answers",
        json={"pause_id": PAUSE, "answer": {"city": "Oslo"}},
        headers={"Idempotency-Key": "w"},
    )
    assert late.status_code == 504 and late.json()["error"]["withdrawn"] is True
    api.workers_up = True  # type: ignore[attr-defined]
    again = api.client.post(
        "/v1/jobs/J1/answers", json={"pause_id": PAUSE, "answer": {"city": "Oslo"}, "idempotency_key": "w"}
    )
    assert again.status_code == 504  # the key keeps its first reply: withdrawn
    assert QuestionStore(api.store).get("J1").answered_by is None  # type: ignore[union-attr]


def test_the_http_client_answers_the_current_question(api: Fixture) -> None:
    client = Client("http://localhost", transport=api.transport())
    with pytest.raises(InvalidRequest, match="field 'city'"):
        client.answer("J1", {"city": 7})
    with pytest.raises(StalePauseError):
        client.answer("J1", {"city": "Oslo"}, pause_id="J1:0:tools:0")
    assert client.answer("J1", {"city": "Oslo"}) == {"city": "Oslo"}
    assert client.job("J1").status.pause_kind is None


def test_the_async_client_answers_the_current_question(api: Fixture) -> None:
    async def run() -> None:
        async with AsyncClient("http://localhost", transport=api.async_transport()) as client:
            with pytest.raises(InvalidRequest, match="field 'city'"):
                await client.answer("J1", {"city": 7})
            assert await client.answer("J1", {"city": "Oslo"}) == {"city": "Oslo"}

    asyncio.run(run())
