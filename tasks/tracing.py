"""Tracing of jobs across processes: one trace per job (``tandem.reasoner.tracing`` holds the spans).

A job's trace starts at ``submit`` (span ``tandem.job``, a child of the caller's current span) or,
for a bare Celery client, at the intake (``tandem.job`` there, a child of the message's
``traceparent`` header if it has one). The job span's context is kept in the job's spec
(``JobSpec.trace_context``, W3C ``traceparent``/``tracestate``), and every step message carries it
as Celery message headers: a step sent by the state machine, re-sent by the reconciler (built from
the outbox), woken by a freed slot or redelivered after its worker died joins the same trace. A
worker makes the header's context current for the task (``task_context``), and each step opens
``tandem.step`` under it (``step_span``): attributes ``tandem.job_id``, ``tandem.step.kind``,
``tandem.role``, ``tandem.round``, then ``tandem.claim`` (``claimed`` or why not), ``tandem.attempt``,
``tandem.epoch`` and ``tandem.commit`` (``committed``, ``lost``, ``parked``, ``waiting``, ``ended``)
as the guard learns them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from celery.exceptions import Ignore, Retry

from tandem.reasoner import tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

QUIET: tuple[type[BaseException], ...] = (Ignore, Retry)
"""Celery's control-flow exceptions: a step that ends with one did not fail."""

_ROLES = {
    "thinker": "thinker",
    "actor": "actor",
    "tools": "tools",
    "collect": "tools",
    "compact_thinker": "thinker",
    "compact_actor": "actor",
}


def headers(trace_context: Mapping[str, str] | None) -> dict[str, str]:
    """The message headers that carry a job's trace context (empty when it has none)."""
    if not trace_context:
        return {}
    return {k: v for k, v in trace_context.items() if k in ("traceparent", "tracestate")}


def request_context(request: Any) -> Any:
    """The trace context a Celery task's message carries in its headers (``None`` if none)."""
    if not tracing.STATE.on or request is None:
        return None
    found = {}
    for key in ("traceparent", "tracestate"):
        value = getattr(request, key, None)
        if value is None and isinstance(getattr(request, "headers", None), Mapping):
            value = request.headers.get(key)
        if isinstance(value, str):
            found[key] = value
    return tracing.extract(found)


def job_span(job_id: str, attributes: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Open and close the ``tandem.job`` span of ``job_id`` under the current context (the trace's
    root when there is none); its context as ``traceparent`` text, for the job's spec. Empty when
    tracing is off."""
    attrs = {"tandem.job_id": job_id, **(attributes or {})}
    with tracing.span("tandem.job", attrs, kind="producer"):
        return tracing.carrier()


def step_span(
    job_id: str, round_no: int, kind: str, index: int | None = None, *, parent: Any = None
) -> contextlib.AbstractContextManager[Span | None]:
    """The ``tandem.step`` span of step ``kind`` of ``round_no`` (call ``index`` of a tools step),
    current while the step runs, a child of ``parent`` (else of the current context: the task's
    message headers, or the step that runs this one at once). Nothing when tracing is off."""
    if not tracing.STATE.on:
        return contextlib.nullcontext(None)
    attrs: dict[str, Any] = {"tandem.job_id": job_id, "tandem.step.kind": kind, "tandem.round": round_no}
    if kind in _ROLES:
        attrs["tandem.role"] = _ROLES[kind]
    if index is not None:
        attrs["tandem.call.index"] = index
    return tracing.span("tandem.step", attrs, parent=parent, kind="consumer", quiet=QUIET)


def claimed(attempt: int, epoch: int) -> None:
    """The current step's claim stood: its attempt and epoch."""
    if tracing.STATE.on:
        tracing.annotate({"tandem.claim": "claimed", "tandem.attempt": attempt, "tandem.epoch": epoch})


def outcome(key: str, value: str) -> None:
    """Record on the current step's span how its claim or commit went (``tandem.claim``,
    ``tandem.commit``)."""
    if tracing.STATE.on:
        tracing.annotate({key: value})


def parked(reason: str, until: float, error: str = "", host: str | None = None) -> None:
    """The current step parked its job in ``waiting`` (back-off, capacity): event ``tandem.park``."""
    if not tracing.STATE.on:
        return
    attrs: dict[str, Any] = {"tandem.wait.reason": reason, "tandem.wait.until": until}
    if error:
        attrs["tandem.wait.error"] = error[:500]
    if host:
        attrs["server.address"] = host
    tracing.annotate({"tandem.commit": "waiting"})
    tracing.event("tandem.park", attrs)


def attach(context: Any) -> Any:
    """Make ``context`` current in this thread until ``detach`` (``None``: nothing to undo)."""
    if context is None:
        return None
    from opentelemetry import context as otel_context

    return otel_context.attach(context)


def detach(token: Any) -> None:
    """Undo ``attach``."""
    from opentelemetry import context as otel_context

    otel_context.detach(token)


def control_span(
    job_id: Any, cause: str, spec_of: Callable[[], Any]
) -> contextlib.AbstractContextManager[Span | None]:
    """The ``tandem.resume`` span of a control task that sets a parked or ended job going again
    (``cause``: ``approval`` for ``tandem.decide``, ``resume`` for ``tandem.resume``), in the job's
    trace (``spec_of()``'s ``trace_context``, read only when tracing is on)."""
    if not tracing.STATE.on or not isinstance(job_id, str):
        return contextlib.nullcontext(None)
    try:
        spec = spec_of()
    except Exception:  # the task answers the refusal itself; the span only loses its parent
        spec = None
    parent = tracing.extract(getattr(spec, "trace_context", None))
    attrs = {"tandem.job_id": job_id, "tandem.resume.cause": cause}
    return tracing.span("tandem.resume", attrs, parent=parent, kind="consumer", quiet=QUIET)
