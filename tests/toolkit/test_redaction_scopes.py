"""Operator credentials are pinned; a job's secrets redact only that job's records (issue 25, item 3).

Before: one process-wide registry of at most 10,000 values, oldest dropped first, fed by every job's
unsealed secrets. After 313 jobs of 32 secrets the operator's model key was dropped and appeared in
clear, and one job's ``"sum="`` turned another job's ``sum=5`` into ``***5``.
"""

from __future__ import annotations

import contextvars
import logging
import threading

import pytest

from tandem.toolkit import redaction
from tandem.toolkit.redaction import (
    MASK,
    RedactingFilter,
    SecretRegistry,
    SecretScope,
    current_scope,
    enter_scope,
    head_margin,
    redact,
    redact_data,
    redact_known,
    register_secret,
)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> SecretRegistry:
    """A fresh process-wide registry, as a worker starts with."""
    fresh = SecretRegistry()
    monkeypatch.setattr(redaction, "secrets", fresh)
    return fresh


def in_scope(scope: SecretScope | None, fn: object, *args: object) -> object:
    """``fn(*args)`` in a context of its own with ``scope`` entered (as a tandem task runs a step)."""

    def run() -> object:
        enter_scope(scope)
        return fn(*args)  # type: ignore[operator]

    return contextvars.copy_context().run(run)


def test_the_operator_key_stays_masked_after_313_jobs_of_32_secrets(registry: SecretRegistry) -> None:
    operator_key, redis_password = "sk-operator-model-key-0001", "redis-pass-0001"
    register_secret(operator_key, redis_password)
    for job in range(313):  # what used to evict them: each job's secrets in the process registry
        scope = SecretScope.of(f"job-{job}", [f"job{job}-secret-{i:02d}-value" for i in range(32)])
        shown = in_scope(scope, redact, f"tool saw {operator_key} and job{job}-secret-07-value")
        assert shown == f"tool saw {MASK} and {MASK}"
    assert redact(f"key {operator_key} pw {redis_password}") == f"key {MASK} pw {MASK}"
    assert len(registry.values()) == 2  # no job's secret entered the process-wide registry


def test_one_jobs_secret_never_touches_another_jobs_output(registry: SecretRegistry) -> None:
    mine = SecretScope.of("job-a", ["sum="])
    other = SecretScope.of("job-b", ["b-token-123"])
    assert in_scope(mine, redact_known, "sum=5") == f"{MASK}5"  # its own record: masked
    assert in_scope(other, redact_known, "sum=5") == "sum=5"  # another job's record: as it is
    assert in_scope(None, redact_known, "sum=5") == "sum=5"  # outside any job
    assert redact_known("sum=5") == "sum=5"


def test_every_redactor_uses_the_scope(registry: SecretRegistry) -> None:
    scope = SecretScope.of("job-a", ["scoped-secret-99"])

    def check() -> None:
        assert redact("x scoped-secret-99") == f"x {MASK}"
        assert redact_data({"out": ["scoped-secret-99"]}) == {"out": [MASK]}
        assert head_margin() >= len("scoped-secret-99")
        record = logging.LogRecord("t", logging.INFO, __file__, 1, "saw %s", ("scoped-secret-99",), None)
        RedactingFilter().filter(record)
        assert record.getMessage() == f"saw {MASK}"
        assert current_scope() is scope

    before = current_scope()  # None in a worker's fresh task context
    in_scope(scope, check)
    assert current_scope() is before  # the scope ended with its context


def test_threads_started_with_the_context_keep_the_scope(registry: SecretRegistry) -> None:
    scope = SecretScope.of("job-a", ["thread-secret-1"])
    seen: list[str] = []

    def start() -> None:
        ctx = contextvars.copy_context()
        thread = threading.Thread(target=ctx.run, args=(lambda: seen.append(redact("thread-secret-1")),))
        thread.start()
        thread.join()

    in_scope(scope, start)
    assert seen == [MASK]


def test_a_full_registry_refuses_new_values_and_keeps_the_old(caplog: pytest.LogCaptureFixture) -> None:
    registry = SecretRegistry(capacity=2)
    registry.add("pinned-one")
    registry.add("pinned-two")
    with caplog.at_level(logging.WARNING, "tandem.redaction"):
        for i in range(5):
            registry.add(f"later-{i}-value")
    assert set(registry.values()) == {"pinned-one", "pinned-two"}
    assert len(caplog.records) == 1 and "full" in caplog.text


def test_a_scope_ignores_short_and_non_string_values() -> None:
    scope = SecretScope.of("j", ["ab", None, 7, "long-enough"])
    assert scope.index.ordered == ("long-enough",)
