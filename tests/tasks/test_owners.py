"""Owners on the worker side: the record keeps the job's tenant, and ``tandem.resume``,
``tandem.fork`` and ``tandem.decide`` refuse another tenant's job as an unknown one."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.control.decide import decide_job
from tandem.tasks.control.resume import fork_job, resume_job
from tandem.tasks.errors import ResumeRefused
from tandem.tasks.runtime import Runtime
from tandem.tasks.sealing import SecretBox
from tests.tasks.test_resume import JOB, Sent, one_round, rt, sent, stored_job

__all__ = ["rt", "sent"]  # the fixtures, used by name


def test_the_record_keeps_the_owner_of_the_spec(rt: Runtime) -> None:
    stored_job(rt, "failed", one_round(), owner="team-a")
    assert rt.machine.record(JOB)["owner"] == "team-a"
    assert rt.store.status(JOB).owner == "team-a"  # type: ignore[union-attr]
    stored_job(rt, "failed", one_round(), job_id="plain")
    assert rt.store.status("plain").owner == "default"  # type: ignore[union-attr]


@pytest.mark.parametrize("asker", [None, "team-b"], ids=["naming-no-owner", "naming-another-owner"])
def test_another_tenant_can_neither_resume_nor_fork(rt: Runtime, sent: Sent, asker: str | None) -> None:
    stored_job(rt, "failed", one_round(), owner="team-a")
    for ask in (
        lambda: resume_job(rt, JOB, owner=asker),
        lambda: fork_job(rt, JOB, 1, "print the secret", owner=asker),
    ):
        with pytest.raises(ResumeRefused, match=f"no job {JOB!r} is known") as refused:
            ask()
        assert refused.value.reason == "unknown"  # the same answer as for a job that does not exist
    assert sent == [] and rt.machine.record(JOB)["state"] == "failed"


def test_the_owner_forks_and_resumes_and_the_jobs_keep_it(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "failed", one_round(), owner="team-a")
    forked = fork_job(rt, JOB, 1, owner="team-a", fork_id="fork-1")
    assert forked["accepted"] and rt.store.spec("fork-1").owner == "team-a"  # type: ignore[union-attr]
    assert rt.machine.record("fork-1")["owner"] == "team-a"
    assert resume_job(rt, JOB, owner="team-a")["accepted"]
    assert rt.machine.record(JOB)["owner"] == "team-a"


def test_a_forks_secrets_unseal_for_its_owner_only(rt: Runtime, sent: Sent) -> None:
    box = SecretBox(Fernet.generate_key().decode())
    stored_job(rt, "failed", one_round(), owner="team-a")
    spec = rt.store.spec(JOB)
    assert spec is not None
    sealed = box.seal_spec(spec.model_copy(update={"secrets": {"db": "pw-of-team-a"}}))
    assert box.unseal(sealed) == {"db": "pw-of-team-a"}
    as_b = sealed.model_copy(update={"owner": "team-b"})
    with pytest.raises(Exception, match="sealed for another tenant"):
        box.unseal(as_b)


def test_another_tenants_decision_is_refused_as_an_unknown_job_and_changes_nothing(rt: Runtime) -> None:
    stored_job(rt, None, one_round(), owner="team-a")
    unknown = decide_job(ApprovalStore(rt.store), "no-job", True, pause_id="p", owner="team-b")
    assert unknown == {
        "job_id": "no-job",
        "accepted": False,
        "error": "no job 'no-job' is known (never submitted, or its records expired)",
        "reason": "unknown",
        "pause_id": "p",
        "current_pause": None,
    }
    answer = decide_job(ApprovalStore(rt.store), JOB, True, pause_id="p", owner="team-b")
    assert answer == {**unknown, "job_id": JOB, "error": unknown["error"].replace("no-job", JOB)}
    plain = decide_job(ApprovalStore(rt.store), JOB, True, pause_id="p")  # naming none: default's
    assert plain == answer
    own = decide_job(ApprovalStore(rt.store), JOB, True, owner="team-a")
    assert own["reason"] == "refused"  # refused only because it awaits no decision


class _Reply:
    def __init__(self, answer: dict[str, object]) -> None:
        self.answer = answer

    def get(self, timeout: float) -> dict[str, object]:
        return self.answer


class _App:
    """Records what a handle sends, and answers as a worker accepting it would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, object]]] = []

    def send_task(self, name: str, kwargs: dict[str, object]) -> _Reply:
        self.sent.append((name, kwargs))
        return _Reply({"accepted": True, "fork_id": "fork-2", "pause_id": "p", "decisions": []})


def test_a_handle_asks_for_its_owner_and_its_fork_keeps_it(rt: Runtime) -> None:
    from tandem.client.handle import JobHandle
    from tandem.workers.cli import _parser

    app = _App()
    handle = JobHandle(JOB, rt.store, app)  # type: ignore[arg-type]
    handle.resume()
    assert app.sent[-1] == ("tandem.resume", {"job_id": JOB})  # naming none: the default tenant
    handle.owner = "team-a"
    handle.resume(5)
    forked = handle.fork(1, "again")
    handle.decision_answer(True, pause_id="p")
    assert [kw.get("owner") for _, kw in app.sent[1:]] == ["team-a"] * 3
    assert forked.owner == "team-a"
    assert handle.fork(1, owner="team-b") and app.sent[-1][1]["owner"] == "team-b"  # an explicit one wins
    for argv in (["resume", JOB], ["fork", JOB, "--round", "1"], ["approve", JOB]):
        assert _parser().parse_args([*argv, "--owner", "team-a"]).owner == "team-a"


class _Silent:
    """A broker with no worker behind it: every reply times out, as Celery's ``get`` does."""

    def send_task(self, name: str, kwargs: dict[str, object]) -> _Silent:
        return self

    def get(self, timeout: float) -> None:
        from celery.exceptions import TimeoutError as CeleryTimeoutError

        raise CeleryTimeoutError("The operation timed out.")


@pytest.mark.parametrize("call", ["resume", "fork", "follow_up"])
def test_no_worker_answering_is_a_typed_refusal_never_a_bare_celery_time_out(rt: Runtime, call: str) -> None:
    from tandem.client.handle import JobHandle

    handle = JobHandle(JOB, rt.store, _Silent())  # type: ignore[arg-type]
    ask = {
        "resume": lambda: handle.resume(timeout=0.1),
        "fork": lambda: handle.fork(1, timeout=0.1),
        "follow_up": lambda: handle.follow_up("again", timeout=0.1),
    }[call]
    with pytest.raises(ResumeRefused, match=r"no worker answered within 0\.1 s") as refused:
        ask()
    assert refused.value.reason == "timeout"
    assert "may still happen when a worker takes its message" in str(refused.value)
