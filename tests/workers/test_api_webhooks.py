"""``POST /v1/jobs`` with webhooks: a host outside the allow-list is 422 naming the field and the
setting, and nothing is queued; a loopback URL is accepted and kept in the spec."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.workers.test_api import Fixture


@pytest.fixture
def api() -> Iterator[Fixture]:
    fixture = Fixture()
    with fixture.client:
        yield fixture


def test_a_webhook_to_a_host_outside_the_allow_list_is_422(api: Fixture) -> None:
    spec = {"goal": "g", "webhooks": [{"url": "https://hooks.example.com/tandem?token=abc"}]}
    response = api.client.post("/v1/jobs", json=spec)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_spec"
    assert error["message"].startswith("field 'webhooks.0.url': host 'hooks.example.com' is not allowed")
    assert "TANDEM_WEBHOOK_ALLOWED_HOSTS=loopback,hooks.example.com" in error["message"]
    assert api.client.get("/v1/jobs").json()["jobs"] == []  # nothing was queued


def test_a_malformed_webhook_is_422_naming_the_field(api: Fixture) -> None:
    response = api.client.post("/v1/jobs", json={"goal": "g", "webhooks": [{"url": "ftp://127.0.0.1/x"}]})
    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == ["webhooks.0.url"]


def test_a_loopback_webhook_is_accepted(api: Fixture) -> None:
    spec = {"goal": "g", "webhooks": [{"url": "http://127.0.0.1:9000/h", "events": ["final"]}]}
    response = api.client.post("/v1/jobs", json=spec)
    assert response.status_code == 202, response.text
    queued = api.store.machine.intake(response.json()["id"])  # the spec the intake message carries
    assert queued is not None
    assert json.loads(queued)["webhooks"] == [{"url": "http://127.0.0.1:9000/h", "events": ["final"]}]
