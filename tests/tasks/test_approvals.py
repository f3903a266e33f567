"""Parking for approval over fakeredis: the park transition, ``ApprovalStore`` deciding (the first
decision per call winning, the timeout), and ``JobMachine.settle`` moving the job on.

The job of every test is parked in round 2 of a mono job: its Actor reply made 3 calls, call 2
needs no approval (sent at once), calls 1 and 3 are held.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import fakeredis
import pytest

from tandem.reasoner.approval import PendingCall
from tandem.reasoner.messages import FunctionCallResult
from tandem.tasks.control.approvals import ApprovalRecord, ApprovalStore
from tandem.tasks.control.decide import decide_job
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.state.claims import Claim, ClaimRefused, Park
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.store import JobStore
from tandem.toolkit.tool import Tool

JOB = "job"
LEASE = 30.0


def send_email(to: str, subject: str, body: str = "") -> str:
    """Send an email."""
    return to


def delete_file(path: str) -> str:
    """Delete a file."""
    return path


TOOLS = [Tool.from_function(send_email, requires_approval=True), Tool.from_function(delete_file)]
PENDING = [
    PendingCall(index=1, tool="send_email", args={"to": "a@b.c", "subject": "s"}, objective="tell", round=2),
    PendingCall(index=3, tool="delete_file", args={"path": "/tmp/x"}, round=2),
]


def park(
    store: JobStore,
    job_id: str = JOB,
    *,
    timeout_s: float = 60,
    now: float = 1000.0,
    spec: str = '{"goal": "g"}',
) -> None:
    """Create a job (``spec``: its JSON) and commit its round-2 Actor step with a park, as
    ``tandem.actor_turn`` does."""
    machine = store.machine
    assert machine.create(job_id, spec, "mono", (2, "actor"), [], timeout=3600, ttl_after=600)
    claim = machine.claim(job_id, 2, "actor", LEASE, 5)
    assert isinstance(claim, Claim)
    record = ApprovalRecord.for_round(job_id, 2, PENDING, TOOLS, timeout_s=timeout_s, now=now)
    free = [{"task": "tandem.run_tool", "args": [job_id, 2, 2]}]
    parked = Park(record.model_dump_json(), (1, 3), timeout_s, now + timeout_s)
    assert machine.transition(claim, (2, "tools", 3, ""), free, [("2:actor", "{}")], tx="t", park=parked)


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis())


@pytest.fixture
def approvals(store: JobStore) -> ApprovalStore:
    park(store)
    return ApprovalStore(store)


def events(store: JobStore, kind: str) -> list[dict[str, Any]]:
    entries = store.redis.xrange(store.key(JOB, "events"))
    return [json.loads(f[b"data"]) for _, f in entries if f[b"type"].decode() == kind]


def run_call(machine: JobMachine, index: int) -> int:
    """Claim call ``index`` of round 2 and report it done; the count-down's answer."""
    claim = machine.claim_call(JOB, 2, index, LEASE, 5)
    assert isinstance(claim, Claim), claim
    collect = [{"task": "tandem.collect_tools", "args": [JOB, 2]}]
    return machine.call_done(claim, json.dumps({"index": index}), collect)


# -- parking ----------------------------------------------------------------------------------


def test_a_parked_job_holds_its_calls_and_is_not_stalled(approvals: ApprovalStore, store: JobStore) -> None:
    machine = store.machine
    rec = machine.record(JOB)
    assert (rec["state"], rec["kind"], rec["calls"], rec["pending"], rec["held"]) == (
        "awaiting_approval",
        "tools",
        "3",
        "3",
        ",1,3,",
    )
    assert float(rec["deadline"]) - float(rec["created_at"]) == pytest.approx(3660, abs=1)  # + the wait
    assert machine.outbox(JOB)[1] == [{"task": "tandem.run_tool", "args": [JOB, 2, 2]}]  # the free call only
    assert machine.claim_call(JOB, 2, 1, LEASE, 5) == ClaimRefused("held")
    assert machine.claim_call(JOB, 2, 3, LEASE, 5) == ClaimRefused("held")
    assert run_call(machine, 2) == 1  # the free call runs; two are still pending
    # Held calls are never sent again, however long the job waits: the verdict is "parked".
    store.redis.hset(store.key(JOB, "state"), "progress_at", "1.0")
    verdict = machine.reconcile(JOB, stall=1.0, max_expiries=5, outbox_grace=1.0)
    assert (verdict.action, verdict.until, verdict.indices) == ("parked", 1060.0, ())
    assert 3600 < store.redis.ttl(approvals.key(JOB)) <= 3660 + 600
    status = store.status(JOB)
    assert status is not None and status.state == "awaiting_approval" and status.approval_until == 1060.0
    assert status.pending_approval == PENDING


def test_a_lost_free_call_of_a_parked_job_is_resent(approvals: ApprovalStore, store: JobStore) -> None:
    store.redis.hset(store.key(JOB, "state"), "progress_at", "1.0")
    verdict = store.machine.reconcile(JOB, stall=1.0, max_expiries=5, outbox_grace=1.0)
    assert (verdict.action, verdict.indices) == ("resend", (2,))


# -- deciding -----------------------------------------------------------------------------------


def test_one_batch_decides_every_call_and_the_job_goes_on(approvals: ApprovalStore, store: JobStore) -> None:
    machine = store.machine
    record = approvals.decide(
        JOB,
        [
            {"index": 1, "approve": True, "args": {"to": "c@d.e", "subject": "t"}},
            {"index": 3, "approve": False, "reason": "keep it"},
        ],
        now=1001.0,
    )
    assert record.decided and record.decided_by == "person" and record.decided_at == 1001.0
    assert [(d.index, d.approve, d.reason, d.args) for d in record.decisions] == [
        (1, True, None, {"to": "c@d.e", "subject": "t"}),
        (3, False, "keep it", None),
    ]
    assert approvals.get(JOB) == record
    rec = machine.record(JOB)
    assert (rec["state"], rec["held"], rec["pending"]) == ("running", "", "2")
    # The unused part of the wait is given back: the deadline is the original one plus the time waited.
    assert float(rec["deadline"]) - float(rec["created_at"]) == pytest.approx(3600, abs=1)
    assert machine.outbox(JOB)[1] == [{"task": "tandem.run_tool", "args": [JOB, 2, 1]}]
    rejected = store.tool_result(JOB, 2, 3)
    assert rejected is not None and rejected.status == "failed" and "Reason: keep it" in rejected.output
    assert machine.claim_call(JOB, 2, 3, LEASE, 5) == ClaimRefused("done")
    assert run_call(machine, 1) == 1 and run_call(machine, 2) == 2  # the last one moves to collect
    assert machine.record(JOB)["kind"] == "collect"
    [decided] = events(store, "approval_decided")
    assert decided["complete"] is True and decided["by"] == "person" and len(decided["decisions"]) == 2
    [result] = [e for e in events(store, "tool_result") if e["index"] == 3]
    assert result["status"] == "failed"
    for key in store.redis.scan_iter(match="tandem:*"):
        assert store.redis.ttl(key) > 0, key


def test_a_call_that_asked_while_the_approval_was_open_goes_again_with_the_approved_ones(
    approvals: ApprovalStore, store: JobStore
) -> None:
    """Call 2 (free) asks a question while calls 1 and 3 wait for approval: it is released with
    no result (``asking``); the decision that ends the pause sends it again at once, not after
    the reconciler's stall."""
    from tandem.tasks.control.questions import QuestionPending, QuestionStore
    from tandem.toolkit.context import Question

    claim = store.machine.claim_call(JOB, 2, 2, LEASE, 5)
    assert isinstance(claim, Claim), claim
    question = Question(text="Which path?", round=2, call_index=2)
    assert QuestionStore(store).park(claim, QuestionPending(question, "delete_file"), 60) == "busy"
    assert store.machine.record(JOB)["asking"] == "2|,2,"
    approvals.decide(JOB, True, now=1001.0)
    assert store.machine.outbox(JOB)[1] == [
        {"task": "tandem.run_tool", "args": [JOB, 2, 1]},
        {"task": "tandem.run_tool", "args": [JOB, 2, 3]},
        {"task": "tandem.run_tool", "args": [JOB, 2, 2]},
    ]
    assert store.machine.record(JOB)["asking"] == ""


def test_every_call_rejected_after_the_free_one_ran_goes_to_collect(
    approvals: ApprovalStore, store: JobStore
) -> None:
    assert run_call(store.machine, 2) == 1
    approvals.decide(JOB, False, now=1001.0)
    rec = store.machine.record(JOB)
    assert (rec["state"], rec["kind"], rec["pending"]) == ("running", "collect", "0")
    assert store.machine.outbox(JOB)[1] == [{"task": "tandem.collect_tools", "args": [JOB, 2]}]
    for index in (1, 3):
        result = store.tool_result(JOB, 2, index)
        assert isinstance(result, FunctionCallResult) and result.status == "failed"


def test_calls_may_be_decided_one_by_one_and_each_once(approvals: ApprovalStore, store: JobStore) -> None:
    first = approvals.decide(JOB, [{"index": 3, "approve": True}], now=1001.0)
    assert not first.decided and [p.index for p in first.undecided()] == [1]
    assert store.machine.record(JOB)["state"] == "awaiting_approval"  # a partial batch moves nothing
    with pytest.raises(DecisionRefused, match="call 3 was decided already; nothing was decided"):
        approvals.decide(JOB, [{"index": 3, "approve": False}, {"index": 1, "approve": True}], now=1002.0)
    assert approvals.get(JOB) == first  # the refused batch changed nothing, not even call 1
    done = approvals.decide(JOB, False, now=1003.0)  # False: reject every undecided call
    assert done.decided and [(d.index, d.approve, d.reason) for d in done.decisions] == [
        (1, False, "rejected without a reason"),
        (3, True, None),
    ]
    assert store.machine.outbox(JOB)[1] == [{"task": "tandem.run_tool", "args": [JOB, 2, 3]}]
    with pytest.raises(DecisionRefused, match="was decided already"):
        approvals.decide(JOB, True, now=1004.0)


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        pytest.param(
            [{"index": 2, "approve": True}], r"no call 2 is waiting.*waiting calls: 1, 3", id="unknown-index"
        ),
        pytest.param(
            [{"index": 1, "approve": True, "args": {"to": "x"}}],
            r"edited args of call 1 \('send_email'\) do not fit its schema: "
            r"field '\(arguments\)': 'subject' is a required property",
            id="edited-args",
        ),
        pytest.param([{"index": 1, "approve": "maybe"}], "field 'approve'", id="not-a-bool"),
        pytest.param([], "the batch holds no decision", id="empty"),
        pytest.param("yes", "decisions must be a list", id="not-a-list"),
    ],
)
def test_a_decision_that_does_not_fit_is_refused_and_changes_nothing(
    approvals: ApprovalStore, store: JobStore, decisions: Any, message: str
) -> None:
    before, record = approvals.get(JOB), store.machine.record(JOB)
    with pytest.raises(DecisionRefused, match=message):
        approvals.decide(JOB, decisions, now=1001.0)
    assert approvals.get(JOB) == before and store.machine.record(JOB) == record


def test_a_job_not_waiting_is_refused_and_nothing_changes(approvals: ApprovalStore, store: JobStore) -> None:
    with pytest.raises(DecisionRefused, match="job 'other' is not waiting for a decision"):
        approvals.decide("other", True)
    store.machine.finish(JOB, '{"job_id": "job", "status": "cancelled"}', "cancelled", "", 60)
    before = approvals.get(JOB)
    with pytest.raises(DecisionRefused, match=r"job 'job' has ended \(cancelled\); nothing was decided"):
        approvals.decide(JOB, True, now=1001.0)
    assert approvals.get(JOB) == before
    # A record left from a round the job is no longer in (forged here) changes nothing either.
    park(store, "moved-on")
    store.redis.hset(store.key("moved-on", "state"), mapping={"state": "running", "round": "3"})
    with pytest.raises(DecisionRefused, match=r"is not waiting for a decision \(it is running, round 3\)"):
        approvals.decide("moved-on", True, now=1001.0)
    assert store.tool_result("moved-on", 2, 1) is None


def test_racing_decisions_the_first_wins(approvals: ApprovalStore, store: JobStore) -> None:
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def decide(n: int) -> None:
        barrier.wait()
        try:
            approvals.decide(JOB, [{"index": 1, "approve": n % 2 == 0, "reason": f"r{n}"}], now=1001.0)
            outcomes.append(f"won {n}")
        except DecisionRefused as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1, outcomes
    assert sum("call 1 was decided already" in o for o in outcomes) == 7
    record = approvals.get(JOB)
    assert record is not None
    [decision] = record.decisions
    n = int(winners[0].split()[1])
    assert (decision.approve, decision.reason) == (n % 2 == 0, f"r{n}")


def test_racing_complete_batches_move_the_job_once(approvals: ApprovalStore, store: JobStore) -> None:
    barrier = threading.Barrier(6)
    won: list[int] = []

    def decide(n: int) -> None:
        barrier.wait()
        try:
            approvals.decide(JOB, n % 2 == 0, now=1001.0)
            won.append(n)
        except DecisionRefused:
            pass

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    rec = store.machine.record(JOB)
    approve = won[0] % 2 == 0
    assert rec["pending"] == ("3" if approve else "1")  # two rejections counted down once, or none
    assert len(events(store, "approval_decided")) == 1


# -- the timeout --------------------------------------------------------------------------------


def test_no_decision_in_time_rejects_what_is_undecided(approvals: ApprovalStore, store: JobStore) -> None:
    approvals.decide(JOB, [{"index": 1, "approve": True}], now=1010.0)
    assert approvals.expire_if_due(JOB, now=1059.0).decided is False  # type: ignore[union-attr]
    expired = approvals.expire_if_due(JOB, now=1060.0)
    assert expired is not None and expired.decided and expired.decided_by == "timeout"
    assert [(d.index, d.approve, d.reason) for d in expired.decisions] == [
        (1, True, None),
        (3, False, "no decision within 60 s"),
    ]
    assert approvals.expire_if_due(JOB, now=2000.0) == expired  # idempotent
    assert events(store, "approval_decided")[-1]["by"] == "timeout"
    assert store.machine.record(JOB)["state"] == "running"
    rejected = store.tool_result(JOB, 2, 3)
    assert rejected is not None and "no decision within 60 s" in rejected.output


def test_a_late_decision_is_refused_and_the_timeout_applies(
    approvals: ApprovalStore, store: JobStore
) -> None:
    with pytest.raises(DecisionRefused, match="after the 60 s approval timeout"):
        approvals.decide(JOB, True, now=1061.0)
    record = approvals.get(JOB)
    assert record is not None and record.decided_by == "timeout"
    assert all(not d.approve for d in record.decisions)
    assert store.machine.record(JOB)["pending"] == "1"  # only the free call is left


def test_the_decide_task_function_answers_in_json(store: JobStore) -> None:
    park(store, now=time.time(), timeout_s=600)
    approvals = ApprovalStore(store)
    refused = decide_job(approvals, JOB, [{"index": 9, "approve": True}])
    assert refused["accepted"] is False and "no call 9 is waiting" in refused["error"]
    assert decide_job(approvals, 42, True) == {
        "job_id": None,
        "accepted": False,
        "error": "no job 42 is known (never submitted, or its records expired)",
        "reason": "unknown",
        "pause_id": None,
        "current_pause": None,
    }
    accepted = decide_job(approvals, JOB, [{"index": 1, "approve": True}, {"index": 3, "approve": True}])
    assert accepted == {
        "job_id": JOB,
        "accepted": True,
        "pause_id": "job:2:tools:1",
        "round": 2,
        "complete": True,
        "decisions": [{"index": 1, "approve": True}, {"index": 3, "approve": True}],
    }


# -- the reconciler -----------------------------------------------------------------------------


def test_the_reconciler_rejects_only_after_the_timeout_and_cancel_ends_a_parked_job(
    store: JobStore,
) -> None:
    from tandem.tasks.state.reconciler import Reconciler

    park(store, now=time.time(), timeout_s=0.6)
    store.machine.mark_sent(JOB, store.machine.outbox(JOB)[0])
    store.machine.index(JOB, 0, 600)
    expired: list[str] = []
    ended: list[str] = []
    reconciler = Reconciler(
        store.machine,
        lease_seconds=5,
        stall_seconds=5,
        max_lease_expiries=5,
        resend=lambda job, verdict: None,
        end=lambda job, verdict: ended.append(verdict.action),
        expire=expired.append,
    )
    reconciler.sweep()
    assert expired == [] and ended == []
    time.sleep(0.7)
    store.redis.zadd(store.machine.shard_key(store.machine.shard_of(JOB)), {JOB: 0})
    reconciler.sweep()
    assert expired == [JOB]
    ApprovalStore(store).expire_if_due(JOB)
    assert store.machine.record(JOB)["state"] == "running"

    park(store, "cancelled")
    store.request_cancel("cancelled")
    assert store.machine.reconcile("cancelled", 5, 5, 5).action == "cancel"
