"""``tandem.message``: a person's message into a running job, by task name.

Any Celery client can send it, without importing tandem::

    app.send_task("tandem.message", kwargs={
        "job_id": job_id,
        "text": "Use the 2025 figures, not 2024.",
        "idempotency_key": "7d0e...",      # any string up to 200 characters, one per message
        "owner": "team-a",                 # the tenant asking: "default" if left out
    }).get()

It is consumed from the intake queue (like ``tandem.decide``). The message is stored atomically
(``scripts/message.lua``, one script over the job's own keys) into the job's memory as a
``person`` message of the next round whose leading model call has not started: the Thinker of a
dual job, the Actor of a mono or ReAct job, reads it first thing in that round (and every later
call of that model reads it again as part of the conversation: it stays in memory, so resume and
fork replay it). A parked job (``awaiting_approval``) reads it in the round after the pause. A
message that reaches the job after its last round began is stored but never read, unless the
job is resumed with more rounds.

The answer is ``{"job_id", "accepted": true, "message_id", "round"}`` (``round``: the round whose
leading model call reads it) or ``{"job_id", "accepted": false, "error", "reason"}`` with
``reason`` ``unknown`` (no such job, or another tenant's: the one refusal of
``tandem.tasks.control.owners``, the same for both), ``ended`` (the job has ended: follow
up on it instead), ``invalid`` (no text, or text over ``TANDEM_MAX_GOAL_CHARS``) or ``full``
(``MAX_MESSAGES`` reached); a refusal adds nothing. The same ``idempotency_key`` gets the first
accepted answer again and adds nothing, so the task is safe to run twice. The text is redacted
(the job's secrets and credential-shaped text masked) before it is stored or published, as
event ``message_received``.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.tasks.app import app
from tandem.tasks.control.owners import enter_scope_of, unknown_job, visible
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.state.keys import messages_key
from tandem.tasks.state.scripts import lua
from tandem.tasks.state.store import JobStore
from tandem.tasks.steps.hand_back import check_versions
from tandem.toolkit.redaction import redact

MAX_MESSAGES = 1000
"""The most messages one job may get (their ids are numbered ``0001`` to ``1000``)."""

MAX_KEY_CHARS = 200
"""The longest idempotency key a message may carry."""


def _refusal(job_id: Any, reason: str, error: str) -> dict[str, Any]:
    return {"job_id": job_id, "accepted": False, "error": error, "reason": reason}


def message_job(
    store: JobStore,
    job_id: Any,
    text: Any,
    idempotency_key: Any = None,
    owner: Any = None,
    *,
    max_chars: int = 100_000,
) -> dict[str, Any]:
    """What ``tandem.message`` does, as a function: the task's JSON answer (see the module
    docstring). ``text`` must be redacted already when the job has secrets of its own (the task
    enters the job's scope first); credential-shaped text is masked here. A job that is not
    ``owner``'s, or does not exist, gets the one refusal (``tandem.tasks.control.owners``)."""
    if not visible(store.machine, job_id, owner):
        return unknown_job("tandem.message", job_id)
    if not isinstance(text, str) or not text.strip():
        return _refusal(job_id, "invalid", f"text must be a non-empty string, got {text!r:.80}")
    if len(text) > max_chars:
        return _refusal(
            job_id,
            "invalid",
            f"text has {len(text)} characters, over the limit of {max_chars} (TANDEM_MAX_GOAL_CHARS): "
            "send a shorter message, or pass large inputs by reference",
        )
    key = idempotency_key if isinstance(idempotency_key, str) else ""
    if len(key) > MAX_KEY_CHARS:
        return _refusal(job_id, "invalid", f"idempotency_key is over {MAX_KEY_CHARS} characters")
    spec = store.spec(job_id)
    opening = "thinker" if spec is not None and spec.reasoner == "dual" else "actor"
    keys = [store.key(job_id, "state"), store.key(job_id, "memory"), store.key(job_id, "events")]
    keys.append(messages_key(store.prefix, job_id))
    args = [key, opening, redact(text), job_id, MAX_MESSAGES, store.stream.maxlen]
    script = store.redis.register_script(lua("message"))
    verdict, *rest = (_text(v) for v in script(keys=keys, args=args))
    if verdict in ("ok", "repeat"):
        return dict(json.loads(rest[0]))
    if verdict == "ended":
        return _refusal(
            job_id,
            "ended",
            f"job {job_id!r} has ended ({rest[0]}): a message can no longer reach it; follow up on "
            "it (a new job in its thread) or resume it, then send the message",
        )
    if verdict == "full":
        return _refusal(
            job_id, "full", f"job {job_id!r} has had {MAX_MESSAGES} messages, the most a job may get"
        )
    return unknown_job("tandem.message", job_id)  # it expired since it was looked at


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def message_in_scope(rt: Runtime, job_id: Any, text: Any, idempotency_key: Any, owner: Any) -> dict[str, Any]:
    """``message_job`` inside the job's ``SecretScope``, so its own secrets are masked too."""
    if not visible(rt.machine, job_id, owner):
        return unknown_job("tandem.message", job_id)
    enter_scope_of(rt, job_id)
    return message_job(
        rt.store, job_id, text, idempotency_key, owner, max_chars=rt.settings.limits.goal_chars
    )


@app.task(name="tandem.message", acks_late=True)
def message(
    job_id: str, text: str, idempotency_key: str | None = None, owner: str | None = None
) -> dict[str, Any]:
    """Send ``text`` into job ``job_id`` for tenant ``owner`` (see the module docstring)."""
    rt = get_runtime()
    check_versions(message, rt.machine, job_id)  # a job of formats this worker does not read: handed back
    return message_in_scope(rt, job_id, text, idempotency_key, owner)


__all__ = ["MAX_MESSAGES", "message", "message_in_scope", "message_job"]
