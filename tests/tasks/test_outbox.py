"""The outbox: a step whose transition was stored but whose next message could not be sent (the
broker refused, or the worker died in between) is sent by the reconciler; nothing is lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from kombu.exceptions import OperationalError

from tandem.broker_config import Settings
from tandem.reasoner.loop.step import Step
from tandem.tasks import runtime as runtime_module
from tandem.tasks import worker_signals
from tandem.tasks.intake_message import send_intake
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.claims import Reconciled
from tandem.tasks.state.reconciler import Reconciler
from tandem.tasks.steps import dispatch, intake, messages

JOB = "job-7"


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(Settings(lease_seconds=2.0, stall_seconds=60.0))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


def test_a_failed_send_after_a_transition_is_sent_by_the_reconciler(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = rt.machine
    first = Step(0, "thinker")
    assert machine.create(
        JOB,
        '{"goal": "g"}',
        "dual",
        (0, "thinker"),
        messages.step_messages(JOB, first),
        timeout=3600,
        ttl_after=600,
    )
    machine.index(JOB, 0.0, 600)

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("Error 111 connecting to the broker")

    monkeypatch.setattr(intake.app, "send_task", broker_down)
    assert dispatch.send_outbox(rt, JOB) is False
    assert machine.outbox(JOB)[1] == [{"task": "tandem.thinker_turn", "args": [JOB, 0]}]  # kept

    sent: list[tuple[str, list[Any]]] = []
    priorities: list[int | None] = []

    def record(name: str, args: list[Any], **kw: Any) -> None:
        sent.append((name, list(args)))
        priorities.append(kw.get("priority"))

    monkeypatch.setattr(intake.app, "send_task", record)
    ended: list[str] = []
    reconciler = Reconciler(
        machine,
        lease_seconds=2.0,
        stall_seconds=60.0,
        max_lease_expiries=5,
        resend=worker_signals._resend,
        end=lambda job, verdict: ended.append(job),
    )
    assert reconciler.sweep() == 0  # the sender may still be at it: wait one lease period
    state = rt.store.key(JOB, "state")
    progress = float(machine.redis.hget(state, "progress_at") or 0)
    machine.redis.hset(state, "progress_at", f"{progress - 3:.6f}")
    machine.index(JOB, 0.0, 600)
    assert reconciler.sweep() == 1
    assert sent == [("tandem.thinker_turn", [JOB, 0])]
    assert priorities == [3]  # priority 5 one level up: Redis level 3 goes ahead of the level-4 backlog
    assert machine.outbox(JOB)[1] == []
    assert ended == []
    machine.index(JOB, 0.0, 600)
    assert reconciler.sweep() == 0  # sent once, not on every sweep


def test_a_lost_intake_message_is_sent_again_with_the_stored_spec(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = {"goal": "g", "reasoner": "mono"}
    rt.store.mark_queued(JOB, "mono", intake=json.dumps(spec))
    sent: list[tuple[str, dict[str, Any], str | None]] = []
    monkeypatch.setattr(
        worker_signals.app,
        "send_task",
        lambda name, kwargs=None, task_id=None, **kw: sent.append((name, kwargs or {}, task_id)),
    )
    worker_signals._resend(JOB, Reconciled("intake"))
    assert sent == [("tandem.infer", {"spec": spec}, JOB)]  # the job id is the intake's task id


def test_the_persistence_warning() -> None:
    assert worker_signals.persistence_warning({"aof_enabled": 1}) is None
    warning = worker_signals.persistence_warning({"aof_enabled": 0, "rdb_bgsave_in_progress": 0})
    assert warning is not None and "appendonly" in warning and "restart" in warning


def test_an_intake_sent_by_tandem_returns_and_a_bare_clients_is_ignored(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``send_intake`` asks for no Celery result (the job's result is stored when it ends), so the
    intake can return rather than raise ``Ignore``, whose traceback Celery formats; a bare
    client's message (no such header) is still answered with ``Ignore``, storing nothing."""
    captured: dict[str, Any] = {}

    class Client:
        conf = intake.app.conf

        def send_task(self, name: str, **kwargs: Any) -> None:
            captured.update(kwargs, name=name)

    send_intake(Client(), JOB, {"goal": "g"})  # type: ignore[arg-type]
    assert captured["name"] == "tandem.infer" and captured["task_id"] == JOB
    assert captured["ignore_result"] is True

    monkeypatch.setattr(intake.app, "send_task", lambda *args, **kwargs: None)
    ours = intake.infer.apply(kwargs={"spec": {"goal": "g"}}, task_id=JOB, ignore_result=True)
    assert ours.state == "SUCCESS" and ours.result is None
    bare = intake.infer.apply(kwargs={"spec": {"goal": "g"}}, task_id="job-8")
    assert bare.state == "IGNORED"
    for job_id in (JOB, "job-8"):  # both jobs started
        assert rt.machine.record(job_id)["state"] == "running"
