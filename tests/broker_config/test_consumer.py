"""The worker's consumer drops a task message whose body cannot call its task before it reaches the
pool, and tells the listeners of dropped messages about every message it drops; a step message
taken from the intake queue (where clients may write) is refused with one WARNING line."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kombu.message import Message

from tandem.broker_config import dropped
from tandem.broker_config.consumer import keep, misplaced_step, refuse, unfit_body
from tandem.broker_config.transport import QUEUE_STAMP, envelope, stamp, unstamped

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


def step_message(task: str, delivery_info: dict[str, Any]) -> Message:
    body = json.dumps([["job-1", 0, 1], {}, EMBED]).encode()
    return Message(
        body=body,
        content_type="application/json",
        content_encoding="utf-8",
        headers={"task": task, "id": "step-1"},
        delivery_info=delivery_info,
    )


@pytest.mark.parametrize(
    ("task", "delivery_info", "refused"),
    [
        pytest.param(
            "tandem.run_tool", {QUEUE_STAMP: "celery", "routing_key": "tools"}, True, id="stamped-intake"
        ),
        pytest.param("tandem.thinker_turn", {"routing_key": "celery"}, True, id="rabbitmq-intake"),
        pytest.param(
            "tandem.actor_turn", {"routing_key": "0." * 27 + "1.celery"}, True, id="rabbitmq-delayed-intake"
        ),
        pytest.param(
            "tandem.run_tool", {QUEUE_STAMP: "tools", "routing_key": "celery"}, False, id="stamp-wins"
        ),
        pytest.param("tandem.run_tool", {"routing_key": "tools"}, False, id="its-role-queue"),
        pytest.param("tandem.infer", {QUEUE_STAMP: "celery"}, False, id="the-intake-task"),
        pytest.param("tandem.decide", {QUEUE_STAMP: "celery"}, False, id="a-control-task"),
        pytest.param("myapp.task", {QUEUE_STAMP: "celery"}, False, id="not-tandems"),
    ],
)
def test_a_step_taken_from_the_intake_queue_is_refused(
    task: str, delivery_info: dict[str, Any], refused: bool
) -> None:
    reason = misplaced_step(step_message(task, delivery_info), "celery")
    assert (reason is not None) is refused
    if refused:
        assert reason is not None and reason.startswith(
            f"{task} (task id step-1) arrived on the intake queue 'celery'"
        )


def test_a_refused_step_is_one_warning_and_rejected(caplog: pytest.LogCaptureFixture) -> None:
    rejected: list[bool] = []

    class Channel:
        def basic_reject(self, tag: Any, requeue: bool = False) -> None:
            rejected.append(requeue)

    message = step_message("tandem.run_tool", {QUEUE_STAMP: "celery"})
    message.channel = Channel()
    reason = misplaced_step(message, "celery")
    assert reason is not None
    with caplog.at_level("WARNING", logger="tandem.broker"):
        refuse(message, reason)
    assert [r.getMessage() for r in caplog.records] == [f"message refused, nothing done: {reason}"]
    assert rejected == [False] and message.acknowledged


def test_the_channel_writes_the_queue_a_message_came_from_over_the_senders_word() -> None:
    payload = envelope(
        json.dumps(
            {
                "body": "",
                "headers": {"task": "tandem.run_tool", "id": "x"},
                "properties": {
                    "delivery_tag": "t",
                    "delivery_info": {"exchange": "", "routing_key": "tools", QUEUE_STAMP: "tools"},
                },
            }
        ).encode()
    )
    sent = json.loads(json.dumps(payload))
    stamp(payload, "celery")
    assert payload["properties"]["delivery_info"] == {
        "exchange": "",
        "routing_key": "tools",
        QUEUE_STAMP: "celery",
    }
    del sent["properties"]["delivery_info"][QUEUE_STAMP]  # a dead letter keeps it as sent, less the stamp
    assert unstamped(payload) == sent and QUEUE_STAMP in payload["properties"]["delivery_info"]


def test_a_step_on_the_intake_queue_whose_body_cannot_be_decoded_is_left_to_be_dead_lettered() -> None:
    undecodable = Message(
        body=b"this body is not JSON {",
        content_type="application/json",
        content_encoding="utf-8",
        headers={"task": "tandem.run_tool", "id": "step-1"},
        delivery_info={QUEUE_STAMP: "celery"},
    )
    assert misplaced_step(undecodable, "celery") is None  # Celery drops it as malformed
