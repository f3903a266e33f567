"""``tandem.follow_up``: a new goal on an ended job, as a new job in the same thread.

Any Celery client can send it, without importing tandem::

    app.send_task("tandem.follow_up", kwargs={
        "job_id": job_id,                   # an ended job
        "goal": "Now the same for 2024.",
        "idempotency_key": "3b9c...",       # optional: the same key gives the same follow-up
        "owner": "team-a",                  # the tenant asking: "default" if left out
    }).get()

The new job has the ended job's spec (reasoner, tools, budgets, owner, sealed secrets) with the
new goal, ``thread_id`` set to the thread (the ended job's ``thread_id``, else its id), and as its
context the thread so far: the first job's own context, then each earlier job's goal, the
person's messages into it and its answer, within ``TANDEM_MAX_THREAD_CHARS`` characters and half
the smallest context budget of the job's roles (the oldest dropped first, with a note saying how
many; ``tandem.tasks.control.threads``). Both jobs
are in the thread's index (``GET /v1/threads/{id}``).

The answer is ``{"job_id", "accepted": true, "follow_up_id", "thread_id", "dropped"}`` or
``{"job_id", "accepted": false, "error", "reason"}`` with ``reason`` ``unknown`` (no such job,
another tenant's, or its records expired: the one refusal of ``tandem.tasks.control.owners``),
``state`` (it has not ended: send it a message instead) or ``invalid`` (a blank goal, or one
over ``TANDEM_MAX_GOAL_CHARS``). The new job's id comes from the idempotency key (or the task's
own id), so running the task twice starts one job.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from celery import Task as CeleryTask

from tandem.client.submission import submit
from tandem.tasks.app import app
from tandem.tasks.control.owners import enter_scope_of, requester, unknown_job, visible
from tandem.tasks.control.threads import index_job, thread_jobs, thread_text
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.steps.hand_back import check_versions

_FOLLOW_UP_IDS = uuid.UUID("5f0c9a52-8e1b-4d0e-9a43-2f7d61b3c1e4")
"""The namespace of follow-up ids (uuid5 of the job and the idempotency key, or the task id)."""


_THREAD_OPEN = "<thread id="


def _refusal(job_id: Any, reason: str, error: str) -> dict[str, Any]:
    return {"job_id": job_id, "accepted": False, "error": error, "reason": reason}


def follow_up_job(
    rt: Runtime,
    job_id: Any,
    goal: Any,
    idempotency_key: Any = None,
    owner: Any = None,
    *,
    request_id: str = "",
) -> dict[str, Any]:
    """What ``tandem.follow_up`` does, as a function: the task's JSON answer. A job that is not
    ``owner``'s, or does not exist, gets the one refusal (``tandem.tasks.control.owners``)."""
    if not visible(rt.machine, job_id, owner):
        return unknown_job("tandem.follow_up", job_id)
    limit = rt.settings.limits.goal_chars
    if not isinstance(goal, str) or not goal.strip() or len(goal) > limit:
        shown = f"{len(goal)} characters" if isinstance(goal, str) and goal.strip() else repr(goal)[:80]
        return _refusal(
            job_id,
            "invalid",
            f"goal must be a non-blank string of at most {limit} characters "
            f"(TANDEM_MAX_GOAL_CHARS), got {shown}",
        )
    status = rt.store.status(job_id)
    if status is None:  # it expired since it was looked at
        return unknown_job("tandem.follow_up", job_id)
    if status.state not in FINAL_STATES:
        return _refusal(
            job_id,
            "state",
            f"job {job_id!r} is still {status.state}: send it a message instead "
            "(tandem message), or follow up once it has ended",
        )
    spec = rt.store.spec(job_id)
    if spec is None and rt.machine.record(job_id).get("created_at"):  # started; its keys expire one by one
        return unknown_job("tandem.follow_up", job_id)
    if spec is None:  # cancelled while queued: no worker ever started it
        return _refusal(
            job_id,
            "state",
            f"job {job_id!r} ended ({status.state}) before a worker started it: it has no thread "
            "to follow up; submit the goal as a new job",
        )
    thread = spec.thread_id or job_id
    seed = (
        f"{job_id}\n{idempotency_key}" if isinstance(idempotency_key, str) and idempotency_key else request_id
    )
    new_id = str(uuid.uuid5(_FOLLOW_UP_IDS, seed)) if seed else str(uuid.uuid4())
    now = time.time()
    ttl = int((spec.timeout_s or rt.settings.job_timeout) + rt.settings.memory_ttl)
    index_job(rt.store, thread, job_id, ttl, at=min(status.updated_at or now, now) - 0.001)
    earlier = [j for j in thread_jobs(rt.store, thread, requester(owner)) if j.job_id != new_id]
    room = rt.thread_tokens(spec, goal)
    text, dropped = thread_text(
        rt.store,
        earlier,
        rt.settings.limits.thread_chars,
        max_tokens=room[0] if room else None,
        count=room[1] if room else None,
    )
    answer = {
        "job_id": job_id,
        "accepted": True,
        "follow_up_id": new_id,
        "thread_id": thread,
        "dropped": dropped,
    }
    if rt.store.status(new_id) is not None:  # a second run of this follow-up: the first started it
        return answer
    root = rt.store.spec(earlier[0].job_id) if earlier else None
    # The first job's own context (a follow-up's holds its thread after it: that part is rebuilt).
    background = root.context.split(_THREAD_OPEN, 1)[0].rstrip() if root is not None else ""
    context = "\n\n".join(p for p in (background, f'{_THREAD_OPEN}"{thread}">\n{text}\n</thread>') if p)
    new_spec = spec.model_copy(
        update={"goal": goal, "thread_id": thread, "context": context, "trace_context": None}
    )
    index_job(rt.store, thread, new_id, ttl, at=now)
    submit(new_spec, app=app, store=rt.store, job_id=new_id)
    return answer


@app.task(name="tandem.follow_up", bind=True, acks_late=True)
def follow_up(
    self: CeleryTask, job_id: str, goal: str, idempotency_key: str | None = None, owner: str | None = None
) -> dict[str, Any]:
    """Follow up on ended job ``job_id`` with ``goal`` for tenant ``owner`` (see the module docstring)."""
    rt = get_runtime()
    check_versions(self, rt.machine, job_id)  # a job of formats this worker does not read: handed back
    if visible(rt.machine, job_id, owner):
        enter_scope_of(rt, job_id)  # what it logs of the job masks the job's own secrets
    return follow_up_job(rt, job_id, goal, idempotency_key, owner, request_id=self.request.id or "")


__all__ = ["follow_up", "follow_up_job"]
