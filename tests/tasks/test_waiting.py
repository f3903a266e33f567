"""A step parked for model-host capacity keeps its job's broker priority however it is sent again:
the countdown copy (``reschedule``'s outbox) and the early wake-up of a freed slot (its dispatch)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from celery.exceptions import Ignore

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks import turns
from tandem.tasks.capacity import HostCapacity, HostLimits, Wait
from tandem.tasks.host_model import CapacityWait
from tandem.tasks.jobstate import Claim
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.waiting import wait_for_capacity

JOB = "job-w"


class Registering(HostCapacity):
    """A full host: every waiter registers (no slot frees meanwhile)."""

    def __init__(self, redis: Any) -> None:
        super().__init__(redis, "tandem", HostLimits("h", max_in_flight=1))
        self.dispatches: list[dict[str, Any]] = []

    def wait_for_slot(
        self, waiter_id: str, dispatch: dict[str, Any], *, priority: int = 0, fallback: float = 30.0
    ) -> tuple[bool, bool]:
        self.dispatches.append(dispatch)
        return False, False


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(Settings())
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


def parked(rt: Runtime, spec: JobSpec) -> Claim:
    machine = rt.machine
    assert machine.create(JOB, spec.model_dump_json(), "mono", (0, "actor"), [], timeout=3600, ttl_after=600)
    got = machine.claim(JOB, 0, "actor", 30.0, 5)
    assert isinstance(got, Claim)
    return got


@pytest.mark.parametrize(("priority", "level"), [(8, 1), (2, 7)])
def test_both_ways_back_carry_the_jobs_priority(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, priority: int, level: int
) -> None:
    spec = JobSpec(goal="g", reasoner="mono", priority=priority)
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(turns.app, "send_task", lambda name, **kw: sent.append({"name": name, **kw}))

    claim = parked(rt, spec)
    host = Registering(rt.redis)
    wait = Wait(host="h", reason="in_flight", until=12.0, now=10.0)
    with pytest.raises(Ignore):
        wait_for_capacity(rt, claim, spec, CapacityWait(wait, host))
    [dispatch] = host.dispatches
    assert dispatch["options"]["priority"] == level  # Redis serves level 0 first
    assert dispatch["options"]["task_id"].startswith(f"{JOB}.0.")
    assert sent == []  # registered: the freed slot (or the reconciler) sends it

    claim = rt.machine.claim(JOB, 0, "actor", 30.0, 5)
    assert isinstance(claim, Claim)
    budget = Wait(host="h", reason="rpm", until=13.0, now=10.0)
    with pytest.raises(Ignore):
        wait_for_capacity(rt, claim, spec, CapacityWait(budget, host))
    [countdown] = sent
    assert (countdown["priority"], countdown["countdown"] >= 3.0) == (level, True)
