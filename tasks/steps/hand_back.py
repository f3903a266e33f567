"""Handing a message back to its queue, untouched, when its job's formats are not this worker's.

Failure model first: during a rolling upgrade, or after a rollback, workers of two releases take
messages from the same queues, and a job written (or taken) by the newer release must not be run,
failed or changed by the older one (``tandem.tasks.state.versions``). A step's claim refuses such a
job before it writes anything (``newer`` or ``older``); the step's message then goes back to its
queue with a countdown, for a worker that reads the job's formats:

- nothing of the job changes and nothing is published to its events (a client sees the job as it
  was: running, or parked);
- the countdown doubles at each hand-back of the same message, from ``FIRST_DELAY`` up to
  ``MAX_DELAY`` seconds (the count rides in the message: header ``tandem_handbacks`` for a step,
  the ``retries`` of the intake's and the control tasks' messages, which keep their task id: a
  caller waits on it), so a job parked for days costs one message every ``MAX_DELAY`` seconds at most;
- the job's id is logged once per worker process (``OncePerJob``), not at every hand-back;
- the copy is sent before the original is acknowledged (at-least-once): a worker that dies in
  between leaves two messages, and a step's claim runs it once.

The reconciler of a worker that reads the job sends its step again anyway once it stalled, so a
message lost meanwhile (a worker killed while it held the copy for its countdown) costs nothing.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any, NoReturn

from celery import Task as CeleryTask
from celery import current_task
from celery.exceptions import Ignore

from tandem.reasoner.loop.step import Step, StepKind
from tandem.tasks import tracing
from tandem.tasks.intake_secrets import spec_version_of
from tandem.tasks.state.claims import ClaimRefused
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.versions import (
    SPEC_VERSION_HEADER,
    JobVersions,
    OncePerJob,
    SupportedVersions,
)
from tandem.tasks.steps.dispatch import send
from tandem.tasks.steps.messages import step_messages

log = logging.getLogger("tandem.tasks")

FIRST_DELAY = 1.0
"""Seconds before a message handed back the first time comes round again."""
MAX_DELAY = 60.0
"""The longest countdown of a message handed back again and again (seconds)."""
HANDBACKS_HEADER = "tandem_handbacks"
"""The header of a step's message that counts how often it was handed back."""
_KEPT_HEADERS = ("traceparent", "tracestate", SPEC_VERSION_HEADER)
"""The headers a message handed back keeps (a copy made from a task's request has none of them)."""

_told = OncePerJob()


def delay(count: int, rng: Callable[[], float] = random.random) -> float:
    """The countdown of a message handed back ``count`` times before: ``FIRST_DELAY * 2**count``,
    at most ``MAX_DELAY``, times a jitter between 0.5 and 1 (workers of the old release do not
    take a batch of them back in step)."""
    return min(MAX_DELAY, FIRST_DELAY * 2 ** min(count, 32)) * (0.5 + rng() / 2)


def _log(job_id: str, fit: str, formats: object, supported: SupportedVersions, what: str) -> None:
    level = logging.WARNING if _told.first(job_id) else logging.DEBUG
    log.log(
        level,
        "job %s: its formats (%s) are %s than this worker reads (%s): %s goes back to its queue "
        "untouched, for a worker that reads them (`tandem version-check` counts such jobs)",
        job_id,
        formats,
        fit,
        supported,
        what,
    )


def _header(request: Any, name: str) -> Any:
    value = getattr(request, name, None)
    if value is None and isinstance(getattr(request, "headers", None), dict):
        value = request.headers.get(name)
    return value


def kept_headers(request: Any) -> dict[str, Any]:
    """The headers of the message ``request`` runs that its copy handed back keeps."""
    kept = {name: _header(request, name) for name in _KEPT_HEADERS}
    return {name: value for name, value in kept.items() if value is not None}


def hand_back_step(
    job_id: str,
    round_no: int,
    kind: StepKind,
    refusal: ClaimRefused,
    supported: SupportedVersions,
    index: int = 0,
) -> NoReturn:
    """Send the message of step ``kind`` of ``round_no`` (call ``index`` of a tools step) back to
    its queue with a countdown, its job untouched (see the module docstring), and leave the step
    (``Ignore``). The current message's priority, trace and hand-back count carry over when it is
    this step's (a step run at once by another, ``collect`` or ``finalize``, sends its own)."""
    (message,) = step_messages(job_id, Step(round_no, kind), [index] if kind == "tools" else None)
    request = getattr(current_task, "request", None) if current_task else None
    args = list(getattr(request, "args", None) or [])
    same_job = bool(args) and args[0] == job_id
    own = same_job and _is_message_of(request, message["task"], args, message["args"])
    count = _count(_header(request, HANDBACKS_HEADER)) if own else 0
    priority = (getattr(request, "delivery_info", None) or {}).get("priority") if same_job else None
    headers = {**(kept_headers(request) if same_job else {}), HANDBACKS_HEADER: count + 1}
    countdown = round(delay(count), 3)
    try:
        send([{**message, "countdown": countdown}], priority=priority, headers=headers)
    except Exception as exc:  # the broker went away: the job is untouched, and stalls for a while
        log.warning(
            "job %s: handing its step back failed (%s: %s); a worker that reads the job sends it again "
            "once it stalled (TANDEM_STALL_SECONDS)",
            job_id,
            type(exc).__name__,
            exc,
        )
    tracing.outcome("tandem.claim", refusal.reason)
    what = f"{kind} of round {round_no}" + (f" (call {index})" if kind == "tools" else "")
    _log(job_id, refusal.reason, refusal.versions, supported, what)
    raise Ignore()


def check_intake(task: CeleryTask, job_id: str, supported: SupportedVersions) -> None:
    """Hand the intake message ``task`` runs back when the spec it carries is of a version this
    worker does not read (its header ``tandem_spec_version``; a message without one, from a bare
    client, or with one that is not a whole number, is taken as this worker's own)."""
    version = _header(task.request, SPEC_VERSION_HEADER)
    if not isinstance(version, int) or isinstance(version, bool):  # a bare client's, or no number
        return
    version = spec_version_of(version)  # (its secrets left in the job's intake key, maybe)
    fit = supported.fit(JobVersions(version, supported.newest.memory))
    if fit != "ok":
        hand_back_task(task, job_id, fit, f"spec v{version}", supported)


def _is_message_of(request: Any, task: str, args: list[Any], wanted: list[Any]) -> bool:
    name = getattr(request, "task", None) or getattr(current_task, "name", None)
    same_task = name == task or (task == "tandem.actor_turn" and name == "tandem.react_turn")
    return same_task and args[: len(wanted)] == wanted


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def hand_back_task(
    task: CeleryTask, job_id: str, fit: str, formats: object, supported: SupportedVersions
) -> NoReturn:
    """Send the message ``task`` runs back to its queue under its own task id (a caller waits on
    its answer), with its arguments, priority and a countdown, and leave it (``Ignore``): for the
    intake and the control tasks, whose job's ``formats`` this worker does not read.

    Not Celery's ``retry``: that stores ``RETRY`` as the task's state (the answer a control task
    may store is checked to find none: ``tandem.tasks.call_answers``) and gives up after the task's
    ``max_retries``; a job parked for days is handed back for as long as it takes."""
    request = task.request
    count = _count(request.retries)
    copy = task.signature_from_request(
        request, countdown=round(delay(count), 3), retries=count + 1, headers=kept_headers(request)
    )
    copy.apply_async()
    _log(job_id, fit, formats, supported, f"{task.name} (task {request.id})")
    raise Ignore()


def check_versions(task: CeleryTask, machine: JobMachine, job_id: Any) -> None:
    """Hand the message ``task`` runs back (``hand_back_task``) when job ``job_id``'s formats are not
    the ones ``machine`` reads; return when they are, or when there is no such job (the task
    answers that itself). For the control tasks that read or write a job outside a claim
    (decide, answer, message, resume, fork, follow-up)."""
    if not isinstance(job_id, str) or not job_id:
        return
    versions = machine.job_versions(job_id)
    if versions is None:
        return
    fit = machine.versions.fit(versions)
    if fit != "ok":
        hand_back_task(task, job_id, fit, versions, machine.versions)


__all__ = [
    "FIRST_DELAY",
    "HANDBACKS_HEADER",
    "MAX_DELAY",
    "check_intake",
    "check_versions",
    "delay",
    "hand_back_step",
    "hand_back_task",
    "kept_headers",
]
