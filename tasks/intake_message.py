"""The intake message of a job (``tandem.infer``), as ``submit`` sends it and the reconciler
sends it again for a job still queued."""

from __future__ import annotations

from typing import Any

from celery import Celery

from tandem.tasks import tracing
from tandem.tasks.hosts.budgets import message_priority
from tandem.tasks.intake_secrets import for_wire, stored_header
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.versions import SPEC_VERSION, SPEC_VERSION_HEADER


def send_intake(app: Celery, job_id: str, spec: dict[str, Any], spec_version: int = SPEC_VERSION) -> None:
    """Send the intake message (``tandem.infer``) of job ``job_id`` with its ``spec`` (as dumped
    for the wire); its display form (Flower, worker logs) hides secrets and long texts.

    The message has the job's broker priority, as its steps will: at one priority a worker takes
    the steps of its own queue before new jobs, so a burst of submissions does not hold up the
    jobs already running (an intake message with no priority is served before every step). The
    spec's ``trace_context`` rides in the message's headers too (``tandem.tasks.tracing``), and
    the spec's format version (``spec_version``, this code's by default; header
    ``tandem_spec_version``): a worker that does not read it hands the message back for one that
    does (``tandem.tasks.state.versions``).

    A secret still in clear is not sent: it stays in the job's intake key, which ``submit``
    wrote first, and the message says so (``tandem.tasks.intake_secrets``)."""
    priority: int | None = None
    trace = spec.get("trace_context") if isinstance(spec.get("trace_context"), dict) else None
    extra: dict[str, Any] = {**tracing.headers(trace), SPEC_VERSION_HEADER: spec_version}
    try:
        parsed = JobSpec.model_validate(spec)
        public: Any = parsed.public_dump()
        priority = message_priority(parsed.priority, str(app.conf.broker_url or ""))
    except ValueError:
        public = "(the spec)"
    sent, stored = for_wire(spec)
    if stored:
        extra[SPEC_VERSION_HEADER] = stored_header(spec_version)  # the release before hands it back
    app.send_task(
        "tandem.infer",
        kwargs={"spec": sent},
        kwargsrepr=_shown({"spec": public}),
        task_id=job_id,
        priority=priority,
        # The job's result is stored when the job ends, not when this task returns: saying so
        # lets the intake return instead of raising ``Ignore`` (for which Celery formats a
        # traceback), and spares the result backend a subscription per submitted job.
        ignore_result=True,
        headers=extra,
    )


def _shown(value: Any, limit: int = 1024) -> str:
    """A short display form of a message's arguments (what Flower and the worker log show)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
