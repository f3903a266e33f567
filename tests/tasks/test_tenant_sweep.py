"""The tenant gate's sweep: one worker of the fleet sweeps in each period (the period's lock), and
a sweep frees the slot of a job that ended where no gate saw it."""

from __future__ import annotations

import time
from typing import Any

from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.keys import WAKE_KEY
from tandem.tasks.tenants.gate import TenantGate

CAPPED = TenantSettings(default=TenantPolicy(max_running_jobs=1))


def test_one_gate_of_the_fleet_sweeps_in_a_period_and_frees_an_unseen_end(rt: Runtime) -> None:
    first, second = TenantGate(rt, CAPPED), TenantGate(rt, CAPPED)
    spec = JobSpec(goal="g", owner="team-a")
    assert first.admit("job-1", spec) == "admitted"
    assert rt.machine.create(
        "job-1", spec.model_dump_json(), "dual", (0, "thinker"), [], timeout=60, ttl_after=60
    )
    assert first.admit("job-2", spec) == "waiting"
    rt.store.finish(JobResult(job_id="job-1", status="cancelled", owner="team-a"))  # no gate saw it
    assert second.sweep(every=60) == 1  # the period's lock taken, the slot freed and given on
    assert second.queue.running_jobs("team-a") == ["job-2"]
    assert first.admit("job-3", spec) == "waiting"
    rt.redis.delete(first.queue.key("running:team-a"), first.queue.key("running"))  # a slot free
    assert first.sweep(every=60) == 0  # the same period: this gate leaves it to the next
    assert first.queue.is_waiting("job-3", "team-a")
    assert rt.redis.pttl(first.queue.key("sweep")) > 0  # the lock lives as long as its period
    rt.redis.delete(first.queue.key("sweep"))  # the next period
    assert first.sweep(every=60) == 1 and not first.queue.is_waiting("job-3", "team-a")


def _held(rt: Runtime, cancel_between: bool) -> tuple[float, int]:
    """Hold a second job of a capped tenant, as intake does (created, indexed, then held); with
    ``cancel_between``, a client cancels it once the record says ``waiting`` and before the hold
    moves its next look to its deadline. Its score in the live index, and the wake list's length
    the hold left (the cancel's own push taken away)."""
    gate = TenantGate(rt, CAPPED)
    spec = JobSpec(goal="g", owner="team-a")
    assert gate.admit("job-1", spec) == "admitted"
    assert gate.admit("job-2", spec) == "waiting"
    outbox = [{"task": "tandem.thinker_turn", "args": ["job-2", 0], "queue": "thinker"}]
    assert rt.machine.create(
        "job-2", spec.model_dump_json(), "dual", (0, "thinker"), outbox, timeout=60, ttl_after=60
    )
    rt.machine.index("job-2", time.time() + 30, 600)  # intake's first look
    wake = WAKE_KEY.format(prefix=rt.settings.prefix)
    index = rt.machine.index

    def cancelled_first(job_id: str, at: float, ttl: int, pipe: Any = None) -> None:
        if cancel_between:
            assert rt.machine.record(job_id)["state"] == "waiting"
            rt.store.request_cancel(job_id)
            rt.redis.delete(wake)
        index(job_id, at, ttl, pipe)

    rt.machine.__dict__["index"] = cancelled_first
    gate.hold("job-2", spec, created=True, verdict="waiting")
    score = rt.redis.zscore(rt.machine.shard_key(rt.machine.shard_of("job-2")), "job-2")
    assert score is not None
    return score, rt.redis.llen(wake)


def test_a_cancel_that_comes_while_a_job_is_held_keeps_its_look_now(rt: Runtime) -> None:
    score, wakes = _held(rt, cancel_between=True)
    assert score <= time.time() and wakes == 1  # due now, and a reconciler woken to sweep it


def test_a_held_job_without_a_cancel_is_next_looked_at_its_deadline(rt: Runtime) -> None:
    score, wakes = _held(rt, cancel_between=False)
    assert score > time.time() + 60 and wakes == 0
