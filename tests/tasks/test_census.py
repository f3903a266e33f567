"""The census of live jobs behind ``tandem_jobs{state}`` and ``tandem_jobs_parked{reason}``: read
from the live-job index and the records, exact up to its limit, scaled above, bounded labels."""

from __future__ import annotations

from tandem.reasoner.loop.step import Step
from tandem.tasks.metrics import JobCensusCollector
from tandem.tasks.state.census import Census, JobCensus, park_reason
from tandem.tasks.state.keys import job_key
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.steps.messages import step_messages


def _job(machine: JobMachine, job_id: str, state: str | None = None, wait_for: str = "") -> None:
    """A job created by the machine (``running`` at its first step), then moved to ``state``."""
    assert machine.create(
        job_id,
        '{"goal": "g"}',
        "dual",
        (0, "thinker"),
        step_messages(job_id, Step(0, "thinker")),
        timeout=3600,
        ttl_after=600,
    )
    machine.index(job_id, 0.0, 600)
    if state is not None:
        machine.redis.hset(
            job_key(machine.prefix, job_id, "state"), mapping={"state": state, "wait_for": wait_for}
        )


def test_the_census_counts_live_jobs_by_state_and_parked_ones_by_reason(machine: JobMachine) -> None:
    _job(machine, "a")
    _job(machine, "b", "waiting", "in_flight")
    _job(machine, "c", "waiting", "the model host")  # a transient failure's back-off
    _job(machine, "d", "awaiting_approval")
    _job(machine, "e", "completed")  # ended, its Celery result not stored yet
    _job(machine, "f", "a state of the future")
    got = JobCensus(machine.redis, machine.prefix).read()
    assert got.live == got.sampled == 6
    first = machine.record("a")["state"]
    assert got.states == {first: 1, "waiting": 2, "awaiting_approval": 1, "ended": 1, "unknown": 1}
    assert got.parked == {"in_flight": 1, "retry": 1, "approval": 1}


def test_above_its_limit_the_census_scales_a_sample_to_the_exact_total(machine: JobMachine) -> None:
    for i in range(40):
        _job(machine, f"job-{i}", "waiting", "rpm")
    got = JobCensus(machine.redis, machine.prefix, limit=16).read()
    assert got.live == 40 and got.sampled <= 16
    assert round(got.states["waiting"]) == 40 and round(got.parked["rpm"]) == 40


def test_an_empty_store_and_the_gauges_it_gives(machine: JobMachine) -> None:
    assert JobCensus(machine.redis, machine.prefix).read() == Census()
    families = {
        f.name: f
        for f in JobCensusCollector(lambda: Census(live=3, sampled=3, states={"running": 3})).collect()
    }
    states = {s.labels["state"]: s.value for s in families["tandem_jobs"].samples}
    assert (
        states["running"] == 3
        and states["queued"] == 0
        and set(states)
        == {
            "queued",
            "running",
            "waiting",
            "awaiting_approval",
            "waiting_for_children",
            "ended",
        }
    )
    assert {s.labels["reason"] for s in families["tandem_jobs_parked"].samples} == {
        "approval",
        "children",
        "in_flight",
        "rpm",
        "tpm",
        "backoff",
        "probe",
        "retry",
    }
    assert families["tandem_jobs_live"].samples[0].value == 3


def test_a_census_that_cannot_read_redis_gives_no_samples() -> None:
    def down() -> Census:
        raise ConnectionError("Redis is down")

    assert all(not f.samples for f in JobCensusCollector(down).collect())


def test_park_reasons_are_a_bounded_set() -> None:
    assert park_reason("running", "") is None
    assert park_reason("awaiting_approval", "") == "approval"
    assert park_reason("waiting", "tpm") == "tpm"
    assert park_reason("waiting", "https://user:pw@host/ said 429") == "retry"  # never free text
