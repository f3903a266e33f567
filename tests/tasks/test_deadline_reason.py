"""A job ended for its deadline says the last error its step heard, as of the end itself.

The reconciler decides the end, then builds the result (spec, memory, outcome, children) before it
stores it; a step still in its model call may hear its host's answer meanwhile and note it
(``Heartbeat.note``). The reason is read last, so that answer is in it (CI once saw "last error:
none" while the host's 500 had come back a second before the job's ``final``)."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.tasks.control import children
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Claim, Message
from tandem.tasks.steps.guard import end_job


def _running(rt: Runtime) -> Claim:
    spec = JobSpec(goal="g", timeout_s=30)
    outbox = [Message(task="tandem.actor_turn", args=["job-1", 0])]
    assert rt.machine.create(
        "job-1", spec.model_dump_json(), "react", (0, "actor"), outbox, timeout=30, ttl_after=60
    )
    claim = rt.machine.claim("job-1", 0, "actor", 30, 3)
    assert isinstance(claim, Claim), claim
    return claim


@pytest.mark.parametrize("noted_before", [True, False])
def test_the_deadline_reason_names_the_error_noted_while_the_end_was_built(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, noted_before: bool
) -> None:
    claim = _running(rt)
    if noted_before:
        assert rt.machine.renew(claim, 30, "TransientModelError: HTTP 500 (first)")
    own = children.own_children

    def answer_meanwhile(rt_: Runtime, job_id: str, owner: str) -> Any:
        assert rt.machine.renew(claim, 30, "TransientModelError: HTTP 500 (meanwhile)")  # the step
        return own(rt_, job_id, owner)

    monkeypatch.setattr(children, "own_children", answer_meanwhile)
    stored = end_job("job-1", "deadline")
    assert stored is not None and stored["status"] == "failed"
    error = stored["error"]
    assert error.startswith("the job's deadline passed") and "at step actor of round 0" in error, error
    assert error.endswith("last error: TransientModelError: HTTP 500 (meanwhile)"), error


def test_a_deadline_with_no_error_heard_says_none(rt: Runtime) -> None:
    _running(rt)
    stored = end_job("job-1", "deadline")
    assert stored is not None and stored["error"].endswith("last error: none"), stored
