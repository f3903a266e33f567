"""A tandem task run from a message starts with no job's secret scope and ends the one its step
entered, after Celery logged its outcome (``tandem.tasks.task_base``; issue 25, item 3)."""

from __future__ import annotations

from typing import Any

from celery import Celery

from tandem.toolkit.redaction import MASK, SecretScope, current_scope, enter_scope, redact


def test_a_task_starts_without_a_scope_and_ends_the_one_it_entered() -> None:
    app = Celery("scope-test", task_cls="tandem.tasks.task_base:TandemTask")
    seen: list[Any] = []

    @app.task(name="tandem.scope_probe")
    def probe(job_id: str) -> str:
        seen.append(current_scope())
        enter_scope(SecretScope.of(job_id, ["probe-secret-42"]))
        return redact("probe-secret-42")

    enter_scope(SecretScope.of("stale", ["stale-secret-1"]))  # left by an earlier task of the thread
    assert probe.apply(args=["job-1"]).get() == MASK
    assert seen == [None]  # the stale scope did not reach the task
    assert current_scope() is None  # and the task's own ended with it
    assert redact("probe-secret-42") == "probe-secret-42"


def test_a_plain_call_leaves_the_callers_context_as_it_was() -> None:
    app = Celery("scope-test-direct", task_cls="tandem.tasks.task_base:TandemTask")

    @app.task(name="tandem.scope_probe_direct")
    def probe(job_id: str) -> None:
        enter_scope(SecretScope.of(job_id, ["direct-secret-9"]))

    mine = SecretScope.of("caller", ["caller-secret-7"])
    enter_scope(mine)
    try:
        probe("job-2")
        assert current_scope() is mine
    finally:
        enter_scope(None)
