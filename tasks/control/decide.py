"""``tandem.decide``: a decision on a job's calls awaiting approval, by task name.

Any Celery client can send it, without importing tandem::

    app.send_task("tandem.decide", kwargs={
        "job_id": job_id,
        "pause_id": pause_id,              # from approval_requested / the pending approval
        "idempotency_key": "4f1c...",      # any string up to 200 characters, one per decision
        "owner": "team-a",                 # the tenant asking: "default" if left out
        "decisions": [
            {"index": 1, "approve": True},
            {"index": 2, "approve": False, "reason": "not this address"},
        ],
    }).get()

It is consumed from the intake queue (like ``tandem.infer``), checks the batch against the pause
it names and the stored ``ApprovalRecord`` and stores it atomically (``ApprovalStore.answer``);
once every waiting call is decided the job goes on, and this task sends the approved calls to the
tools queue (a failed send is left to the reconciler).

``pause_id`` (or a ``"pause_id"`` in each decision) names the pause the batch answers: a batch for
another pause (one that ended by a decision or its timeout, or an earlier one) is refused, even
when it arrives long after it was sent. Without one, the batch answers the pause current when it
is read (the behaviour of earlier clients). ``idempotency_key`` makes the task safe to send again:
the same key gets the first answer and the decision applies once.

Its result is ``{"job_id", "accepted": true, "pause_id", "round", "complete", "decisions":
[...]}`` (every decision stored so far for the pause; ``complete`` once every waiting call has
one) or ``{"job_id", "accepted": false, "error", "reason", "pause_id", "current_pause"}``
(``reason``: ``stale_pause``, ``refused``, ``unknown`` for a job that does not exist or is another
tenant's, or ``withdrawn`` when the client gave up waiting first): a refused decision changes
nothing. Running it twice is safe: the second run finds its
key answered, or the calls decided, and is refused.
"""

from __future__ import annotations

from typing import Any

from tandem.tasks.app import app
from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.control.owners import enter_scope_of, unknown_job, visible
from tandem.tasks.runtime import get_runtime
from tandem.tasks.steps.dispatch import send_outbox
from tandem.tasks.steps.hand_back import check_versions
from tandem.tasks.tracing import control_span


def decide_job(
    store: ApprovalStore,
    job_id: Any,
    decisions: Any,
    pause_id: Any = None,
    idempotency_key: Any = None,
    owner: Any = None,
) -> dict[str, Any]:
    """What ``tandem.decide`` does, as a function: the task's JSON result. ``owner``: the tenant
    the request speaks for (``default`` if none); a job that is not that tenant's, or does not
    exist, gets the one refusal (``tandem.tasks.control.owners.unknown_job``) and nothing else."""
    if not visible(store.store.machine, job_id, owner):
        return unknown_job("tandem.decide", job_id, pause_id)
    return store.answer(job_id, decisions, pause=pause_id, key=idempotency_key)


@app.task(name="tandem.decide", acks_late=True)
def decide(
    job_id: str,
    decisions: list[dict[str, Any]] | bool,
    pause_id: str | None = None,
    idempotency_key: str | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """Decide on the calls of ``job_id`` awaiting approval (see the module docstring); ``owner``:
    the tenant asking (``tandem.tasks.control.owners``)."""
    rt = get_runtime()
    if not visible(rt.machine, job_id, owner):  # nothing of the job is read, traced or sent
        return unknown_job("tandem.decide", job_id, pause_id)
    check_versions(decide, rt.machine, job_id)  # a job of formats this worker does not read: handed back
    enter_scope_of(rt, job_id)  # what the decision writes and logs masks the job's own secrets
    with control_span(job_id, "approval", lambda: rt.store.spec(job_id)) as span:
        reply = decide_job(ApprovalStore(rt.store), job_id, decisions, pause_id, idempotency_key, owner)
        if span is not None:
            span.set_attribute("tandem.accepted", bool(reply.get("accepted")))
        send_outbox(rt, job_id)  # a late decision completes the round too (by timeout)
        return reply
