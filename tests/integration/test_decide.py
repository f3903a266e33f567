"""``tandem.decide`` through real workers: by name from a bare Celery client, and through
``JobHandle.approve``/``reject``. The pending-approval record is stored here, as a parked job's
driver stores it (workers do not park jobs yet)."""

from __future__ import annotations

import pytest
from celery import Celery

from tandem.reasoner.approval import PendingCall
from tandem.tasks.approvals import ApprovalStore
from tandem.tasks.client import JobHandle
from tandem.tasks.errors import DecisionRefused
from tests.integration import tools
from tests.integration.conftest import Cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
NOTIFY = next(t for t in tools.toolkit.tools() if t.name == "notify")
PENDING = [
    PendingCall(index=1, tool="notify", args={"to": "ops"}, objective="tell ops"),
    PendingCall(index=2, tool="notify", args={"to": "all"}, objective="tell everyone"),
]


def test_a_decision_by_name_from_a_bare_celery_client(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    approvals = ApprovalStore(cluster.store)
    approvals.request("parked-1", 0, PENDING, [NOTIFY], timeout_s=None, ttl=600)
    bare = Celery(broker=cluster.url, backend=cluster.url)  # knows the task name, nothing else
    try:
        refused = bare.send_task(
            "tandem.decide", kwargs={"job_id": "parked-1", "decisions": [{"index": 5, "approve": True}]}
        ).get(timeout=60)
        assert refused["accepted"] is False and "no call 5 is waiting" in refused["error"]
        accepted = bare.send_task(
            "tandem.decide",
            kwargs={
                "job_id": "parked-1",
                "decisions": [
                    {"index": 1, "approve": True},
                    {"index": 2, "approve": False, "reason": "too many people"},
                ],
            },
        ).get(timeout=60)
        assert accepted["accepted"] is True and accepted["complete"] is True
        again = bare.send_task(
            "tandem.decide", kwargs={"job_id": "parked-1", "decisions": [{"index": 1, "approve": False}]}
        ).get(timeout=60)
        assert again["accepted"] is False and "decided already" in again["error"]
    finally:
        bare.close()
    record = approvals.get("parked-1")
    assert record is not None and [(d.index, d.approve) for d in record.decisions] == [(1, True), (2, False)]


def test_handle_approve_and_reject(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    ApprovalStore(cluster.store).request("parked-2", 0, PENDING, [NOTIFY], timeout_s=None, ttl=600)
    handle = JobHandle("parked-2", cluster.store, cluster.app)
    with pytest.raises(DecisionRefused, match=r"edited args of call 1 \('notify'\)"):
        handle.approve(1, args={"recipient": "ops"})
    decided = handle.approve(1, args={"to": "ops-oncall"})
    assert [(d.index, d.args) for d in decided] == [(1, {"to": "ops-oncall"})]
    decided = handle.reject("not now")
    assert [(d.index, d.approve, d.reason) for d in decided] == [(1, True, None), (2, False, "not now")]
    record = handle.pending_approval()
    assert record is not None and record.decided
    with pytest.raises(DecisionRefused, match="not waiting for a decision"):
        JobHandle("never-parked", cluster.store, cluster.app).approve()
