"""Strict checks of a task message's arguments, made before the task touches any state.

Anyone who can write to the broker can send any task name with any arguments, and Celery hands
them over as JSON decoded them: ``run_tool(J, 0, 1.0)`` or ``run_tool(J, 0, "2")`` would reach the
state machine's scripts, where Lua's ``tonumber`` reads ``"2"`` and ``1.0`` as call numbers, and a
call would be claimed, failed or counted under a name the real call never uses. So every tandem task
states what each of its arguments must be, and a message whose arguments do not bind to the task's
signature, or whose values have another type (no ``float`` or ``str`` for an ``int``, no ``bool``
either) or lie out of range, is refused before anything is read or written: one WARNING line naming
the task, the argument and the value (redacted, cut), and nothing else happens.

What a refusal looks like depends on the task (``refusal_of``):

- an internal step (``tandem.thinker_turn``, ``actor_turn``, ``react_turn``, ``run_tool``,
  ``collect_tools``, ``finalize``) is left with ``celery.exceptions.Ignore``: no result is stored,
  the message is acknowledged, the job is as it was;
- a control task (``tandem.resume``, ``tandem.fork``, ``tandem.decide``, ``tandem.answer``,
  ``tandem.message``, ``tandem.follow_up``) answers
  ``{"job_id", "accepted": false, "error", "reason": "invalid"}`` like any other refusal, so the
  client waiting for its answer gets one.

Whether the job, its round and its call exist is checked where it can be checked atomically: the
claim scripts (``tandem.tasks.state.machine``) refuse a step or call that is not the job's current
one, and a call index beyond the round's calls is logged (``tandem.tasks.steps.guard.refused``).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from tandem.broker_config.tokens import TENANT_ID

log = logging.getLogger("tandem.tasks")

MAX_ID_CHARS = 256
"""The longest job id a message may name (Celery ids are 36 characters)."""
MAX_ROUND = 100_000
"""The highest round a message may name (``JobSpec.max_rounds`` is at most 500; a resumed job
goes on past it, never this far)."""
MAX_CALLS = 10_000
"""The highest tool call index a message may name."""
SHOWN_CHARS = 80
"""How much of a refused value the warning shows."""

_ID = re.compile(r"[^\x00-\x20{}\x7f]+")
"""A job id: printable, no spaces, no braces (its keys' hash tag is ``{<job_id>}``)."""


class InvalidArgument(ValueError):
    """An argument of a task message that the task refuses: ``task``, ``name`` and ``value``."""

    def __init__(self, task: str, name: str, value: Any, reason: str) -> None:
        self.task, self.name, self.value, self.reason = task, name, value, reason
        super().__init__(f"{task}: argument {name!r} = {shown_value(value)}: {reason}")


def shown_value(value: Any) -> str:
    """``value`` as a refusal shows it: its repr, redacted and cut to ``SHOWN_CHARS``."""
    from tandem.toolkit.redaction import redact  # the toolkit's import costs: only when refused

    try:
        text = redact(repr(value)[: SHOWN_CHARS * 4])
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _integer(low: int, high: int, *, optional: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if type(value) is not int:  # bool is an int subclass; float and str are refused too
            return f"must be an integer from {low} to {high}, not a {type(value).__name__}"
        if not low <= value <= high:
            return f"must be an integer from {low} to {high}"
        return None

    return check


def _job_id(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a job id (a string), not a {type(value).__name__}"
    if not 0 < len(value) <= MAX_ID_CHARS or not _ID.fullmatch(value):
        return f"must be a job id: 1 to {MAX_ID_CHARS} printable characters, no spaces or braces"
    return None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return None
    return f"must be a string, not a {type(value).__name__}"


def _tenant(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and TENANT_ID.fullmatch(value)):
        return None
    return "must be a tenant id: 1 to 64 letters, digits, '_', '.' or '-' (or left out: 'default')"


CHECKS: dict[str, Callable[[Any], str | None]] = {
    "job_id": _job_id,
    "round_no": _integer(0, MAX_ROUND),
    "round": _integer(0, MAX_ROUND),
    "index": _integer(1, MAX_CALLS),
    "max_rounds": _integer(1, MAX_ROUND, optional=True),
    "goal": _text,
    "text": _text,
    "owner": _tenant,
}
"""What an argument of a tandem task must be, by its name in the task's signature. Arguments not
named here (``tandem.infer``'s ``spec``, ``tandem.decide``'s ``decisions``) are checked by the
task itself, which answers with the field and the reason."""

STEP_TASKS = frozenset(
    {
        "tandem.thinker_turn",
        "tandem.actor_turn",
        "tandem.react_turn",
        "tandem.run_tool",
        "tandem.collect_tools",
        "tandem.finalize",
    }
)
"""The internal steps: a refused message is ignored (no result, no answer)."""

CONTROL_TASKS = frozenset(
    {"tandem.resume", "tandem.fork", "tandem.decide", "tandem.answer", "tandem.message", "tandem.follow_up"}
)
"""Tasks that answer their caller: a refused message answers ``accepted: false``."""


_SIGNATURES: dict[str, inspect.Signature] = {}


def check_arguments(
    task: str, run: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The arguments by name; ``InvalidArgument`` unless ``args``/``kwargs`` bind to ``run``'s
    signature and every argument named in ``CHECKS`` has a value it allows. Extra positional
    arguments a step takes as ``*_`` (kept for messages of earlier versions) are not checked:
    the step never reads them."""
    signature = _SIGNATURES.get(task)
    if signature is None:  # a bound task's ``run`` is a bound method: no ``self`` to pass
        signature = _SIGNATURES[task] = inspect.signature(run)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = {"args": list(args), "kwargs": dict(kwargs)}
        raise InvalidArgument(
            task, "arguments", given, f"they do not fit the task's signature ({exc})"
        ) from None
    for name, value in bound.arguments.items():
        check = CHECKS.get(name)
        if check is None:
            continue
        reason = check(value)
        if reason is not None:
            raise InvalidArgument(task, name, value, reason)
    return dict(bound.arguments)


def check_job_id(task: str, value: Any) -> None:
    """``InvalidArgument`` unless ``value`` (``tandem.infer``'s task id: the new job's id) is a
    job id its steps will accept (a bare client chooses it as it likes)."""
    reason = _job_id(value)
    if reason is not None:
        raise InvalidArgument(task, "task id", value, reason)


def refusal_of(
    task: str, error: Exception, kwargs: Mapping[str, Any], args: tuple[Any, ...], reason: str = "invalid"
) -> Any:
    """What a refused message gives, after one WARNING line: ``Ignore`` raised for an internal
    step or ``tandem.infer`` (no result stored: the message may name a real job's id), an answer
    for a control task (``reason`` says why: ``invalid``, ``replayed``)."""
    log.warning("message refused, nothing done: %s", error)
    if task in CONTROL_TASKS:
        job_id = kwargs.get("job_id", args[0] if args else None)
        return {
            "job_id": job_id if isinstance(job_id, str) else None,
            "accepted": False,
            "error": str(error),
            "reason": reason,
        }
    from celery.exceptions import Ignore

    raise Ignore()


__all__ = [
    "CHECKS",
    "CONTROL_TASKS",
    "STEP_TASKS",
    "InvalidArgument",
    "check_arguments",
    "check_job_id",
    "refusal_of",
    "shown_value",
]
