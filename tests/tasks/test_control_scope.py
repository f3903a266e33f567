"""``tandem.decide``, ``tandem.resume`` and ``tandem.fork`` run in the job's secret scope: a secret of
the job that a person pastes into edited args, a reason or a fork's goal, or that the job's own
context holds, never appears in what they publish (the job's events) or log (Celery's line of the
task's outcome included, which is written before the task's scope ends).

The tasks run as a worker runs a message (``Task.apply``) on a runtime over fakeredis, the log
records pass through the worker's ``RedactingFilter``, and the secret has no credential's shape:
only the job's scope can mask it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from cryptography.fernet import Fernet

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.runtime import Runtime
from tandem.toolkit.redaction import RedactingFilter, current_scope
from tests.tasks.test_approvals import park
from tests.tasks.test_one_refusal import Sent, call, registered, sent
from tests.tasks.test_resume import one_round, stored_job

__all__ = ["registered", "sent"]  # fixtures, used by name

TOKEN = "quokka-8817-zebra"
JOB = "job-with-a-secret"


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    settings = Settings(
        lease_seconds=2.0, stall_seconds=60.0, memory_ttl=600, secrets_key=Fernet.generate_key().decode()
    )
    runtime = Runtime(settings)
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The log lines as a worker writes them: every record through the ``RedactingFilter``."""
    caplog.set_level(logging.INFO)
    caplog.handler.addFilter(RedactingFilter())
    yield caplog


def events(rt: Runtime, job_id: str) -> str:
    """Every event the job published, as stored."""
    return json.dumps([json.loads(f[b"data"]) for _, f in rt.redis.xrange(rt.store.key(job_id, "events"))])


def test_a_decision_publishes_and_logs_the_jobs_secret_masked(
    rt: Runtime, sent: Sent, logged: pytest.LogCaptureFixture
) -> None:
    park(rt.store, JOB, spec=json.dumps({"goal": "g", "secrets": {"tok": TOKEN}}), now=1e12)
    reply = call(
        "tandem.decide",
        job_id=JOB,
        pause_id=f"{JOB}:2:tools:1",
        decisions=[
            {"index": 1, "approve": True, "args": {"to": f"mail {TOKEN}", "subject": "s"}},
            {"index": 3, "approve": False, "reason": f"not with {TOKEN}"},
        ],
    )
    assert reply["accepted"] is True and current_scope() is None  # the task's scope ended with it
    published = events(rt, JOB)
    assert '"mail ***"' in published and '"not with ***"' in published and TOKEN not in published
    [outcome] = [r.getMessage() for r in logged.records if "tandem.decide" in r.getMessage()]
    assert "succeeded" in outcome and "'reason': 'not with ***'" in outcome  # Celery's repr: args cut
    assert TOKEN not in logged.text


@pytest.mark.parametrize(
    ("name", "asked"),
    [("tandem.resume", {"max_rounds": 5}), ("tandem.fork", {"round": 1, "goal": f"again, with {TOKEN}"})],
)
def test_a_resume_and_a_fork_publish_and_log_the_jobs_secret_masked(
    rt: Runtime, sent: Sent, logged: pytest.LogCaptureFixture, name: str, asked: dict[str, Any]
) -> None:
    stored_job(rt, "failed", one_round(), job_id=JOB, secrets={"tok": TOKEN}, context=f"use {TOKEN}")
    reply = call(name, job_id=JOB, **asked)
    assert reply["accepted"] is True, reply
    started = reply.get("fork_id", JOB)
    published = events(rt, started)
    [spec] = [e["spec"] for e in json.loads(published) if "spec" in e]
    assert spec["context"] == "use ***" and spec["secrets"] == {"tok": "***"}
    if name == "tandem.fork":
        assert spec["goal"] == "again, with ***"
    assert TOKEN not in published and TOKEN not in logged.text
    assert any(name in r.getMessage() and "succeeded" in r.getMessage() for r in logged.records)
    kept = rt.store.spec(started)
    assert kept is not None and kept.secrets == {"tok": TOKEN}  # kept for the job's tools, never shown
