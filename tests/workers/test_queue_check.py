"""``queue_check.refusal`` leaves what is not a queue made otherwise to the worker: a Redis broker,
and a RabbitMQ that does not answer (the worker rides out an outage)."""

from __future__ import annotations

import socket

from tandem.broker_config import Settings
from tandem.tasks.app import create_app
from tandem.workers.queue_check import refusal


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_redis_broker_is_not_asked() -> None:
    settings = Settings(broker_url="redis://127.0.0.1:1/0")
    assert refusal(create_app(settings), settings, ["thinker"]) is None


def test_a_rabbitmq_that_does_not_answer_is_left_to_the_worker() -> None:
    settings = Settings(broker_url=f"amqp://guest:guest@127.0.0.1:{_closed_port()}//")
    assert refusal(create_app(settings), settings, ["thinker", "celery"], timeout=1.0) is None
