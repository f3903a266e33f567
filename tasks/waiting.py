"""A step that found no model-host capacity waits without holding a worker thread.

``wait_for_capacity`` is called by a step that caught ``CapacityWait``: it parks the claimed step
in the job's record (state ``waiting``, what it waits for and until when, a ``waiting`` event)
through ``tandem.tasks.turns.reschedule``, the path every transient wait takes, and the step's
message is sent again with a countdown.

A step waiting for an in-flight slot also registers as a waiter of the host: the worker that
frees a slot sends the oldest (most urgent) waiter at once, so slots do not idle until a
countdown runs out. Its countdown copy stays the fallback (a lost wake-up only costs time), and
only one such copy is pending per step; a copy that arrives after the step ran claims nothing.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import Any

from tandem.reasoner.plan import Step
from tandem.tasks.budgets import message_priority
from tandem.tasks.host_model import CapacityWait
from tandem.tasks.jobstate import Claim
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec

log = logging.getLogger("tandem.capacity")

MIN_FALLBACK = 1.0
"""Shortest countdown of a step waiting for an in-flight slot (its wake-up usually comes first)."""


def _jitter(seconds: float) -> float:
    """Up to 10% (at most 2 s) more, so steps released by one event do not all return at once."""
    return seconds + random.uniform(0.0, min(2.0, 0.1 * seconds + 0.05))


def wake_options(rt: Runtime, claim: Claim, spec: JobSpec) -> dict[str, Any]:
    """How a woken step is sent: with its job's broker priority (as every step message is) and a
    task id that starts with the job id."""
    return {
        "priority": message_priority(spec.priority, rt.settings.broker_url),
        "task_id": f"{claim.job_id}.{claim.round}.{uuid.uuid4().hex[:8]}",
    }


def wait_for_capacity(rt: Runtime, claim: Claim, spec: JobSpec, wait: CapacityWait) -> dict[str, Any] | None:
    """Park the claimed step until capacity is likely (raises ``Ignore`` once parked; returns the
    failed result when the job's deadline comes first)."""
    from tandem.tasks.turns import reschedule, step_messages

    info = wait.wait
    message = step_messages(claim.job_id, Step(claim.round, claim.kind))[0]  # type: ignore[arg-type]
    dispatch = {"name": message["task"], "args": message["args"], "options": wake_options(rt, claim, spec)}
    countdown = _jitter(info.seconds)
    send = True
    if info.reason == "in_flight":
        countdown = max(MIN_FALLBACK, countdown)
        free, send = wait.capacity.wait_for_slot(
            f"{claim.job_id}:{claim.round}:{claim.kind}", dispatch, priority=spec.priority, fallback=countdown
        )
        if free:  # a slot freed between the refusal and the registration: go again now
            countdown, send = 0.0, True
    log.debug("job %s: %s waits %.2fs for %s", claim.job_id, claim.kind, countdown, info.reason)
    return reschedule(rt, claim, countdown, info.reason, info.describe(), send_now=send, host=info.host)
