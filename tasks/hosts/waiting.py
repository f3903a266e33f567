"""A step that found no model-host capacity waits without holding a worker thread.

``wait_for_capacity`` is called by a step that caught ``CapacityWait``: it parks the claimed step
in the job's record (state ``waiting``, what it waits for and until when, a ``waiting`` event)
through ``tandem.tasks.steps.guard.reschedule``, the path every transient wait takes, and the step's
message is sent again with a countdown.

A step waiting for an in-flight slot also registers as a waiter of the host: the worker that
frees a slot sends the oldest (most urgent) waiter at once, so slots do not idle until a
countdown runs out. Its countdown copy stays the fallback (a lost wake-up only costs time), and
only one such copy is pending per step; a copy that arrives after the step ran claims nothing.

**No lost wake-ups.** The step registers only once it is parked. A wake-up is a step message, and
a step message finds nothing to do while a worker still holds the step's claim; registered before
the park, a slot freed in between sent a wake-up that was dropped, and the step sat until its
countdown copy (about a lease) came. Registered after, a wake-up always finds the step parked and
claimable; and a slot that freed between the park and the registration is seen by the
registration itself (one script: register, then look for a free slot), which sends the step at
once. Either way the step goes again as soon as a slot is free.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import Any

from tandem.reasoner.loop.step import Step
from tandem.tasks import tracing
from tandem.tasks.hosts.budgets import message_priority
from tandem.tasks.hosts.capacity import HostCapacity
from tandem.tasks.hosts.host_model import CapacityWait
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Claim
from tandem.tasks.steps.dispatch import send
from tandem.tasks.steps.guard import reschedule
from tandem.tasks.steps.messages import step_messages

log = logging.getLogger("tandem.capacity")

MIN_FALLBACK = 1.0
"""Shortest countdown of a step waiting for an in-flight slot (its wake-up usually comes first)."""


def _jitter(seconds: float) -> float:
    """Up to 10% (at most 2 s) more, so steps released by one event do not all return at once."""
    return seconds + random.uniform(0.0, min(2.0, 0.1 * seconds + 0.05))


def wake_options(rt: Runtime, claim: Claim, spec: JobSpec) -> dict[str, Any]:
    """How a woken step is sent: with its job's broker priority (as every step message is) and a
    task id that starts with the job id."""
    options: dict[str, Any] = {
        "priority": message_priority(spec.priority, rt.settings.broker_url),
        "task_id": f"{claim.job_id}.{claim.round}.{uuid.uuid4().hex[:8]}",
    }
    if spec.trace_context:  # the woken step joins its job's trace (tandem.tasks.tracing)
        options["headers"] = tracing.headers(spec.trace_context)
    return options


class SlotWaiter:
    """The registration of a parked step as a waiter for a free slot of ``capacity``.

    Called by ``reschedule`` once the step is parked; answers whether to send the step's
    countdown copy now (the fallback of its wake-up, one pending per step).
    """

    def __init__(
        self, rt: Runtime, claim: Claim, spec: JobSpec, capacity: HostCapacity, fallback: float
    ) -> None:
        self.capacity = capacity
        self.fallback = fallback
        self.priority = spec.priority
        self.waiter_id = f"{claim.job_id}:{claim.round}:{claim.kind}"
        self.message = step_messages(claim.job_id, Step(claim.round, claim.kind))[0]
        self.options = wake_options(rt, claim, spec)

    def __call__(self) -> bool:
        dispatch = {"name": self.message["task"], "args": self.message["args"], "options": self.options}
        try:
            free, schedule = self.capacity.wait_for_slot(
                self.waiter_id, dispatch, priority=self.priority, fallback=self.fallback
            )
        except Exception:  # not registered, so no wake-up comes: the countdown copy must go
            log.warning("could not register %s as a waiter of %s", self.waiter_id, self.capacity.host)
            return True
        if free:  # a slot freed since the refusal: go again now
            try:
                send([self.message], self.options["priority"], self.options.get("headers"))
            except Exception:  # the countdown copy (this one or the one pending) brings it
                log.warning("could not send %s again at once", self.waiter_id, exc_info=True)
        return schedule


def wait_for_capacity(rt: Runtime, claim: Claim, spec: JobSpec, wait: CapacityWait) -> dict[str, Any] | None:
    """Park the claimed step until capacity is likely (raises ``Ignore`` once parked; returns the
    failed result when the job's deadline comes first)."""
    info = wait.wait
    # A budget's refusal is a turn of this call's own (``HostCapacity.acquire``): on time, not
    # spread, or the steps behind it would pass it and take the refill it waited for.
    countdown = info.seconds if info.reason in ("rpm", "tpm") else _jitter(info.seconds)
    send: bool | SlotWaiter = True
    if info.reason == "in_flight":
        countdown = max(MIN_FALLBACK, countdown)
        send = SlotWaiter(rt, claim, spec, wait.capacity, countdown)  # registers once parked
    log.debug("job %s: %s waits %.2fs for %s", claim.job_id, claim.kind, countdown, info.reason)
    return reschedule(rt, claim, countdown, info.reason, info.describe(), send_now=send, host=info.host)
