"""``tandem.decide``: a decision on a job's calls awaiting approval, by task name.

Any Celery client can send it, without importing tandem::

    app.send_task("tandem.decide", kwargs={"job_id": job_id, "decisions": [
        {"index": 1, "approve": True},
        {"index": 2, "approve": False, "reason": "not this address"},
    ]}).get()

It is consumed from the intake queue (like ``tandem.infer``), validates the batch against the
stored ``ApprovalRecord`` and stores it atomically (``ApprovalStore.decide``); once every waiting
call is decided the job goes on, and this task sends the approved calls to the tools queue (a
failed send is left to the reconciler). Its result is
``{"job_id", "accepted": true, "round", "complete", "decisions": [...]}`` (every decision
stored so far for the round; ``complete`` once every waiting call has one) or ``{"job_id", "accepted": false,
"error": "..."}``: a refused decision changes nothing. Running it twice is safe: the second run
finds the calls decided and is refused.
"""

from __future__ import annotations

from typing import Any

from tandem.tasks.app import app
from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.errors import DecisionRefused
from tandem.tasks.runtime import get_runtime
from tandem.tasks.steps.dispatch import send_outbox
from tandem.tasks.tracing import control_span


def decide_job(store: ApprovalStore, job_id: Any, decisions: Any) -> dict[str, Any]:
    """What ``tandem.decide`` does, as a function: the task's JSON result."""
    if not isinstance(job_id, str) or not job_id:
        return {
            "job_id": job_id,
            "accepted": False,
            "error": f"job_id must be a job id string, got {job_id!r}",
        }
    try:
        record = store.decide(job_id, decisions)
    except DecisionRefused as exc:
        return {"job_id": job_id, "accepted": False, "error": str(exc)}
    return {
        "job_id": job_id,
        "accepted": True,
        "round": record.round,
        "complete": record.decided,
        "decisions": [d.model_dump(mode="json", exclude_none=True) for d in record.decisions],
    }


@app.task(name="tandem.decide", acks_late=True)
def decide(job_id: str, decisions: Any) -> dict[str, Any]:
    """Decide on the calls of ``job_id`` awaiting approval (see the module docstring)."""
    rt = get_runtime()
    with control_span(job_id, "approval", lambda: rt.store.spec(job_id)) as span:
        reply = decide_job(ApprovalStore(rt.store), job_id, decisions)
        if span is not None:
            span.set_attribute("tandem.accepted", bool(reply.get("accepted")))
        if isinstance(job_id, str) and job_id:  # a late decision completes the round too (by timeout)
            send_outbox(rt, job_id)
        return reply
