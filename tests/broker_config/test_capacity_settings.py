"""``TANDEM_RETRY_HOLD_SECONDS`` and ``TANDEM_RATE_BURST_SECONDS``: defaults, values, refusals
that name the variable and the value; and the runtime hands them to the model and the limiter."""

from __future__ import annotations

import pytest

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.tasks.runtime import Runtime


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert (settings.retry_hold_seconds, settings.rate_burst_seconds) == (5.0, 1.0)


def test_values_are_read() -> None:
    settings = Settings.from_env({"TANDEM_RETRY_HOLD_SECONDS": "0", "TANDEM_RATE_BURST_SECONDS": "6"})
    assert (settings.retry_hold_seconds, settings.rate_burst_seconds) == (0.0, 6.0)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("TANDEM_RETRY_HOLD_SECONDS", "-1", "must be at least 0"),
        ("TANDEM_RETRY_HOLD_SECONDS", "soon", "is not a number"),
        ("TANDEM_RATE_BURST_SECONDS", "45", "must be at most 30"),
        ("TANDEM_RATE_BURST_SECONDS", "-0.5", "must be at least 0"),
    ],
)
def test_bad_values_are_refused_by_name(name: str, value: str, words: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: value})
    assert f"{name}={value!r}" in str(caught.value) and words in str(caught.value)


def test_the_runtime_passes_them_on() -> None:
    env = {
        "TANDEM_ACTOR_MODEL": "openai/m",
        "TANDEM_ACTOR_API_BASE": "http://gpu-1:8000/v1",
        "TANDEM_ACTOR_RPM": "60",
        "TANDEM_RETRY_HOLD_SECONDS": "2.5",
        "TANDEM_RATE_BURST_SECONDS": "3",
    }
    runtime = Runtime(Settings.from_env(env))
    capacity = runtime.capacity("actor")
    assert capacity is not None and capacity.limits.burst_seconds == 3.0
    inner = runtime._build_inner_model("actor", "mono", limited=True)
    assert inner.retry.max_hold == 2.5  # type: ignore[attr-defined]
