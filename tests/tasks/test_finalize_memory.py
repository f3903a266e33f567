"""The ``finalize`` step run at once by the step that committed a job's last messages reads the
job's outcome from that step's memory (no second read of the whole memory); run on its own (a
``tandem.finalize`` message, the reconciler), it reads the stored memory."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.reasoner.messages import ModelMessage
from tandem.tasks import runtime as runtime_module
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.pending import PendingMemory
from tandem.tasks.steps.guard import finalize_step
from tests.tasks.round_trips import count_commands

JOB = "job-f"


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(Settings())
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


def at_finalize(rt: Runtime) -> JobSpec:
    spec = JobSpec(goal="g")
    first = (1, "finalize")
    assert rt.machine.create(JOB, spec.model_dump_json(), "dual", first, [], timeout=3600, ttl_after=600)
    return spec


def delivered(text: str) -> list[ModelMessage]:
    return [
        ModelMessage(round=0, role="thinker", content="do it"),
        ModelMessage(round=0, role="actor", content=f"<deliverable>{text}</deliverable>"),
    ]


def test_the_committing_steps_memory_gives_the_outcome_without_reading_the_memory(rt: Runtime) -> None:
    spec = at_finalize(rt)
    held = PendingMemory(rt.store.memory(JOB), delivered("from the step"))
    sent = count_commands(rt.redis)
    result = finalize_step(JOB, 1, status="completed", spec=spec, memory=held)
    assert result["status"] == "completed" and result["deliverable"] == "from the step"
    assert "HVALS" not in sent and "HGETALL" not in sent


def test_finalize_on_its_own_reads_the_stored_memory(rt: Runtime) -> None:
    spec = at_finalize(rt)
    stored = rt.store.memory(JOB)
    for message in delivered("from redis"):
        stored.add_message(message)
    sent = count_commands(rt.redis)
    result = finalize_step(JOB, 1, status="completed", spec=spec)
    assert result["deliverable"] == "from redis"
    assert "HVALS" in sent
