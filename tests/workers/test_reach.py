"""``reach``: the one line naming what does not answer, and the check before a command."""

from __future__ import annotations

import pytest
from redis.exceptions import NoPermissionError

from tandem.broker_config import Settings
from tandem.workers import health, reach
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


REFUSED_DETAIL = "user 'tandem-client' may not read the queue depths (NOPERM: no permissions); give it ..."


def refused(what: str, setting: str, url: str) -> Answer:
    return Answer(f"{what} ({url})", False, 0.01, REFUSED_DETAIL, setting, url, refused="permission")


def test_a_refusal_is_said_as_one_never_as_a_server_to_start() -> None:
    url = "redis://tandem-client:**@r:6379/0"
    line = reach.line([refused("the broker", "TANDEM_BROKER_URL", url)])
    assert line == f"the broker at redis://tandem-client:**@r:6379/0 refuses: {REFUSED_DETAIL}"
    both = reach.line(
        [
            failed("Redis", "TANDEM_REDIS_URL", "redis://s:6379/0"),
            refused("the broker", "TANDEM_BROKER_URL", url),
        ]
    )
    assert both.startswith(
        "Redis at redis://s:6379/0 does not answer (Connection refused): start redis-server there"
    )
    assert both.endswith(f"; the broker at {url} refuses: {REFUSED_DETAIL}")


def test_the_preflight_raises_refused_when_only_refusals_came(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "redis://tandem-client:pw-123@127.0.0.1:6399/0"
    settings = Settings.from_env({"TANDEM_REDIS_URL": url, "TANDEM_BROKER_URL": url})

    def refuse(settings: object, timeout: float) -> str:
        raise NoPermissionError("this user has no permissions to run the 'llen' command")

    monkeypatch.setattr(health, "_ping_redis", lambda settings, timeout: "")
    monkeypatch.setattr(health, "_read_broker", refuse)
    with pytest.raises(reach.Refused) as caught:
        reach.preflight(settings, timeout=1)
    assert str(caught.value).startswith("the broker at redis://tandem-client:**@127.0.0.1:6399/0 refuses: ")
    assert isinstance(caught.value.__cause__, NoPermissionError) and "pw-123" not in str(caught.value)
    reach.preflight(settings, broker=False, timeout=1)  # the job store alone answers
