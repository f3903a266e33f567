"""Resume and fork under tenant caps (``tandem.tasks.control.resume`` with a ``TenantGate``), on
fakeredis: a resumed or forked job is admitted like a submitted one, counts against its tenant's
cap, or waits held for its turn (no message sent) and starts when its tenant's slot frees."""

# ruff: noqa: F811  (the fixtures ``rt`` and ``sent`` are test_resume's, imported)

from __future__ import annotations

from typing import Any

import pytest

from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
from tandem.tasks.control.resume import fork_job, resume_job
from tandem.tasks.errors import ResumeRefused
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state import results
from tandem.tasks.tenants import gate as gate_module
from tandem.tasks.tenants.gate import TenantGate
from tests.tasks.test_resume import JOB, Sent, one_round, rt, sent, stored_job  # noqa: F401

TENANT = "team-a"
OTHER = "job-other"  # the tenant's job holding its one slot


@pytest.fixture
def gate(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> TenantGate:
    """The runtime's gate (``gate_of``): one running job per tenant; a job's end releases its slot
    (the worker's end hook). Its ``admissions`` list the jobs it was asked to admit."""
    capped = TenantGate(rt, TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    monkeypatch.setitem(gate_module._GATES, rt, capped)
    monkeypatch.setattr(results, "END_HOOKS", [capped.ended])
    admissions: list[str] = []
    admit = capped.admit

    def counted(job_id: str, spec: JobSpec) -> str:
        admissions.append(job_id)
        return admit(job_id, spec)

    capped.__dict__["admit"] = counted
    capped.__dict__["admissions"] = admissions
    return capped


def _running_other(rt: Runtime, gate: TenantGate) -> None:
    """Another job of the tenant, admitted and running: the tenant's one slot is taken."""
    assert gate.admit(OTHER, JobSpec(goal="g", owner=TENANT)) == "admitted"
    spec = JobSpec(goal="g", owner=TENANT).model_dump_json()
    assert rt.machine.create(OTHER, spec, "dual", (0, "thinker"), [], timeout=60, ttl_after=600)


def _end(rt: Runtime, job_id: str) -> None:
    rt.store.finish(JobResult(job_id=job_id, status="completed", owner=TENANT))


def _held(rt: Runtime, job_id: str) -> None:
    record = rt.machine.record(job_id)
    assert (record["state"], record["wait_for"]) == ("waiting", "tenant")
    waiting = [e for e in rt.store.read_events(job_id) if e.type == "waiting"]
    assert waiting and waiting[-1].data["reason"] == "tenant"


def test_a_resumed_job_waits_for_its_tenants_slot_and_starts_when_it_frees(
    rt: Runtime, sent: Sent, gate: TenantGate
) -> None:
    stored_job(rt, "failed", one_round(), owner=TENANT)
    _running_other(rt, gate)
    answer = resume_job(rt, JOB, owner=TENANT)
    assert answer["accepted"] and answer["waiting"] is True and answer["tenant"] == TENANT
    _held(rt, JOB)
    assert sent == []  # it holds no worker and no queued message
    assert gate.queue.is_waiting(JOB, TENANT)
    _end(rt, OTHER)  # the slot frees: the fair pick starts the resumed job
    assert sent == [("tandem.thinker_turn", [JOB, 1])]
    assert rt.machine.record(JOB)["state"] == "running"
    assert gate.queue.running_jobs(TENANT) == [JOB]


def test_a_fork_waits_for_its_tenants_slot_and_starts_when_it_frees(
    rt: Runtime, sent: Sent, gate: TenantGate
) -> None:
    stored_job(rt, "completed", one_round(), owner=TENANT)
    _running_other(rt, gate)
    answer = fork_job(rt, JOB, 1, fork_id="fork-1", owner=TENANT)
    assert answer["accepted"] and answer["waiting"] is True and answer["tenant"] == TENANT
    _held(rt, "fork-1")
    assert sent == []
    # A redelivered fork finds the fork it made, still waiting: it is not admitted again.
    again = fork_job(rt, JOB, 1, fork_id="fork-1", owner=TENANT)
    assert again["fork_id"] == "fork-1" and again["waiting"] is True
    assert gate.admissions.count("fork-1") == 1  # type: ignore[attr-defined]
    _end(rt, OTHER)
    assert sent == [("tandem.thinker_turn", ["fork-1", 1])]
    assert gate.queue.running_jobs(TENANT) == ["fork-1"]


@pytest.mark.parametrize("doing", ["resume", "fork"])
def test_with_room_they_start_at_once_and_count_against_the_cap(
    rt: Runtime, sent: Sent, gate: TenantGate, doing: str
) -> None:
    stored_job(rt, "failed", one_round(), owner=TENANT)
    answer: dict[str, Any] = (
        resume_job(rt, JOB, owner=TENANT)
        if doing == "resume"
        else fork_job(rt, JOB, 1, fork_id="fork-1", owner=TENANT)
    )
    started = JOB if doing == "resume" else "fork-1"
    assert "waiting" not in answer
    assert sent == [("tandem.thinker_turn", [started, 1])]
    assert gate.queue.running_jobs(TENANT) == [started]  # it holds the tenant's one slot
    assert gate.admit("job-next", JobSpec(goal="g", owner=TENANT)) == "waiting"
    _end(rt, started)  # its end releases the slot, as any job's does
    assert gate.queue.running_jobs(TENANT) == ["job-next"]


def test_a_resume_run_twice_admits_once_and_a_refused_one_takes_no_slot(
    rt: Runtime, sent: Sent, gate: TenantGate
) -> None:
    stored_job(rt, "failed", one_round(), owner=TENANT)
    _running_other(rt, gate)
    assert resume_job(rt, JOB, owner=TENANT)["waiting"] is True
    with pytest.raises(ResumeRefused, match=r"job 'job-9' is waiting, not ended") as refused:
        resume_job(rt, JOB, owner=TENANT)  # the task redelivered
    assert refused.value.reason == "state"
    assert gate.admissions == [OTHER, JOB]  # type: ignore[attr-defined]
    _end(rt, OTHER)
    assert sent == [("tandem.thinker_turn", [JOB, 1])]
    with pytest.raises(ResumeRefused, match="is running, not ended"):
        resume_job(rt, JOB, owner=TENANT)
    assert gate.admissions == [OTHER, JOB]  # type: ignore[attr-defined]
    assert gate.queue.running_jobs(TENANT) == [JOB] and len(sent) == 1
