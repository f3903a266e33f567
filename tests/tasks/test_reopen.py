"""``Reopener``: the atomic reopen of an ended job (resume) and the start of a fork.

Each test runs on fakeredis (with Lua) and on the real Redis at 127.0.0.1:6379 db 8 (skipped when
absent locally, required in CI), like ``test_jobstate``.
"""

from __future__ import annotations

import pytest

from tandem.tasks.state.claims import Claim
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.reopen import Placement, Reopened, Reopener

JOB = "job-1"
LEASE = 30.0
RESULT = '{"job_id": "job-1", "status": "failed"}'


def key(machine: JobMachine, part: str, job_id: str = JOB) -> str:
    return machine.store.key(job_id, part)


def ended(machine: JobMachine, status: str = "failed", *, kind: str = "actor") -> Claim:
    """A job that ran to step ``kind`` of round 1 and ended there with ``status``; the claim its
    last worker held."""
    assert machine.create(JOB, '{"goal": "g"}', "dual", (1, kind), [], timeout=60, ttl_after=600)
    held = machine.claim(JOB, 1, kind, LEASE, 5)
    assert isinstance(held, Claim)
    machine.redis.hset(key(machine, "memory"), mapping={"0:thinker": "t", "0:actor": "a", "1:thinker": "t1"})
    machine.redis.set(key(machine, "cancel"), "1", ex=60)
    assert machine.finish(JOB, RESULT, status, "boom", 60)
    return held


def at_actor() -> Placement:
    return Placement(1, "actor", [{"task": "tandem.actor_turn", "args": [JOB, 1]}])


def reopen(
    machine: JobMachine, expected: str | None = None, at: Placement | None = None, **kw: object
) -> Reopened:
    expected = machine.record(JOB).get("updated_at", "") if expected is None else expected
    spec = '{"goal": "g", "max_rounds": 9}'
    return Reopener(machine).reopen(
        JOB,
        expected,
        spec,
        "dual",
        at or at_actor(),
        timeout=120,
        ttl_after=600,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("status", ["failed", "cancelled", "truncated"])
def test_an_ended_job_reopens_at_the_step_with_a_new_epoch_and_live_keys(
    machine: JobMachine, status: str
) -> None:
    ended(machine, status)
    before = machine.record(JOB)
    got = reopen(machine)
    assert got == Reopened("ok", "running", int(before["epoch"]) + 1)
    rec = machine.record(JOB)
    fields = (rec["state"], rec["round"], rec["kind"], rec["error"], rec["resumes"])
    assert fields == ("running", "1", "actor", "", "1")
    assert float(rec["deadline"]) - float(rec["updated_at"]) == pytest.approx(120, abs=1)
    assert machine.outbox(JOB)[1] == [{"task": "tandem.actor_turn", "args": [JOB, 1]}]
    assert machine.store.result(JOB) is None and not machine.store.cancel_requested(JOB)
    assert machine.redis.get(key(machine, "spec")) == b'{"goal": "g", "max_rounds": 9}'
    assert machine.redis.hlen(key(machine, "memory")) == 3  # the stored run is kept
    for part in ("state", "spec", "memory"):  # live TTLs: the deadline plus ttl_after, not the end's 60 s
        assert machine.redis.ttl(key(machine, part)) > 600
    # The reopened job runs and ends again like any job: its new result is stored.
    again = machine.claim(JOB, 1, "actor", LEASE, 5)
    assert isinstance(again, Claim)
    assert machine.finish(JOB, RESULT.replace("failed", "completed"), "completed", "", 60, again)


def test_a_claim_of_the_old_run_is_fenced_off(machine: JobMachine) -> None:
    old = ended(machine)
    assert reopen(machine).outcome == "ok"
    assert not machine.transition(old, (2, "thinker", 0, ""), [], [("1:actor", "stale")], tx="x")
    assert machine.redis.hget(key(machine, "memory"), "1:actor") is None


def test_two_resumes_of_the_same_end_reopen_it_once(machine: JobMachine) -> None:
    ended(machine)
    seen = machine.record(JOB)["updated_at"]
    assert reopen(machine, seen).outcome == "ok"
    assert reopen(machine, seen) == Reopened("state", "running")
    assert machine.record(JOB)["epoch"] == "2"


def test_a_resume_computed_before_another_run_ended_changes_nothing(machine: JobMachine) -> None:
    ended(machine)
    stale = "1.000000"
    assert reopen(machine, stale) == Reopened("moved", "failed")
    assert machine.record(JOB)["state"] == "failed"
    assert machine.store.result(JOB) is not None


def test_running_completed_and_unknown_jobs_are_refused(machine: JobMachine) -> None:
    assert reopen(machine, "") == Reopened("gone", "")
    assert machine.create(JOB, '{"goal": "g"}', "dual", (0, "thinker"), [], timeout=60, ttl_after=600)
    assert reopen(machine) == Reopened("state", "running")
    assert machine.finish(JOB, RESULT, "completed", "", 60)
    assert reopen(machine) == Reopened("state", "completed")


def test_a_job_whose_spec_expired_is_gone(machine: JobMachine) -> None:
    ended(machine)
    machine.redis.delete(key(machine, "spec"))
    assert reopen(machine).outcome == "gone"


def test_a_tool_step_keeps_its_results_and_forgets_the_placeholders(machine: JobMachine) -> None:
    ended(machine, "cancelled", kind="actor")
    tools, calls = key(machine, "tools"), key(machine, "calls")
    machine.redis.hset(tools, mapping={"1:1": "ran", "1:2": "cancelled placeholder"})
    machine.redis.hset(
        calls,
        mapping={
            "1:attempts": 1,
            "2:attempts": 1,
            "2:started": 1,
            "3:attempts": 1,
            "3:started": 1,
            "3:holder": "",
        },
    )
    sends = [{"task": "tandem.run_tool", "args": [JOB, 1, i]} for i in (2, 3)]
    at = Placement(1, "tools", sends, calls=3, pending=2)
    assert reopen(machine, at=at, forget=[2]).outcome == "ok"
    assert machine.redis.hgetall(tools) == {b"1:1": b"ran"}
    # Call 3 was interrupted: its attempt stays (an at_most_once tool is not run twice); call 2 never ran.
    assert machine.redis.hget(calls, "3:attempts") == b"1" and machine.redis.hget(calls, "2:attempts") is None
    assert machine.redis.hget(calls, "3:started") == b"1" and machine.redis.hget(calls, "2:started") is None
    assert machine.record(JOB)["pending"] == "2"
    first = machine.claim_call(JOB, 1, 2, LEASE, 5)
    assert isinstance(first, Claim) and first.attempt == 1
    assert machine.claim_call(JOB, 1, 1, LEASE, 5).reason == "done"  # type: ignore[union-attr]


def test_a_model_step_drops_the_old_calls_record(machine: JobMachine) -> None:
    ended(machine)
    machine.redis.hset(key(machine, "calls"), "1:attempts", 1)
    assert reopen(machine).outcome == "ok"
    assert not machine.redis.exists(key(machine, "calls"))


def test_a_fork_starts_with_its_copied_memory_and_only_once(machine: JobMachine) -> None:
    fork = "fork-1"
    at = Placement(1, "thinker", [{"task": "tandem.thinker_turn", "args": [fork, 1]}])
    opener = Reopener(machine)
    got = opener.start(
        fork, '{"goal": "g2"}', "dual", at, timeout=60, ttl_after=600,
        memory=[("0:thinker", "t"), ("0:actor", "a"), ("0:tool", "r")], call_results=[("0:1", "x")],
    )  # fmt: skip
    assert got == Reopened("ok", "running", 1)
    rec = machine.record(fork)
    assert (rec["state"], rec["round"], rec["kind"], rec["epoch"]) == ("running", "1", "thinker", "1")
    assert machine.redis.hlen(key(machine, "memory", fork)) == 3
    assert machine.redis.hget(key(machine, "tools", fork), "0:1") == b"x"
    for part in ("state", "spec", "memory", "tools"):
        assert machine.redis.ttl(key(machine, part, fork)) > 0
    again = opener.start(fork, "{}", "dual", at, timeout=60, ttl_after=600, memory=[("0:thinker", "other")])
    assert again == Reopened("exists", "running")
    assert machine.redis.hget(key(machine, "memory", fork), "0:thinker") == b"t"


def test_a_job_cancelled_while_parked_resumes_with_no_call_held(machine: JobMachine) -> None:
    """A job cancelled while awaiting approval had its calls held; the resumed run must be able
    to claim them (the worker then checks the approval record before running any of them)."""
    ended(machine, "cancelled", kind="actor")
    machine.redis.hset(key(machine, "state"), mapping={"held": ",1,2,", "approval_until": 99})
    sends = [{"task": "tandem.run_tool", "args": [JOB, 1, i]} for i in (1, 2)]
    assert reopen(machine, at=Placement(1, "tools", sends, calls=2, pending=2)).outcome == "ok"
    record = machine.record(JOB)
    assert record["held"] == "" and record["approval_until"] == "0"
    got = machine.claim_call(JOB, 1, 2, LEASE, 5)
    assert isinstance(got, Claim) and got.attempt == 1
