"""A step that found no model-host capacity waits without holding a worker thread.

``wait_for_capacity`` is called by a step task that caught ``CapacityWait``: it records in the
job's status and event stream what the step waits for and until when, then re-queues the very
same message (same task id, arguments, queue and priority) with a countdown, and returns the
``Ignore`` the task raises so that Celery acks the current message without storing a result.

A step waiting for an in-flight slot also registers as a waiter of the host: the worker that
frees a slot sends the oldest (most urgent) waiter at once, so slots do not idle until a
countdown runs out. Its countdown copy stays the fallback (a lost wake-up only costs time), and
only one such copy is pending per step; duplicates that arrive after the step ran are ignored
by the step's own guards.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from celery import Task as CeleryTask
from celery.exceptions import Ignore

from tandem.tasks.host_model import CapacityWait
from tandem.tasks.leases import StepLease
from tandem.tasks.runtime import get_runtime
from tandem.tasks.spec import Waiting

log = logging.getLogger("tandem.capacity")

MIN_FALLBACK = 1.0
"""Shortest countdown of a step waiting for an in-flight slot (its wake-up usually comes first)."""


def _jitter(seconds: float) -> float:
    """Up to 10% (at most 2 s) more, so steps released by one event do not all return at once."""
    return seconds + random.uniform(0.0, min(2.0, 0.1 * seconds + 0.05))


def wait_for_capacity(
    task: CeleryTask,
    lease: StepLease,
    job_id: str,
    step_id: str,
    args: tuple[Any, ...],
    wait: CapacityWait,
) -> Ignore:
    """Re-queue the current step until capacity is likely; the ``Ignore`` for the task to raise.

    The step's ``lease`` is given up first: a copy woken at once must find the step free.
    """
    from tandem.tasks.turns import _dispatch  # the step's own message, as the lease takeover sends it

    rt = get_runtime()
    lease.release()  # releasing again when the step's ``with`` ends changes nothing
    info = wait.wait
    dispatch = _dispatch(task, args)  # carries the message's priority
    countdown = _jitter(info.seconds)
    send = True
    if info.reason == "in_flight":
        job_priority = 0
        spec = rt.store.spec(job_id)
        if spec is not None:
            job_priority = spec.priority
        countdown = max(MIN_FALLBACK, countdown)
        free, send = wait.capacity.wait_for_slot(
            f"{job_id}:{step_id}", dispatch, priority=job_priority, fallback=countdown
        )
        if free:  # a slot freed between the refusal and the registration: go again now
            countdown, send = 0.0, True
    until = info.now + countdown
    rt.store.set_status(
        job_id,
        waiting=Waiting(reason=info.reason, host=info.host, until=until, detail=info.describe()),
    )
    rt.store.publish(
        job_id,
        "waiting",
        {
            "step": step_id,
            "reason": info.reason,
            "host": info.host,
            "until": until,
            "detail": info.describe(),
        },
    )
    if send:
        task.app.send_task(
            dispatch["name"], args=dispatch["args"], countdown=countdown, **dispatch["options"]
        )
    log.debug("step %s of job %s waits %.2fs for %s", step_id, job_id, countdown, info.reason)
    return Ignore()
