"""Decisions bound to their pause, over fakeredis: pause ids, the atomic check in ``settle``,
answers kept by idempotency key, a client's withdrawal racing a worker, and edited args checked
as strictly on workers as in-process.

The job of every test parks in round 2 (``tests.tasks.test_approvals.park``): call 1 (a mail)
and call 3 wait, call 2 runs. ``next_pause`` takes it on to a second pause in round 3, whose call 1
is a mail to someone else: the case a late decision must never reach.
"""

from __future__ import annotations

import json
import time
from typing import Any

import fakeredis
import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

from tandem.client.handle import JobHandle
from tandem.reasoner.approval import Decision, PendingCall
from tandem.tasks.control.approvals import ApprovalRecord, ApprovalStore
from tandem.tasks.control.decide import decide_job
from tandem.tasks.control.parking import announce
from tandem.tasks.errors import DecisionRefused, DecisionTimeout, StalePauseError
from tandem.tasks.state.claims import Claim, Park
from tandem.tasks.state.store import JobStore
from tandem.toolkit.errors import ToolArgumentsError
from tandem.toolkit.tool import Tool
from tests.tasks.test_approvals import JOB, LEASE, TOOLS, events, park, run_call

FIRST = "job:2:tools:1"
SECOND = "job:3:tools:2"
EVE = [PendingCall(index=1, tool="send_email", args={"to": "eve@x.y", "subject": "Wire money"}, round=3)]


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis())


@pytest.fixture
def approvals(store: JobStore) -> ApprovalStore:
    park(store)
    return ApprovalStore(store)


def next_pause(store: JobStore, *, now: float) -> Park:
    """From the first pause, decided and collected, on to round 3's pause (call 1: a mail to eve)."""
    machine = store.machine
    assert run_call(machine, 2) in (1, 2)
    if machine.record(JOB)["kind"] != "collect":  # the decision left nothing to run: collect now
        raise AssertionError(machine.record(JOB))
    claim = machine.claim(JOB, 2, "collect", LEASE, 5)
    assert isinstance(claim, Claim)
    assert machine.transition(claim, (3, "actor", 0, ""), [], [], tx="collect-2")
    claim = machine.claim(JOB, 3, "actor", LEASE, 5)
    assert isinstance(claim, Claim)
    record = ApprovalRecord.for_round(JOB, 3, EVE, TOOLS, timeout_s=60, now=now)
    parked = Park(record.model_dump_json(), (1,), 60, now + 60)
    assert machine.transition(claim, (3, "tools", 1, ""), [], [("3:actor", "{}")], tx="actor-3", park=parked)
    return parked


# -- pause ids ----------------------------------------------------------------------------------


def test_every_pause_has_an_id_counted_in_the_job_record(approvals: ApprovalStore, store: JobStore) -> None:
    first = approvals.get(JOB)
    assert first is not None and (first.pause_id, first.seq) == (FIRST, 1)
    assert first.model_dump(mode="json")["pause_id"] == FIRST  # in the API's job view too
    status = store.status(JOB)
    assert status is not None and status.pause_id == FIRST
    approvals.decide(JOB, False, pause=FIRST, now=1001.0)  # reject both: the round goes on
    assert store.status(JOB).pause_id is None  # type: ignore[union-attr]
    parked = next_pause(store, now=1100.0)
    announce(store, JOB, parked)
    second = approvals.get(JOB)
    assert second is not None and (second.pause_id, second.seq, second.round) == (SECOND, 2, 3)
    asked = events(store, "approval_requested")[-1]
    assert (asked["pause_id"], asked["seq"], asked["round"]) == (SECOND, 2, 3)
    assert events(store, "approval_decided")[-1]["pause_id"] == FIRST
    assert store.machine.record(JOB)["pause_seq"] == "2"


# -- the late decision of issue 25 ---------------------------------------------------------------


def test_a_late_approve_never_lands_on_the_next_pause(approvals: ApprovalStore, store: JobStore) -> None:
    """Pause 1's call 1 mails ann; its timeout rejects it; pause 2's call 1 mails eve. The
    person's approve of pause 1, call 1 arrives now: refused, and pause 2 is untouched."""
    assert approvals.expire_if_due(JOB, now=1061.0).decided_by == "timeout"  # type: ignore[union-attr]
    next_pause(store, now=1100.0)
    before = store.redis.get(approvals.key(JOB))
    answer = approvals.answer(JOB, [{"index": 1, "approve": True}], pause=FIRST, key="late", now=1101.0)
    assert answer["accepted"] is False and answer["reason"] == "stale_pause"
    assert (answer["pause_id"], answer["current_pause"]) == (FIRST, SECOND)
    assert "that pause is not the current one (it waits on pause 'job:3:tools:2')" in answer["error"]
    assert store.redis.get(approvals.key(JOB)) == before  # nothing changed
    assert store.machine.record(JOB)["state"] == "awaiting_approval"
    with pytest.raises(StalePauseError) as stale:  # the same through decide, as a typed error
        approvals.decide(JOB, [{"index": 1, "approve": True}], pause=FIRST, now=1101.0)
    assert stale.value.current_pause == SECOND and stale.value.pause_id == FIRST
    # The DESIGN.md wire form: the pause named inside each decision.
    named = decide_job(approvals, JOB, [{"pause_id": FIRST, "index": 1, "approve": True}])
    assert named["reason"] == "stale_pause" and store.redis.get(approvals.key(JOB)) == before


def test_a_decision_for_a_pause_that_ended_by_its_timeout_is_refused(
    approvals: ApprovalStore, store: JobStore
) -> None:
    answer = approvals.answer(JOB, True, pause=FIRST, now=1061.0)  # came after the 60 s timeout
    assert answer["reason"] == "stale_pause" and "after the 60 s approval timeout" in answer["error"]
    record = approvals.get(JOB)
    assert record is not None and record.decided_by == "timeout"  # the timeout's rejection stands
    again = approvals.answer(JOB, True, pause=FIRST, now=1062.0)
    assert again["reason"] == "stale_pause" and "decided already (by timeout)" in again["error"]


def test_the_pause_check_is_in_the_script_that_stores(approvals: ApprovalStore, store: JobStore) -> None:
    """A decision checked in Python against pause 1 that reaches ``settle`` after pause 2 began
    is refused by the script itself, even with the current record as the one 'read'."""
    approvals.decide(JOB, False, pause=FIRST, now=1001.0)
    next_pause(store, now=1100.0)
    raw = store.redis.get(approvals.key(JOB)).decode()  # type: ignore[union-attr]
    decided = ApprovalRecord.model_validate_json(raw).model_copy(
        update={"decisions": [Decision(index=1, approve=True)]}
    )
    reply = store.machine.settle(
        JOB, 3, raw, decided.model_dump_json(), complete=True, rejected=[], approved=[], collect=[], seq=1
    )
    assert reply == ("stale", "2", "awaiting_approval", "3")
    assert store.redis.get(approvals.key(JOB)).decode() == raw  # type: ignore[union-attr]
    assert store.machine.record(JOB)["state"] == "awaiting_approval"


def test_a_batch_naming_two_pauses_or_a_bad_id_is_refused(approvals: ApprovalStore) -> None:
    two = [
        {"pause_id": FIRST, "index": 1, "approve": True},
        {"pause_id": SECOND, "index": 3, "approve": True},
    ]
    with pytest.raises(DecisionRefused, match="one batch answers one pause"):
        approvals.decide(JOB, two, now=1001.0)
    with pytest.raises(DecisionRefused, match="pause_id must be a pause's id string"):
        approvals.decide(JOB, True, pause=7, now=1001.0)  # type: ignore[arg-type]
    assert approvals.get(JOB).decisions == []  # type: ignore[union-attr]


# -- answers by idempotency key ------------------------------------------------------------------


def test_the_same_key_gets_the_same_answer_and_applies_once(
    approvals: ApprovalStore, store: JobStore
) -> None:
    first = approvals.answer(JOB, [{"index": 1, "approve": True}], pause=FIRST, key="k1", now=1001.0)
    assert first["accepted"] is True and first["pause_id"] == FIRST and first["complete"] is False
    again = approvals.answer(JOB, [{"index": 1, "approve": True}], pause=FIRST, key="k1", now=1002.0)
    assert again == first  # not "call 1 was decided already"
    assert len(events(store, "approval_decided")) == 1
    approvals.answer(JOB, [{"index": 3, "approve": False}], pause=FIRST, key="k2", now=1003.0)
    assert (
        approvals.answer(JOB, [{"index": 1, "approve": True}], pause=FIRST, key="k1") == first
    )  # pause over
    refused = approvals.answer(JOB, [{"index": 9, "approve": True}], pause=FIRST, key="k3")
    assert refused["accepted"] is False
    assert approvals.answer(JOB, True, pause=FIRST, key="k3") == refused  # a key names one decision
    ttl = store.redis.ttl(store.machine.decisions_key(JOB))
    assert 0 < ttl <= store.redis.ttl(store.key(JOB, "state")) + 1


def test_a_bad_key_is_refused(approvals: ApprovalStore) -> None:
    answer = approvals.answer(JOB, True, key="x" * 201)
    assert answer["accepted"] is False and "idempotency_key must be a string of 1 to 200" in answer["error"]


def test_a_withdrawal_and_a_worker_race_through_the_key(approvals: ApprovalStore, store: JobStore) -> None:
    machine = store.machine
    withdrawn = json.dumps({"accepted": False, "reason": "withdrawn", "error": "gave up"})
    assert json.loads(machine.remember(JOB, "w", withdrawn))["reason"] == "withdrawn"
    late = approvals.answer(JOB, True, pause=FIRST, key="w", now=1001.0)  # the queued message arrives
    assert late["reason"] == "withdrawn" and approvals.get(JOB).decisions == []  # type: ignore[union-attr]
    applied = approvals.answer(JOB, [{"index": 1, "approve": True}], pause=FIRST, key="a", now=1001.0)
    assert json.loads(machine.remember(JOB, "a", withdrawn)) == applied  # the worker came first: it stands


# -- JobHandle: a definite outcome, never a bare Celery timeout ----------------------------------


class _Sent:
    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def get(self, timeout: float) -> Any:
        if self.reply is None:
            raise CeleryTimeoutError("The operation timed out.")
        return self.reply


class _App:
    """A Celery app whose ``tandem.decide`` is applied at once by a worker, or queued (no worker)."""

    def __init__(self, store: JobStore, *, worker: bool) -> None:
        self.store = store
        self.worker = worker
        self.queued: list[dict[str, Any]] = []

    def send_task(self, name: str, kwargs: dict[str, Any]) -> _Sent:
        assert name == "tandem.decide"
        if not self.worker:
            self.queued.append(kwargs)
            return _Sent(None)
        return _Sent(decide_job(ApprovalStore(self.store), **kwargs))


def test_a_decision_no_worker_applies_is_withdrawn_and_never_applies(store: JobStore) -> None:
    """The second half of the issue: approve with no worker up, then reject; the queued approve
    must not win once workers start."""
    park(store, JOB, timeout_s=600, now=time.time())  # a live deadline this time
    approvals = ApprovalStore(store)
    idle = _App(store, worker=False)
    with pytest.raises(DecisionTimeout, match="withdrawn: it will never apply"):
        JobHandle(JOB, store, idle).approve(1, timeout=0.1)  # type: ignore[arg-type]
    [queued] = idle.queued
    assert queued["pause_id"] == FIRST and queued["idempotency_key"]
    decided = JobHandle(JOB, store, _App(store, worker=True)).reject("not ann")  # type: ignore[arg-type]
    assert [(d.index, d.approve) for d in decided] == [(1, False), (3, False)]
    late = decide_job(approvals, **queued)  # workers start: the queued approve arrives
    assert late["reason"] == "withdrawn"
    record = approvals.get(JOB)
    assert record is not None and [d.approve for d in record.decisions] == [False, False]


def test_a_handle_names_the_current_pause_and_reuses_a_key(store: JobStore) -> None:
    park(store, JOB, timeout_s=600, now=time.time())
    app = _App(store, worker=True)
    handle = JobHandle(JOB, store, app)  # type: ignore[arg-type]
    assert [d.index for d in handle.approve(1, idempotency_key="same")] == [1]
    assert [d.index for d in handle.approve(1, idempotency_key="same")] == [1]  # no "decided already"
    with pytest.raises(StalePauseError) as stale:
        handle.approve(3, pause_id="job:1:tools:0")
    assert stale.value.current_pause == FIRST
    handle.approve(3)
    with pytest.raises(DecisionRefused, match="not waiting for a decision"):
        handle.approve()  # no pause is current: refused before anything is sent


# -- edited args ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "field"),
    [
        pytest.param({"to": "a@b.c", "subject": "s", "bcc": "evil@x.y"}, "(arguments)", id="unknown-key"),
        pytest.param({"to": 5, "subject": "s"}, "to", id="wrong-type"),
        pytest.param({"subject": "s"}, "(arguments)", id="missing-required"),
    ],
)
def test_edited_args_are_checked_on_workers_as_in_process(
    approvals: ApprovalStore, args: dict[str, Any], field: str
) -> None:
    with pytest.raises(ToolArgumentsError):
        TOOLS[0].validate_args(args)  # in-process: the tool itself refuses them
    record = approvals.get(JOB)
    assert record is not None and record.schemas["send_email"]["additionalProperties"] is False
    answer = approvals.answer(JOB, [{"index": 1, "approve": True, "args": args}], pause=FIRST, now=1001.0)
    assert answer["accepted"] is False and "do not fit its schema" in answer["error"]
    assert f"field {field!r}" in answer["error"]
    assert approvals.get(JOB).decisions == []  # type: ignore[union-attr]


def test_a_tool_with_its_own_schema_keeps_it() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    mcp = Tool(name="search", description="d", function=lambda **_: None, schema=schema)
    pending = [PendingCall(index=1, tool="search", args={"q": "x"})]
    record = ApprovalRecord.for_round(JOB, 0, pending, [mcp], timeout_s=60)
    assert record.schemas["search"] == schema  # the tool's own (it accepts extra keys in-process too)


# -- resume and fork -----------------------------------------------------------------------------


def test_a_fork_counts_its_pauses_on_from_its_origin(approvals: ApprovalStore, store: JobStore) -> None:
    from tandem.tasks.state.reopen import Placement, Reopener

    at = Placement(round=1, kind="actor", outbox=[])
    assert store.machine.pause(JOB)[1] == 1
    got = Reopener(store.machine).start(
        "fork-1", '{"goal": "g"}', "mono", at, timeout=60, ttl_after=60, memory=[]
    )
    assert got.outcome == "ok" and store.machine.pause("fork-1")[1] == 0  # no count given: from 0
    got = Reopener(store.machine).start(
        "fork-2", '{"goal": "g"}', "mono", at, timeout=60, ttl_after=60, memory=[], pause_seq=1
    )
    assert got.outcome == "ok" and store.machine.record("fork-2")["pause_seq"] == "1"  # its next pause is 2


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        pytest.param({"pause_id": 5}, "pause_id must be a pause's id string", id="pause-id-not-a-string"),
        pytest.param({"pause_id": ""}, "pause_id must be a pause's id string", id="pause-id-empty"),
        pytest.param({"idempotency_key": 5}, "idempotency_key must be a string", id="key-not-a-string"),
        pytest.param({"idempotency_key": ""}, "idempotency_key must be a string", id="key-empty"),
    ],
)
def test_a_malformed_decide_message_is_a_refusal(
    approvals: ApprovalStore, kwargs: dict[str, Any], says: str
) -> None:
    answer = decide_job(approvals, JOB, True, **kwargs)
    assert answer["accepted"] is False and says in answer["error"]
    assert approvals.get(JOB).decisions == []  # type: ignore[union-attr]


def test_an_unknown_job_gets_no_key_written(store: JobStore) -> None:
    answer = ApprovalStore(store).answer("nope", True, pause="nope:0:tools:1", key="k")
    assert answer["accepted"] is False and answer["reason"] == "stale_pause"
    assert store.redis.exists(store.machine.decisions_key("nope")) == 0
