"""``ApprovalStore`` and ``tandem.decide``'s function over fakeredis: a pending-approval record,
decisions checked against it, the first decision per call winning, and the timeout."""

from __future__ import annotations

import threading
from typing import Any

import fakeredis
import pytest

from tandem.reasoner.approval import PendingCall
from tandem.tasks.approvals import ApprovalStore
from tandem.tasks.decide import decide_job
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.store import JobStore
from tandem.toolkit.tool import Tool


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


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis())


@pytest.fixture
def approvals(store: JobStore) -> ApprovalStore:
    approvals = ApprovalStore(store)
    approvals.request("job", 2, PENDING, TOOLS, timeout_s=60, ttl=3600, now=1000.0)
    return approvals


def events(store: JobStore, kind: str) -> list[dict[str, Any]]:
    entries = store.redis.xrange(store.key("job", "events"))
    import json

    return [json.loads(f[b"data"]) for _, f in entries if f[b"type"].decode() == kind]


def test_a_request_is_stored_once_with_a_ttl_and_published(approvals: ApprovalStore, store: JobStore) -> None:
    again = approvals.request("job", 2, PENDING[:1], TOOLS, timeout_s=5, ttl=10, now=2000.0)
    assert again.pending == PENDING and again.requested_at == 1000.0  # a redelivered step asks once
    record = approvals.get("job")
    assert record is not None and record.deadline == 1060.0 and not record.decided
    assert record.schemas["send_email"]["required"] == ["to", "subject"]
    assert 3600 < store.redis.ttl(approvals.key("job")) <= 3660
    [requested] = events(store, "approval_requested")
    assert [p["index"] for p in requested["pending"]] == [1, 3] and requested["timeout_s"] == 60


def test_one_batch_decides_every_call(approvals: ApprovalStore, store: JobStore) -> None:
    record = approvals.decide(
        "job",
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
    assert approvals.get("job") == record
    [decided] = events(store, "approval_decided")
    assert decided["complete"] is True and decided["by"] == "person" and len(decided["decisions"]) == 2


def test_calls_may_be_decided_one_by_one_and_each_once(approvals: ApprovalStore) -> None:
    first = approvals.decide("job", [{"index": 3, "approve": True}], now=1001.0)
    assert not first.decided and [p.index for p in first.undecided()] == [1]
    with pytest.raises(DecisionRefused, match="call 3 was decided already; nothing was decided"):
        approvals.decide("job", [{"index": 3, "approve": False}, {"index": 1, "approve": True}], now=1002.0)
    assert approvals.get("job") == first  # the refused batch changed nothing, not even call 1
    done = approvals.decide("job", False, now=1003.0)  # False: reject every undecided call
    assert done.decided and [(d.index, d.approve, d.reason) for d in done.decisions] == [
        (1, False, "rejected without a reason"),
        (3, True, None),
    ]
    with pytest.raises(DecisionRefused, match="was decided already"):
        approvals.decide("job", True, now=1004.0)


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
    approvals: ApprovalStore, decisions: Any, message: str
) -> None:
    before = approvals.get("job")
    with pytest.raises(DecisionRefused, match=message):
        approvals.decide("job", decisions, now=1001.0)
    assert approvals.get("job") == before


def test_a_job_not_waiting_is_refused(store: JobStore) -> None:
    with pytest.raises(DecisionRefused, match="job 'other' is not waiting for a decision"):
        ApprovalStore(store).decide("other", True)


def test_racing_decisions_the_first_wins(approvals: ApprovalStore) -> None:
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def decide(n: int) -> None:
        barrier.wait()
        try:
            approvals.decide("job", [{"index": 1, "approve": n % 2 == 0, "reason": f"r{n}"}], now=1001.0)
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
    record = approvals.get("job")
    assert record is not None
    [decision] = record.decisions
    n = int(winners[0].split()[1])
    assert (decision.approve, decision.reason) == (n % 2 == 0, None if n % 2 == 0 else f"r{n}")


def test_no_decision_in_time_rejects_what_is_undecided(approvals: ApprovalStore, store: JobStore) -> None:
    approvals.decide("job", [{"index": 1, "approve": True}], now=1010.0)
    assert approvals.expire_if_due("job", now=1059.0).decided is False  # type: ignore[union-attr]
    expired = approvals.expire_if_due("job", now=1060.0)
    assert expired is not None and expired.decided and expired.decided_by == "timeout"
    assert [(d.index, d.approve, d.reason) for d in expired.decisions] == [
        (1, True, None),
        (3, False, "no decision within 60 s"),
    ]
    assert approvals.expire_if_due("job", now=2000.0) == expired  # idempotent
    assert events(store, "approval_decided")[-1]["by"] == "timeout"


def test_a_late_decision_is_refused_and_the_timeout_applies(approvals: ApprovalStore) -> None:
    with pytest.raises(DecisionRefused, match="after the 60 s approval timeout"):
        approvals.decide("job", True, now=1061.0)
    record = approvals.get("job")
    assert record is not None and record.decided_by == "timeout"
    assert all(not d.approve for d in record.decisions)


def test_the_decide_task_function_answers_in_json(store: JobStore) -> None:
    approvals = ApprovalStore(store)
    approvals.request("job", 2, PENDING, TOOLS, timeout_s=None, ttl=3600)
    refused = decide_job(approvals, "job", [{"index": 9, "approve": True}])
    assert refused["accepted"] is False and "no call 9 is waiting" in refused["error"]
    assert decide_job(approvals, 42, True) == {
        "job_id": 42,
        "accepted": False,
        "error": "job_id must be a job id string, got 42",
    }
    accepted = decide_job(approvals, "job", [{"index": 1, "approve": True}, {"index": 3, "approve": True}])
    assert accepted == {
        "job_id": "job",
        "accepted": True,
        "round": 2,
        "complete": True,
        "decisions": [{"index": 1, "approve": True}, {"index": 3, "approve": True}],
    }
