"""The job-record side of tenant admission (``tenant_hold``, ``tenant_start``) on fakeredis, the real
Redis and the one-slot rule; and the tenant keys in one slot."""

from __future__ import annotations

import time
from typing import Any

from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
from tandem.tasks.state.claims import Claim
from tandem.tasks.state.keys import job_keys
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.scripts import lua
from tandem.tasks.tenants.queue import TenantQueue
from tests.tasks.slots import SlotCheckingRedis

JOB = "job-held"


def _scripts(machine: JobMachine) -> tuple[Any, Any]:
    return machine.redis.register_script(lua("tenant_hold")), machine.redis.register_script(
        lua("tenant_start")
    )


def test_a_held_job_waits_for_its_tenant_and_starts_with_the_time_it_had_left(machine: JobMachine) -> None:
    hold, start = _scripts(machine)
    keys = job_keys(machine.prefix, JOB)
    outbox = [{"task": "tandem.thinker_turn", "args": [JOB, 0], "queue": "thinker"}]
    assert machine.create(JOB, '{"goal": "g"}', "dual", (0, "thinker"), outbox, timeout=100, ttl_after=600)
    assert hold(keys=keys, args=["3600", "waits to start"]) == 1
    record = machine.record(JOB)
    assert (record["state"], record["wait_for"], record["last_error"]) == (
        "waiting",
        "tenant",
        "waits to start",
    )
    assert float(record["deadline"]) > time.time() + 3600  # the wait does not eat the job's time
    assert machine.redis.ttl(keys[0]) > 3600 + 600
    assert hold(keys=keys, args=["3600", "again"]) == 0  # held already
    assert machine.outbox(JOB)[1] == outbox  # its first step kept back, not sent
    assert start(keys=keys, args=[]) == 1
    record = machine.record(JOB)
    assert (record["state"], record["wait_for"]) == ("running", "")
    assert 90 < float(record["deadline"]) - time.time() <= 100
    assert float(record["admitted_at"]) > 0
    assert start(keys=keys, args=[]) == 0  # started already: nothing


def test_a_job_that_started_is_never_held(machine: JobMachine) -> None:
    hold, _start = _scripts(machine)
    keys = job_keys(machine.prefix, JOB)
    assert machine.create(JOB, '{"goal": "g"}', "dual", (0, "thinker"), [], timeout=100, ttl_after=600)
    assert isinstance(machine.claim(JOB, 0, "thinker", lease=30, max_expiries=3), Claim)
    assert hold(keys=keys, args=["3600", "late"]) == 0
    assert machine.record(JOB)["state"] == "running"


def test_the_tenant_keys_share_one_slot() -> None:
    q = TenantQueue(SlotCheckingRedis(), "t", TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    assert q.admit("a0", "a", 5, 600) == "admitted"
    assert q.admit("a1", "a", 5, 600) == "waiting"
    assert q.pick(("a0", "a")) == ["a1"]
