"""A reply to a pause, given once: what a decision (``tandem.decide``) and an answer
(``tandem.answer``) share.

Both are stored by a script that checks the pause they name. With an idempotency key the first
reply is kept under the key (``JobMachine.remember``) and given again for the same key, a refusal
included, so a request sent again gets the reply the first one got whatever happened since; the
script itself says ``repeat`` when the key was used meanwhile (``Repeated``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tandem.tasks.errors import DecisionRefused, InvalidAnswer, StalePauseError

if TYPE_CHECKING:
    from tandem.tasks.state.machine import JobMachine

MAX_KEY = 200
"""The longest idempotency key, in characters."""

R = TypeVar("R")


class Repeated(Exception):
    """The request's idempotency key has a reply already: ``reply``."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__("answered")
        self.reply = reply


def refusal(job_id: str, exc: DecisionRefused, pause: Any) -> dict[str, Any]:
    """The reply of a refused decision or answer: ``{"job_id", "accepted": false, "error",
    "reason", "pause_id", "current_pause"}`` (``reason``: ``stale_pause``, ``invalid_answer`` or
    ``refused``)."""
    stale = isinstance(exc, StalePauseError)
    reason = "stale_pause" if stale else "invalid_answer" if isinstance(exc, InvalidAnswer) else "refused"
    named = pause if isinstance(pause, str) else None
    return {
        "job_id": job_id,
        "accepted": False,
        "error": str(exc),
        "reason": reason,
        "pause_id": exc.pause_id if isinstance(exc, StalePauseError) else named,
        "current_pause": exc.current_pause if isinstance(exc, StalePauseError) else None,
    }


def reply_once(
    machine: JobMachine,
    job_id: str,
    key: Any,
    pause: Any,
    verb: str,
    store: Callable[[str], R],
    accepted: Callable[[str, R], dict[str, Any]],
) -> dict[str, Any]:
    """The reply to a request on pause ``pause`` under idempotency ``key`` (``None``: none):
    ``store(key)`` applies it (raising ``DecisionRefused`` or ``Repeated``), ``accepted`` makes the
    reply of what it stored. ``verb`` says what was not done when the key itself is refused
    (``"decided"``, ``"answered"``)."""
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_KEY):
        why = f"idempotency_key must be a string of 1 to {MAX_KEY} characters, got {key!r}; "
        why += f"nothing was {verb}"
        return refusal(job_id, DecisionRefused(why), pause)
    if key:
        prior = machine.answered(job_id, key)
        if prior is not None:
            return dict(json.loads(prior))
    try:
        record = store(key or "")
    except Repeated as done:
        return done.reply
    except DecisionRefused as exc:
        refused = refusal(job_id, exc, pause)
        if not key:
            return refused
        return dict(json.loads(machine.remember(job_id, key, json.dumps(refused))))
    return accepted(job_id, record)


__all__ = ["MAX_KEY", "Repeated", "refusal", "reply_once"]
