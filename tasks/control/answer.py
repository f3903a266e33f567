"""``tandem.answer``: a person's answer to the question a job's tool call asked, by task name.

Any Celery client can send it, without importing tandem::

    app.send_task("tandem.answer", kwargs={
        "job_id": job_id,
        "pause_id": pause_id,              # from question_asked / the job's status
        "answer": {"city": "Lyon"},        # a JSON value that fits the question's schema
        "idempotency_key": "4f1c...",      # any string up to 200 characters, one per answer
        "owner": "team-a",                 # the tenant asking: "default" if left out
    }).get()

It is consumed from the intake queue (like ``tandem.decide``), checks the answer against the
question's schema and the pause it names, and stores it atomically
(``QuestionStore.answer``); the job goes on, and this task sends the asking call to the tools
queue again (a failed send is left to the reconciler).

Its result is ``{"job_id", "accepted": true, "pause_id", "round", "call_index", "answer"}`` or
``{"job_id", "accepted": false, "error", "reason", "pause_id", "current_pause"}`` (``reason``:
``stale_pause``, ``invalid_answer``, ``refused``, ``invalid``, ``unknown`` for a job that does not
exist or is another tenant's, or ``withdrawn``): a refused answer
changes nothing. Running it twice is safe: the second run finds its key answered, or the pause
ended, and is refused.
"""

from __future__ import annotations

from typing import Any

from tandem.tasks.app import app
from tandem.tasks.control.owners import enter_scope_of, unknown_job, visible
from tandem.tasks.control.questions import QuestionStore
from tandem.tasks.runtime import get_runtime
from tandem.tasks.steps.dispatch import send_outbox
from tandem.tasks.steps.hand_back import check_versions
from tandem.tasks.tracing import control_span


def answer_job(
    store: QuestionStore,
    job_id: Any,
    answer: Any,
    pause_id: Any = None,
    idempotency_key: Any = None,
    owner: Any = None,
) -> dict[str, Any]:
    """What ``tandem.answer`` does, as a function: the task's JSON result. ``owner``: the tenant
    the request speaks for (``default`` if none); a job that is not that tenant's, or does not
    exist, gets the one refusal (``tandem.tasks.control.owners.unknown_job``) and nothing else."""
    if not visible(store.store.machine, job_id, owner):
        return unknown_job("tandem.answer", job_id, pause_id)
    return store.answer(job_id, answer, pause=pause_id, key=idempotency_key)


@app.task(name="tandem.answer", acks_late=True)
def answer(
    job_id: str,
    answer: Any = None,
    pause_id: str | None = None,
    idempotency_key: str | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """Answer the question ``job_id`` waits on (see the module docstring); ``owner``: the tenant
    asking (``tandem.tasks.control.owners``)."""
    rt = get_runtime()
    if not visible(rt.machine, job_id, owner):  # nothing of the job is read, traced or sent
        return unknown_job("tandem.answer", job_id, pause_id)
    # A job of formats this worker does not read: handed back (``answer`` is the argument here).
    check_versions(app.tasks["tandem.answer"], rt.machine, job_id)
    enter_scope_of(rt, job_id)  # what the answer writes and logs masks the job's own secrets
    with control_span(job_id, "question", lambda: rt.store.spec(job_id)) as span:
        reply = answer_job(QuestionStore(rt.store), job_id, answer, pause_id, idempotency_key, owner)
        if span is not None:
            span.set_attribute("tandem.accepted", bool(reply.get("accepted")))
        send_outbox(rt, job_id)  # a late answer sends the call again too (timeout)
        return reply
