"""How a client sends a control task to the workers and waits for its reply, with a definite
outcome whatever happens (``JobHandle``'s decisions, answers, messages, resume, fork, follow-up).

A request that names an idempotency key and that no worker answered in time is *withdrawn*: the
client writes a refusal under the key, atomically, unless a worker's reply got there first, and the
worker that takes the queued message later finds the key answered and does nothing. Whichever was
kept is the outcome. A request without such a key (resume, fork, follow-up) gets a ``timeout``
refusal instead, which says the request may still apply when a worker takes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import OperationalError

from tandem.broker_config.acl_refusals import refused_error

NO_WORKER = (CeleryTimeoutError, OperationalError)
"""What a client's wait for a control task's reply raises when no worker answered (or the broker
did not take the message)."""


def _unless_refused(exc: BaseException) -> None:
    """Raise the Redis refusal behind ``exc`` (a ``NOPERM`` kombu re-raised as an outage): this
    client's Redis user may not send the request, which no worker's answer would change."""
    refused = refused_error(exc)
    if refused is not None:
        raise refused from exc


def with_owner(kwargs: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """``kwargs`` with ``owner``, the tenant asking (``tandem.tasks.control.owners``), when given."""
    return kwargs if owner is None else {**kwargs, "owner": owner}


def ask_or_withdraw(
    app: Celery,
    task: str,
    kwargs: dict[str, Any],
    timeout: float,
    withdraw: Callable[[str], str],
    withdrawn: dict[str, Any],
) -> dict[str, Any]:
    """Send ``task`` and wait ``timeout`` seconds for its JSON reply; when none came, keep the
    ``withdrawn`` refusal with ``withdraw`` (an atomic write under the request's key that returns
    the reply kept: a worker's, if it came first) and return what was kept."""
    try:
        reply = app.send_task(task, kwargs=kwargs).get(timeout=timeout)
    except NO_WORKER as exc:
        _unless_refused(exc)
        reply = json.loads(withdraw(json.dumps(withdrawn)))
    return dict(reply) if isinstance(reply, dict) else {"accepted": False, "error": repr(reply)}


def ask(app: Celery, task: str, kwargs: dict[str, Any], timeout: float, doing: str) -> dict[str, Any]:
    """Send ``task`` and wait ``timeout`` seconds for its JSON reply; when none came, a refusal
    with ``reason`` ``timeout`` saying ``doing`` (e.g. "the fork") may still happen."""
    try:
        reply = app.send_task(task, kwargs=kwargs).get(timeout=timeout)
    except NO_WORKER as exc:
        _unless_refused(exc)
        return {
            "job_id": kwargs.get("job_id"),
            "accepted": False,
            "reason": "timeout",
            "error": (
                f"no worker answered within {timeout:g} s (are workers running?); {doing} may still "
                "happen when a worker takes its message: look at the job before asking again"
            ),
        }
    return dict(reply) if isinstance(reply, dict) else {"accepted": False, "error": repr(reply)}


__all__ = ["NO_WORKER", "ask", "ask_or_withdraw", "with_owner"]
