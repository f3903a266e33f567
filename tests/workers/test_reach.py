"""``reach``: the one line naming what does not answer, and the check before a command."""

from __future__ import annotations

import pytest

from tandem.broker_config import Settings
from tandem.workers import reach
from tandem.workers.embedded import free_port
from tandem.workers.health import Answer


def failed(what: str, setting: str, url: str, why: str = "Connection refused.") -> Answer:
    return Answer(f"{what} ({url})", False, 0.01, why, setting, url)


def test_one_server_for_redis_and_the_broker_is_named_once() -> None:
    url = "redis://:**@r:6379/0"
    line = reach.line(
        [failed("Redis", "TANDEM_REDIS_URL", url), failed("the broker", "TANDEM_BROKER_URL", url)]
    )
    assert line == (
        "Redis and the broker at redis://:**@r:6379/0 do not answer (Connection refused): start "
        "redis-server there, or set TANDEM_REDIS_URL and TANDEM_BROKER_URL to one that answers"
    )


def test_a_rabbitmq_broker_alone() -> None:
    line = reach.line([failed("the broker", "TANDEM_BROKER_URL", "amqp://u:**@b:5672//", "timed out")])
    assert line == (
        "the broker at amqp://u:**@b:5672// does not answer (timed out): start RabbitMQ there, or set "
        "TANDEM_BROKER_URL to one that answers"
    )


def test_two_servers() -> None:
    line = reach.line(
        [
            failed("Redis", "TANDEM_REDIS_URL", "redis://r:6379/0"),
            failed("the result backend", "TANDEM_RESULT_BACKEND", "redis://b:6379/1"),
        ]
    )
    assert line.startswith("Redis at redis://r:6379/0 does not answer (Connection refused); the result ")
    assert line.endswith(
        "start them, or set TANDEM_REDIS_URL and TANDEM_RESULT_BACKEND to servers that answer"
    )


def test_the_preflight_asks_the_broker_only_when_told() -> None:
    redis_url = f"redis://:pw-123@127.0.0.1:{free_port()}/0"
    settings = Settings.from_env(
        {"TANDEM_REDIS_URL": redis_url, "TANDEM_BROKER_URL": f"amqp://u:pw-123@127.0.0.1:{free_port()}//"}
    )
    with pytest.raises(reach.Unreachable) as caught:
        reach.preflight(settings, broker=False, timeout=1)
    assert str(caught.value).startswith("Redis at redis://:**@127.0.0.1:")
    assert "broker" not in str(caught.value) and "pw-123" not in str(caught.value)
    assert caught.value.__cause__ is not None  # what --debug shows
    with pytest.raises(reach.Unreachable, match=r"; the broker at amqp://u:\*\*@127\.0\.0\.1:"):
        reach.preflight(settings, timeout=1)


def test_describe_names_what_does_not_answer_now() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    settings = Settings.from_env({"TANDEM_REDIS_URL": url, "TANDEM_BROKER_URL": url})
    line = reach.describe(settings, ConnectionError("Error 111"), timeout=1)
    assert line.startswith(f"Redis and the broker at {url} do not answer (")
