"""``TANDEM_MEMORY_TTL`` is never below the Redis broker's visibility timeout.

An intake message whose worker died before acknowledging it is handed out again by the Redis broker
after its visibility timeout. If the job's keys had expired by then, the intake would create the job
anew and run it a second time; so a job's keys must outlive that timeout.
"""

from __future__ import annotations

import pytest

from tandem.broker_config import Settings, celery_config
from tandem.broker_config.errors import SettingsError


def test_a_memory_ttl_below_the_visibility_timeout_is_refused_naming_both() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"TANDEM_MEMORY_TTL": "600"})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "TANDEM_MEMORY_TTL=600 is below the Redis broker's visibility timeout of 1080 s "
        "(TANDEM_TASK_TIME_LIMIT=900 + 4 x TANDEM_LEASE_SECONDS=30 + 60)"
    )
    assert message.endswith("set TANDEM_MEMORY_TTL to at least 1080")


def test_the_bound_follows_the_time_limit_and_the_lease() -> None:
    env = {"TANDEM_TASK_TIME_LIMIT": "120", "TANDEM_LEASE_SECONDS": "5"}
    assert Settings.from_env({**env, "TANDEM_MEMORY_TTL": "200"}).memory_ttl == 200  # 120 + 20 + 60
    with pytest.raises(SettingsError, match=r"TANDEM_MEMORY_TTL=199 is below .* of 200 s"):
        Settings.from_env({**env, "TANDEM_MEMORY_TTL": "199"})


def test_unset_it_is_a_day_or_the_visibility_timeout_when_longer() -> None:
    assert Settings.from_env({}).memory_ttl == 86400
    long_steps = Settings.from_env({"TANDEM_TASK_TIME_LIMIT": "100000"})
    assert long_steps.memory_ttl == long_steps.visibility_timeout == 100000 + 4 * 30 + 60


def test_rabbitmq_has_no_visibility_timeout_to_outlive() -> None:
    # RabbitMQ hands an unacknowledged message out again as soon as its consumer's channel closes.
    amqp = {"TANDEM_BROKER_URL": "amqp://guest@localhost//", "TANDEM_MEMORY_TTL": "600"}
    assert Settings.from_env(amqp).memory_ttl == 600


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"TANDEM_TASK_TIME_LIMIT": "120", "TANDEM_LEASE_SECONDS": "5.5"}, id="short"),
        pytest.param({"TANDEM_TASK_TIME_LIMIT": "100000"}, id="long-steps"),
    ],
)
def test_the_celery_configuration_uses_the_same_visibility_timeout(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    conf = celery_config(settings)
    assert conf["broker_transport_options"]["visibility_timeout"] == settings.visibility_timeout
    assert settings.memory_ttl >= settings.visibility_timeout
