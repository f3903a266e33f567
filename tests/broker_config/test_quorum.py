"""``TANDEM_RABBITMQ_QUEUE_TYPE``: quorum queues as Celery and RabbitMQ need them, and countdowns
in whole seconds (``tandem.broker_config.delays``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery as CeleryApp

from tandem.broker_config import Settings, celery_config
from tandem.broker_config.celery_config import STEP_EXCHANGE
from tandem.broker_config.delays import Celery, whole_seconds
from tandem.broker_config.errors import SettingsError

AMQP = "amqp://guest:guest@rabbit:5672/prod"
QUORUM = {"TANDEM_BROKER_URL": AMQP, "TANDEM_RABBITMQ_QUEUE_TYPE": "quorum"}


def test_queues_are_classic_unless_asked() -> None:
    assert Settings.from_env({}).rabbitmq_queue_type == "classic"
    assert Settings.from_env({"TANDEM_BROKER_URL": AMQP}).rabbitmq_queue_type == "classic"
    assert Settings.from_env(QUORUM).rabbitmq_queue_type == "quorum"


@pytest.mark.parametrize("value", ["Quorum", "stream", "1"])
def test_an_unknown_queue_type_is_refused(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"TANDEM_BROKER_URL": AMQP, "TANDEM_RABBITMQ_QUEUE_TYPE": value})
    assert f"TANDEM_RABBITMQ_QUEUE_TYPE={value!r}" in str(caught.value) and "'quorum'" in str(caught.value)


def test_quorum_queues_need_a_rabbitmq_broker() -> None:
    with pytest.raises(SettingsError, match="needs a RabbitMQ broker") as caught:
        Settings.from_env(
            {"TANDEM_BROKER_URL": "redis://:pw@h:6379/0", "TANDEM_RABBITMQ_QUEUE_TYPE": "quorum"}
        )
    assert "pw" not in str(caught.value)  # the broker URL is not quoted: it may hold a password


def test_quorum_queues_carry_their_type_and_no_priority() -> None:
    conf = celery_config(
        Settings.from_env({"TANDEM_BROKER_URL": AMQP, "TANDEM_RABBITMQ_QUEUE_TYPE": "quorum"})
    )
    intake, *steps = conf["task_queues"]
    assert (intake.name, intake.queue_arguments) == ("celery", {"x-queue-type": "quorum"})
    # A plain client's default queue (``task_default_queue_type = "quorum"``) is on a direct exchange
    assert intake.exchange is None or intake.exchange.type == "direct"
    assert [q.name for q in steps] == ["thinker", "actor", "tools"]
    for queue in steps:
        assert queue.queue_arguments == {"x-queue-type": "quorum"}  # RabbitMQ 3 refuses x-max-priority
        assert (queue.exchange.name, queue.exchange.type, queue.routing_key) == (
            STEP_EXCHANGE,
            "topic",
            queue.name,
        )
    assert conf["worker_detect_quorum_queues"] is True
    assert conf["task_default_queue_type"] == "quorum"
    assert conf["broker_native_delayed_delivery_queue_type"] == "quorum"
    assert "task_queue_max_priority" not in conf


def test_classic_rabbitmq_queues_are_as_before() -> None:
    conf = celery_config(Settings.from_env({"TANDEM_BROKER_URL": AMQP}))
    intake, *steps = conf["task_queues"]
    assert intake.queue_arguments is None
    assert all(q.queue_arguments == {"x-max-priority": 9} and q.exchange.type == "direct" for q in steps)
    assert "worker_detect_quorum_queues" not in conf and "task_default_queue_type" not in conf


def test_a_countdown_becomes_whole_seconds_rounded_up() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert [whole_seconds(c, None, now) for c in (0.001, 0.4, 1.0, 1.01, 29.5)] == [1, 1, 1, 2, 30]
    assert whole_seconds(0, None, now) is None and whole_seconds(-3, None, now) is None
    assert whole_seconds(None, None, now) is None
    assert whole_seconds(None, now + timedelta(seconds=2.2), now) == 3
    assert whole_seconds(None, now - timedelta(seconds=1), now) is None  # due already: sent now
    naive = datetime(2026, 1, 1, 0, 0, 4)  # Celery reads a naive eta as UTC
    assert whole_seconds(None, naive, now) == 4


def test_tandems_quorum_app_sends_whole_second_countdowns(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[Any, ...]] = []

    def record(
        self: Any,
        name: str,
        args: Any = None,
        kwargs: Any = None,
        countdown: Any = None,
        eta: Any = None,
        *rest: Any,
        **options: Any,
    ) -> None:
        sent.append((name, countdown, eta, options.get("task_id")))

    monkeypatch.setattr(CeleryApp, "send_task", record)
    app = Celery("t")
    app.send_task("tandem.actor_turn", ["j", 0], countdown=0.4, task_id="a")
    app.send_task("tandem.actor_turn", ["j", 0], countdown=2.5, task_id="b")
    app.send_task("tandem.actor_turn", ["j", 0], task_id="c")
    app.send_task("tandem.actor_turn", ["j", 0], eta=app.now() + timedelta(seconds=5.5), task_id="d")
    assert sent[:3] == [
        ("tandem.actor_turn", 1, None, "a"),
        ("tandem.actor_turn", 3, None, "b"),
        ("tandem.actor_turn", None, None, "c"),
    ]
    assert sent[3][1] in (5, 6) and sent[3][2] is None
