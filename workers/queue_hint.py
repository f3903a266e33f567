"""``QueueHint``: while the CLI follows a job, say when the queue it waits on has no worker.

A job submitted with no worker running, or none for the role its next step needs (a dual job's
Thinker step with only ``tandem worker actor`` started), waits silently: its messages sit in the
queue until a worker consumes it. The hint watches the job's record from a daemon thread; when
its step has not moved for ``grace`` seconds, it asks the workers which queues they consume
(Celery's ``inspect().active_queues()``, a broadcast any worker answers, busy or not) and prints
one line on stderr for a queue nobody consumes, once per queue. The job is not touched: it goes on
as soon as a worker starts.

A busy worker still counts as consuming its queue, so a step waiting behind a backlog gives no
hint. Whatever goes wrong while watching (Redis or the broker away) only skips a look: the hint
never fails or delays the command. A Redis user that may not broadcast to the workers (the client
user of docs/security.md may not: a broadcast can also stop workers) is refused the question
(``NOPERM``): the hint then stops asking, and says nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from tandem.broker_config.acl_refusals import refusal, refused_error
from tandem.broker_config.celery_config import TASK_QUEUES
from tandem.broker_config.intake_lanes import LANE_INFIX

GRACE = 3.0
"""Seconds a job's step may stay where it is before its queue's consumers are asked."""
INSPECT_TIMEOUT = 1.0
"""Seconds the workers have to say which queues they consume."""

_STEP_TASKS = {
    "thinker": "tandem.thinker_turn",
    "actor": "tandem.actor_turn",
    "tools": "tandem.run_tool",
    "collect": "tandem.collect_tools",
    "finalize": "tandem.finalize",
    "compact_thinker": "tandem.compact_thinker",
    "compact_actor": "tandem.compact_actor",
}


def waiting_queue(state: str, step: str, intake_queue: str) -> str | None:
    """The queue a job in ``state`` at step kind ``step`` waits on: the intake queue while it is
    queued, its step's queue while it runs, ``None`` otherwise (it waits for a person or a model
    host's back-off, or it ended)."""
    if state == "queued":
        return intake_queue
    if state == "running":
        return TASK_QUEUES.get(_STEP_TASKS.get(step, ""))
    return None


def consumed_queues(app: Any, timeout: float = INSPECT_TIMEOUT) -> set[str]:
    """The queues some running worker consumes (an empty set when none answers)."""
    replies = app.control.inspect(timeout=timeout).active_queues() or {}
    return {q.get("name", "") for queues in replies.values() for q in (queues or [])}


def hint(queue: str, intake_queue: str, job_id: str) -> str:
    """The line for ``queue``, which no worker consumes while job ``job_id`` waits on it."""
    if queue == intake_queue:
        start = "start a worker: `tandem worker all` (or any `tandem worker ROLE` without --no-intake)"
        if LANE_INFIX in queue:  # an intake lane: the workers may run without lanes, or fewer
            start += ", with the same TANDEM_INTAKE_LANES as this client"
    else:
        start = f"start one with `tandem worker {queue}` (or `tandem worker all`)"
    return f"tandem: no worker consumes queue {queue!r} yet (job {job_id} waits there): {start}"


class QueueHint:
    """Watches job ``job_id`` (see the module docstring); a context manager that starts and stops
    its daemon thread. ``read_status() -> (state, step, round, epoch)`` reads the job's record;
    ``consumers() -> set[str]`` the queues workers consume."""

    def __init__(
        self,
        job_id: str,
        intake_queue: str,
        read_status: Callable[[], tuple[str, str, int, int] | None],
        consumers: Callable[[], set[str]],
        *,
        grace: float = GRACE,
        poll: float = 0.5,
        out: TextIO | None = None,
    ) -> None:
        self.job_id = job_id
        self.intake_queue = intake_queue
        self._read_status = read_status
        self._consumers = consumers
        self.grace = grace
        self.poll = poll
        self._out = out
        self.said: list[str] = []
        """The queues hinted at so far, in order."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> QueueHint:
        self._thread = threading.Thread(target=self._run, name="tandem-queue-hint", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(INSPECT_TIMEOUT + 1.0)

    def _run(self) -> None:
        seen: tuple[str, str, int, int] | None = None
        since = time.monotonic()
        asked_at = float("-inf")
        while not self._stop.wait(self.poll):
            try:
                status = self._read_status()
            except Exception:  # Redis away: the command itself reports it
                continue
            now = time.monotonic()
            if status != seen:
                seen, since = status, now
                continue
            queue = None if status is None else waiting_queue(status[0], status[1], self.intake_queue)
            stalled = now - since >= self.grace and now - asked_at >= self.grace
            if queue is None or queue in self.said or not stalled:
                continue
            asked_at = now
            try:
                consumed = self._consumers()
            except Exception as exc:  # the broker away: no hint this time
                if refusal(refused_error(exc)) == "permission":
                    return  # this user may not broadcast: it never will
                continue
            if queue not in consumed and not self._stop.is_set():
                self.said.append(queue)
                print(hint(queue, self.intake_queue, self.job_id), file=self._out or sys.stderr, flush=True)


def for_handle(handle: Any, app: Any, intake_queue: str, **options: Any) -> QueueHint:
    """A ``QueueHint`` for a ``JobHandle``, reading its record from the handle's store."""
    store = handle._store

    def read_status() -> tuple[str, str, int, int] | None:
        found = store.status(handle.id)
        return None if found is None else (found.state, found.step, found.round, found.epoch)

    return QueueHint(handle.id, intake_queue, read_status, lambda: consumed_queues(app), **options)


__all__ = ["GRACE", "QueueHint", "consumed_queues", "for_handle", "hint", "waiting_queue"]
