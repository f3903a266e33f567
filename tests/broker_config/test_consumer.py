"""The worker's consumer drops a task message whose body cannot call its task before it reaches the
pool, and tells the listeners of dropped messages about every message it drops."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kombu.message import Message

from tandem.broker_config import dropped
from tandem.broker_config.consumer import keep, unfit_body

EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def message(body: str, headers: dict[str, Any] | None = None) -> Message:
    headers = {"task": "tandem.infer", "id": "job-1"} if headers is None else headers
    return Message(
        body=body.encode(), content_type="application/json", content_encoding="utf-8", headers=headers
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        pytest.param(json.dumps({"spec": {"goal": "g"}}), "its body is a JSON object", id="an-object"),
        pytest.param(json.dumps([[], {}]), "its body is a JSON array, not [args", id="two-items"),
        pytest.param(json.dumps([[], None, EMBED]), "its kwargs are null, not an object", id="kwargs-null"),
        pytest.param(json.dumps([None, {}, EMBED]), "its args are null, not a list", id="args-null"),
        pytest.param(json.dumps(["abc", {}, EMBED]), "its args are a JSON string", id="args-a-string"),
        pytest.param(json.dumps([[], [], EMBED]), "its kwargs are a JSON array", id="kwargs-a-list"),
        pytest.param(json.dumps([[], {}, 5]), "its embed is a JSON number", id="embed-a-number"),
    ],
)
def test_a_body_that_cannot_call_its_task_says_why(body: str, says: str) -> None:
    reason = unfit_body(message(body))
    assert reason is not None and says in reason


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        pytest.param(json.dumps([[], {"spec": {}}, EMBED]), None, id="fits"),
        pytest.param(json.dumps([["job", 0], {}, None]), None, id="embed-null"),
        pytest.param(json.dumps({"args": [1], "kwargs": {}}), None, id="hybrid-protocol"),
        pytest.param("spec=goal", None, id="not-json-celery-reports-it"),
        pytest.param(json.dumps({"x": 1}), {"id": "job-1"}, id="protocol-1-no-task-header"),
    ],
)
def test_a_body_that_can_call_its_task_or_is_celerys_to_report_passes(
    body: str, headers: dict[str, Any] | None
) -> None:
    assert unfit_body(message(body, headers)) is None


@pytest.fixture
def told() -> Iterator[list[tuple[Mapping[str, Any], str]]]:
    seen: list[tuple[Mapping[str, Any], str]] = []

    def listener(headers: Mapping[str, Any], reason: str) -> None:
        seen.append((headers, reason))

    def failing(headers: Mapping[str, Any], reason: str) -> None:
        raise RuntimeError("a listener that fails harms nothing")

    dropped.listen(failing)
    dropped.listen(listener)
    dropped.listen(listener)  # once, however often it is added
    try:
        yield seen
    finally:
        dropped._listeners.remove(failing)
        dropped._listeners.remove(listener)


def test_every_dropped_message_is_told_with_its_headers(told: list[tuple[Mapping[str, Any], str]]) -> None:
    keep(message("spec=goal"), "a body that cannot be decoded")
    assert told == [({"task": "tandem.infer", "id": "job-1"}, "a body that cannot be decoded")]
    dropped.tell(["not", "headers"], "no headers")  # unreadable headers are told as none
    assert told[-1] == ({}, "no headers")
