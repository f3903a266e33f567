"""``POST /v1/jobs/{id}/decisions`` on a parked job (fakeredis, decisions applied at once as a
worker's ``tandem.decide`` would): a decision for a pause that is not current is a 409 naming the
current pause, the same key answers the same, and a decision no worker answers is withdrawn (504)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.http import Client, StalePauseError
from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.control.decide import decide_job
from tests.tasks.test_approvals import park
from tests.workers.test_api import Fixture

PAUSE = "J1:2:tools:1"


class _Sent:
    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def get(self, timeout: float | None = None) -> Any:
        if self.reply is None:
            from celery.exceptions import TimeoutError as CeleryTimeoutError

            raise CeleryTimeoutError("The operation timed out.")
        return self.reply


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fixture]:
    fixture = Fixture()
    fixture.workers_up = True  # type: ignore[attr-defined]

    def send_task(name: str, kwargs: dict[str, Any], **_: Any) -> _Sent:
        assert name == "tandem.decide"
        if not fixture.workers_up:  # type: ignore[attr-defined]
            return _Sent(None)
        return _Sent(decide_job(ApprovalStore(fixture.store), **kwargs))

    monkeypatch.setattr(fixture.celery, "send_task", send_task)
    park(fixture.store, "J1", now=time.time(), timeout_s=600)
    with fixture.client:
        yield fixture


def test_the_job_view_names_the_pause(api: Fixture) -> None:
    body = api.client.get("/v1/jobs/J1").json()
    assert body["approval"]["pause_id"] == PAUSE and body["status"]["pause_id"] == PAUSE


def test_a_decision_for_another_pause_is_409_and_changes_nothing(api: Fixture) -> None:
    stale = api.client.post(
        "/v1/jobs/J1/decisions",
        json={"pause_id": "J1:1:tools:0", "decisions": [{"index": 1, "approve": True}]},
    )
    assert stale.status_code == 409
    error = stale.json()["error"]
    assert error["code"] == "stale_pause"
    assert (error["pause_id"], error["current_pause"]) == ("J1:1:tools:0", PAUSE)
    assert api.client.get("/v1/jobs/J1").json()["approval"]["decisions"] == []
    ok = api.client.post(
        "/v1/jobs/J1/decisions",
        json={"pause_id": PAUSE, "decisions": True},
        headers={"Idempotency-Key": "k1"},
    )
    assert ok.status_code == 200 and ok.json()["pause_id"] == PAUSE and ok.json()["complete"] is True
    again = api.client.post(
        "/v1/jobs/J1/decisions", json={"pause_id": PAUSE, "decisions": True, "idempotency_key": "k1"}
    )
    assert again.status_code == 200 and again.json() == ok.json()  # the same key: the same answer
    ended = api.client.post("/v1/jobs/J1/decisions", json={"pause_id": PAUSE, "decisions": True})
    assert ended.status_code == 409 and ended.json()["error"]["code"] == "stale_pause"
    assert ended.json()["error"]["current_pause"] is None


def test_no_worker_means_504_and_the_decision_never_applies(api: Fixture) -> None:
    api.workers_up = False  # type: ignore[attr-defined]
    gone = api.client.post("/v1/jobs/J1/decisions", json={"decisions": True, "idempotency_key": "w"})
    assert gone.status_code == 504
    error = gone.json()["error"]
    assert error["code"] == "no_worker_answered" and error["withdrawn"] is True and error["pause_id"] == PAUSE
    api.workers_up = True  # type: ignore[attr-defined]
    queued = decide_job(ApprovalStore(api.store), "J1", True, PAUSE, "w")  # the queued message arrives
    assert queued["reason"] == "withdrawn"
    assert api.client.get("/v1/jobs/J1").json()["approval"]["decisions"] == []


def test_the_http_client_names_the_current_pause_and_raises_stale(api: Fixture) -> None:
    client = Client("http://localhost", transport=api.transport())
    with pytest.raises(StalePauseError) as stale:
        client.approve("J1", 1, pause_id="J1:0:tools:0")
    assert stale.value.current_pause == PAUSE and stale.value.status == 409
    assert [d["index"] for d in client.approve("J1", 1)] == [1]  # the current pause, read and named
    assert [d["index"] for d in client.reject("J1", 3, reason="no", idempotency_key="r")] == [1, 3]
    assert client.reject("J1", 3, reason="no", idempotency_key="r")[1]["approve"] is False  # same key
    with pytest.raises(StalePauseError):
        client.approve("J1", 1, pause_id=PAUSE)  # that pause has ended
