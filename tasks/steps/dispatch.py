"""The messages that wake a job's steps: which task wakes which step, sending them with the job's
broker priority, sending the outbox a transition wrote, or handing them to the transition to push.

A message only wakes a step up (``tandem.tasks.state.machine``): it names the step, ``[job, round]``
plus the call index of a ``tools`` step, and the step's kind by its task's name. Each goes out under
a fresh task id, so revoking one never touches another step.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tandem.broker_config.capture import NotCaptured, capture
from tandem.broker_config.transport import SENTINEL_TRANSPORT, TRANSPORT
from tandem.tasks import tracing
from tandem.tasks.app import app
from tandem.tasks.hosts.budgets import message_priority
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.claims import Message

log = logging.getLogger("tandem.tasks")


def send(
    messages: Sequence[Message],
    priority: int | None = None,
    trace: Mapping[str, str] | None = None,
    headers: Mapping[str, Any] | None = None,
) -> None:
    """Send ``messages`` (each under a fresh task id: revoking one never touches another step),
    with the broker ``priority`` of their job and its ``trace`` context (``JobSpec.trace_context``)
    in their headers (``tandem.tasks.tracing``), and ``headers`` besides."""
    extra: dict[str, Any] = {**tracing.headers(trace), **(headers or {})}
    for m in messages:
        args = m["args"]
        tail = ".".join(str(a) for a in args[1:])
        app.send_task(
            m["task"],
            args=args,
            countdown=m.get("countdown"),
            task_id=f"{args[0]}.{tail}.{uuid.uuid4().hex[:8]}",
            priority=priority,
            # Nobody waits for a step's own result: without this the Redis result backend would
            # subscribe to it (where a pool lets tasks join, e.g. gevent's).
            ignore_result=True,
            **({"headers": extra} if extra else {}),
        )


def pushes_with_commit(rt: Runtime) -> bool:
    """Whether a step's commit can push its successors' messages itself: the broker is the job
    state's own Redis (the same URL; for a Sentinel URL, the same Sentinels, service and database),
    through tandem's channel."""
    conf = app.conf
    if conf.broker_transport == SENTINEL_TRANSPORT:
        return rt.settings.broker_url == rt.settings.redis_url
    return conf.broker_transport == TRANSPORT and conf.broker_url == rt.settings.redis_url


def wire(rt: Runtime, messages: Sequence[Message], spec: JobSpec) -> list[tuple[str, str]] | None:
    """``messages`` as Celery would send them (priority, trace headers and seal included), built
    but not sent, for a commit to push with the step: ``(list key, message JSON)`` each. ``None``
    where the commit cannot push them (the caller sends the outbox after the commit instead):
    the broker is not the job state's Redis, a message waits for a countdown, or it could not be
    built (the reason is logged)."""
    if not messages or any(m.get("countdown") for m in messages) or not pushes_with_commit(rt):
        return None
    try:
        with capture() as box:
            send(messages, message_priority(spec.priority, rt.settings.broker_url), spec.trace_context)
    except NotCaptured as exc:
        log.info("the commit cannot push its messages (%s): they go from the outbox", exc)
        return None
    except Exception:
        log.warning("building the next step's messages failed: they go from the outbox", exc_info=True)
        return None
    return box if len(box) == len(messages) else None


def send_outbox(
    rt: Runtime,
    job_id: str,
    written: tuple[str, Sequence[Message]] | None = None,
    spec: JobSpec | None = None,
) -> bool:
    """Send the job's outbox and clear it; ``False`` (kept for the reconciler) if sending failed.

    ``written``: the outbox id and messages the caller's transition just wrote, and ``spec`` the
    job's spec, so that neither is read back.
    """
    try:
        outbox_id, messages = written if written is not None else rt.machine.outbox(job_id)
        if messages:
            spec = spec if spec is not None else rt.store.spec(job_id)
            priority = message_priority(spec.priority, rt.settings.broker_url) if spec else None
            send(messages, priority, spec.trace_context if spec else None)
            rt.machine.mark_sent(job_id, outbox_id)
        return True
    except Exception:
        log.warning("job %s: sending the next step failed; the reconciler sends it", job_id, exc_info=True)
        return False
