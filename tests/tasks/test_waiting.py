"""A step parked for model-host capacity keeps its job's broker priority however it is sent again:
the countdown copy (``reschedule``'s outbox) and the early wake-up of a freed slot (its dispatch);
and its wake-up is never lost, whichever side of the park the slot frees on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from celery.exceptions import Ignore
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.hosts.capacity import Grant, HostCapacity, HostLimits, Wait, snapshot
from tandem.tasks.hosts.host_model import CapacityWait
from tandem.tasks.hosts.waiting import wait_for_capacity
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Claim, ClaimRefused
from tandem.workers.embedded import redis_answers

JOB = "job-w"
REAL_REDIS = "redis://127.0.0.1:6379/0"


class Registering(HostCapacity):
    """A full host: every waiter registers (no slot frees meanwhile)."""

    def __init__(self, redis: Any, prefix: str) -> None:
        super().__init__(redis, prefix, HostLimits("h", max_in_flight=1))
        self.dispatches: list[dict[str, Any]] = []

    def wait_for_slot(
        self, waiter_id: str, dispatch: dict[str, Any], *, priority: int = 0, fallback: float = 30.0
    ) -> tuple[bool, bool]:
        self.dispatches.append(dispatch)
        return False, False


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.integration)])
def rt(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """A runtime on fakeredis, and on the real server when one answers (keys under a unique
    prefix, removed after)."""
    runtime = Runtime(Settings(prefix=f"test-wait-{uuid.uuid4().hex[:8]}"))
    if request.param == "fakeredis":
        runtime.__dict__["redis"] = fakeredis.FakeRedis()
    elif not redis_answers(REAL_REDIS):
        pytest.skip("no Redis at 127.0.0.1:6379")
    else:
        runtime.__dict__["redis"] = Redis.from_url(REAL_REDIS)
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime
    for key in runtime.redis.scan_iter(f"{runtime.settings.prefix}:*"):
        runtime.redis.delete(key)


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
    monkeypatch.setattr(app, "send_task", lambda name, **kw: sent.append({"name": name, **kw}))

    claim = parked(rt, spec)
    host = Registering(rt.redis, rt.settings.prefix)
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


# -- no lost wake-up: a slot that frees while the step is being parked ------------------------


class OtherWorker:
    """The worker that holds the host's only slot; ``finish`` releases it as its call ends, and
    each step it wakes is delivered at once: the woken message claims its step, as ``_claim``."""

    def __init__(self, rt: Runtime, capacity: HostCapacity) -> None:
        self.rt = rt
        self.capacity = capacity
        grant = capacity.acquire(1)
        assert isinstance(grant, Grant)
        self.grant = grant
        self.claims: list[Claim | ClaimRefused] = []

    def finish(self) -> None:
        for dispatch in self.capacity.release(self.grant):
            job_id, round_no = dispatch["args"][:2]
            self.claims.append(self.rt.machine.claim(job_id, round_no, "actor", 30.0, 5))


def in_flight_wait(capacity: HostCapacity) -> CapacityWait:
    refused = capacity.acquire(1)
    assert isinstance(refused, Wait) and refused.reason == "in_flight"
    return CapacityWait(refused, capacity)


def test_a_slot_freed_just_after_the_step_registered_wakes_it(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The racy order: the step registers for a slot and, before anything else, the slot frees.
    Its wake-up must find the step parked and claim it (registered before the park, the wake-up
    met a step still claimed, was dropped, and the job sat until its countdown copy, ~30 s)."""
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(app, "send_task", lambda name, **kw: sent.append({"name": name, **kw}))
    spec = JobSpec(goal="g", reasoner="mono")
    claim = parked(rt, spec)
    capacity = HostCapacity(rt.redis, rt.settings.prefix, HostLimits("h", max_in_flight=1))
    other = OtherWorker(rt, capacity)
    register = capacity.wait_for_slot

    def register_then_slot_frees(*args: Any, **kwargs: Any) -> tuple[bool, bool]:
        registered = register(*args, **kwargs)
        other.finish()  # the other call ends right here, in the gap
        return registered

    monkeypatch.setattr(capacity, "wait_for_slot", register_then_slot_frees)
    with pytest.raises(Ignore):
        wait_for_capacity(rt, claim, spec, in_flight_wait(capacity))
    [woken] = other.claims
    assert isinstance(woken, Claim), woken  # not ClaimRefused('busy'): the wake-up was not lost
    assert rt.machine.record(JOB)["state"] == "running"


def test_a_slot_freed_after_the_park_before_registering_sends_the_step_at_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order: the slot frees once the step is parked, before it registers. Nobody is
    there to wake; the registration sees the free slot and sends the step at once."""
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(app, "send_task", lambda name, **kw: sent.append({"name": name, **kw}))
    spec = JobSpec(goal="g", reasoner="mono")
    claim = parked(rt, spec)
    capacity = HostCapacity(rt.redis, rt.settings.prefix, HostLimits("h", max_in_flight=1))
    other = OtherWorker(rt, capacity)
    park = rt.machine.reschedule

    def park_then_slot_frees(*args: Any, **kwargs: Any) -> str | float:
        until = park(*args, **kwargs)
        other.finish()
        return until

    monkeypatch.setattr(rt.machine, "reschedule", park_then_slot_frees)
    with pytest.raises(Ignore):
        wait_for_capacity(rt, claim, spec, in_flight_wait(capacity))
    now = [m for m in sent if not m.get("countdown")]
    woken = other.claims + [rt.machine.claim(*m["args"][:2], "actor", 30.0, 5) for m in now]
    assert len(woken) == 1 and isinstance(woken[0], Claim), (other.claims, sent)
    assert snapshot(rt.redis, rt.settings.prefix, capacity.limits).waiting == 0


def test_a_failed_registration_sends_the_countdown_copy(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(app, "send_task", lambda name, **kw: sent.append({"name": name, **kw}))
    spec = JobSpec(goal="g", reasoner="mono")
    claim = parked(rt, spec)
    capacity = HostCapacity(rt.redis, rt.settings.prefix, HostLimits("h", max_in_flight=1))
    OtherWorker(rt, capacity)

    def unreachable(*args: Any, **kwargs: Any) -> tuple[bool, bool]:
        raise RedisConnectionError("Redis went away")

    monkeypatch.setattr(capacity, "wait_for_slot", unreachable)
    with pytest.raises(Ignore):
        wait_for_capacity(rt, claim, spec, in_flight_wait(capacity))
    [copy] = sent  # no wake-up can come: the fallback goes
    assert copy["args"][:2] == [JOB, 0] and copy["countdown"] >= 1.0
    assert rt.machine.record(JOB)["state"] == "waiting"
