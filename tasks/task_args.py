"""Strict checks of a task message's arguments, made before the task touches any state.

Anyone who can write to the broker can send any task name with any arguments, and Celery hands
them over as JSON decoded them: ``run_tool(J, 0, 1.0)`` or ``run_tool(J, 0, "2")`` would reach the
state machine's scripts, where Lua's ``tonumber`` reads ``"2"`` and ``1.0`` as call numbers, and a
call would be claimed, failed or counted under a name the real call never uses. So every tandem task
states what each of its arguments must be (its annotations, and ``CHECKS`` by name), and a message
whose arguments do not bind to the task's signature, or whose values have another type (no
``float`` or ``str`` for an ``int``, no ``bool`` either, no list for a string) or lie out of range,
is refused before anything is read or written: one WARNING line naming the task, the argument and
the value (redacted, cut), and nothing else happens.

The public tasks (``PUBLIC_TASKS``: ``tandem.infer`` and the control tasks) are called by name from
other services, so a message of theirs must also name its arguments (``kwargs``): positional
arguments are refused, whatever they are. What a refusal looks like depends on the task
(``refusal_of``), and every caller of a public task gets an answer naming what was wrong and the
call's documented shape (``call_shape``):

- ``tandem.infer`` fails with ``TaskCallError`` (``tandem.tasks.errors``), stored as the task's
  Celery result, so the client's ``AsyncResult.get()`` raises it; unless the task id names a job
  already (the message may be a forged copy under a real job's id: that job's result is never
  overwritten), or the message asked for no result: then nothing is stored;
- a control task (``tandem.resume``, ``tandem.fork``, ``tandem.decide``, ``tandem.answer``,
  ``tandem.message``, ``tandem.follow_up``) answers
  ``{"job_id", "accepted": false, "error", "reason": "invalid"}`` like any other refusal;
- an internal step (``tandem.thinker_turn``, ``actor_turn``, ``react_turn``, ``run_tool``,
  ``collect_tools``, ``finalize``) is left with ``celery.exceptions.Ignore``: no result is stored
  (nobody waits for one), the message is acknowledged, the job is as it was.

Each is safe to run twice: the same message gives the same answer, and nothing else.

Whether the job, its round and its call exist is checked where it can be checked atomically: the
claim scripts (``tandem.tasks.state.machine``) refuse a step or call that is not the job's current
one, and a call index beyond the round's calls is logged (``tandem.tasks.steps.guard.refused``).
"""

from __future__ import annotations

import inspect
import logging
import re
import types
from collections.abc import Callable, Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

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
    """An argument of a task message that the task refuses: ``task``, ``name`` and ``value``
    (``message``: the whole text, when the default one does not fit)."""

    def __init__(self, task: str, name: str, value: Any, reason: str, *, message: str | None = None) -> None:
        self.task, self.name, self.value, self.reason = task, name, value, reason
        super().__init__(message or f"{task}: argument {name!r} = {shown_value(value)}: {reason}")


def shown_value(value: Any) -> str:
    """``value`` as a refusal shows it: its repr, redacted and cut to ``SHOWN_CHARS``."""
    from tandem.toolkit.redaction import redact  # the toolkit's import costs: only when refused

    try:
        text = redact(repr(value)[: SHOWN_CHARS * 4])
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _a(value: Any) -> str:
    """``value``'s type with its article: ``a str``, ``an int`` (``null`` for ``None``)."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


_NAMES: dict[Any, tuple[str, str]] = {
    str: ("a string", "strings"),
    int: ("an integer", "integers"),
    bool: ("a boolean (true or false)", "booleans"),
    float: ("a number", "numbers"),
    dict: ("an object", "objects"),
    list: ("a list", "lists"),
    type(None): ("null", "nulls"),
}
"""How a refusal names a type (one value, and several in a list)."""


def _alternatives(hint: Any) -> tuple[Any, ...]:
    return get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (as JSON decoded it) is of the type ``hint`` annotates: ``str``, ``int``
    (never a ``bool`` or a ``float``), ``bool``, ``float``, ``None``, ``list[...]`` (each item
    too), ``dict[...]``, and unions of these; ``Any`` and any other type fit (the task checks
    those itself)."""
    if hint is str or hint is int or hint is bool:  # the common hints first: no typing introspection
        return type(value) is hint
    if hint is Any:
        return True
    alternatives = _alternatives(hint)
    if len(alternatives) > 1:
        return any(fits(value, h) for h in alternatives)
    origin = get_origin(hint) or hint
    if hint in (str, int, bool):
        return type(value) is hint
    if hint is float:
        return type(value) in (int, float)
    if hint in (None, type(None)):
        return value is None
    if origin is dict:
        return isinstance(value, dict)
    if origin is list:
        items = get_args(hint)
        return isinstance(value, list) and (not items or all(fits(v, items[0]) for v in value))
    return True


def described(hint: Any) -> str:
    """``hint`` as a refusal says it: ``a string or null``, ``a list of objects or true or false``."""
    parts = []
    for h in _alternatives(hint):
        origin = get_origin(h) or h
        items = get_args(h) if origin is list else ()
        if items and (get_origin(items[0]) or items[0]) in _NAMES:
            parts.append(f"a list of {_NAMES[get_origin(items[0]) or items[0]][1]}")
        else:
            parts.append(_NAMES.get(origin, (getattr(h, "__name__", str(h)), ""))[0])
    return " or ".join(parts)


def _integer(low: int, high: int, *, optional: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if type(value) is not int:  # bool is an int subclass; float and str are refused too
            return f"must be an integer from {low} to {high}, not {_a(value)}"
        if not low <= value <= high:
            return f"must be an integer from {low} to {high}"
        return None

    return check


def _job_id(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a job id (a string), not {_a(value)}"
    if not 0 < len(value) <= MAX_ID_CHARS or not _ID.fullmatch(value):
        return f"must be a job id: 1 to {MAX_ID_CHARS} printable characters, no spaces or braces"
    return None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return None
    return f"must be a string, not {_a(value)}"


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
"""What an argument of a tandem task must be, by its name in the task's signature, beyond the type
its annotation says (``fits``): a job id's form, a range. What an annotation leaves open
(``tandem.infer``'s ``spec``, ``tandem.answer``'s ``answer``: ``Any``) is checked by the task
itself, which answers with the field and the reason."""

STEP_TASKS = frozenset(
    {
        "tandem.thinker_turn",
        "tandem.actor_turn",
        "tandem.react_turn",
        "tandem.run_tool",
        "tandem.collect_tools",
        "tandem.finalize",
        "tandem.compact_thinker",
        "tandem.compact_actor",
    }
)
"""The internal steps: a refused message is ignored (no result, no answer)."""

CONTROL_TASKS = frozenset(
    {"tandem.resume", "tandem.fork", "tandem.decide", "tandem.answer", "tandem.message", "tandem.follow_up"}
)
"""Tasks that answer their caller: a refused message answers ``accepted: false``."""

INTAKE = "tandem.infer"
"""The intake: its task id is the new job's id, its result the job's ``JobResult``."""

PUBLIC_TASKS = CONTROL_TASKS | {INTAKE}
"""The tasks other services call by name, with keyword arguments only; every call gets an answer."""

SHAPE_VALUES: dict[str, str] = {
    "spec": '{"goal": "...", ...}',
    "job_id": '"<job id>"',
    "round": "<int>",
    "max_rounds": "<int>",
    "goal": '"<text>"',
    "text": '"<text>"',
    "decisions": '[{"pause_id": "...", "index": <int>, "approve": <bool>}, ...]',
    "answer": "<JSON value>",
    "pause_id": '"<pause id>"',
    "idempotency_key": '"<text>"',
    "owner": '"<tenant id>"',
}
"""How ``call_shape`` shows each argument of a public task."""


_SIGNATURES: dict[str, inspect.Signature] = {}
_HINTS: dict[str, dict[str, Any]] = {}


def _signature(task: str, run: Callable[..., Any]) -> inspect.Signature:
    signature = _SIGNATURES.get(task)
    if signature is None:  # a bound task's ``run`` is a bound method: no ``self`` to pass
        signature = _SIGNATURES[task] = inspect.signature(run)
    return signature


def _hints(task: str, run: Callable[..., Any]) -> dict[str, Any]:
    """The annotations of ``run``'s arguments (what each must be), read once per task."""
    hints = _HINTS.get(task)
    if hints is None:
        try:
            hints = get_type_hints(run)
        except Exception:  # an annotation that does not resolve: the names' checks only
            hints = {}
        hints.pop("return", None)
        _HINTS[task] = hints
    return hints


def call_shape(task: str, run: Callable[..., Any]) -> str:
    """How ``task`` is called, from ``run``'s signature: ``kwargs={"job_id": "<job id>", ...}``
    with the required arguments, then the optional ones by name."""
    required, optional = [], []
    for name, param in _signature(task, run).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is param.empty:
            required.append(f'"{name}": {SHAPE_VALUES.get(name, "...")}')
        else:
            optional.append(f'"{name}"')
    shape = "kwargs={" + ", ".join(required) + "}"
    return shape + (f" (optional: {', '.join(optional)})" if optional else "")


def _refuse_shape(
    task: str, run: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """``InvalidArgument`` unless a public task's message names its arguments, all of them known
    and the required ones there; the message says what came and the call's shape."""
    if args:
        shape = call_shape(task, run)
        message = f"{task} takes keyword arguments only, {shape}: got args={shown_value(list(args))}"
        raise InvalidArgument(task, "args", list(args), "positional", message=message)
    params = _signature(task, run).parameters
    unknown = [k for k in kwargs if k not in params]
    fixed = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [n for n in fixed if params[n].default is params[n].empty and n not in kwargs]
    if unknown or missing:
        wrong = "; ".join(
            part
            for part in (
                f"unknown {', '.join(map(repr, unknown))}" if unknown else "",
                f"missing {', '.join(map(repr, missing))}" if missing else "",
            )
            if part
        )
        message = f"{task} takes {call_shape(task, run)}: got kwargs={shown_value(dict(kwargs))} ({wrong})"
        raise InvalidArgument(task, "kwargs", dict(kwargs), wrong, message=message)


def check_arguments(
    task: str,
    run: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    keywords_only: bool = False,
) -> dict[str, Any]:
    """The arguments by name; ``InvalidArgument`` unless ``args``/``kwargs`` bind to ``run``'s
    signature, every argument named in ``CHECKS`` has a value it allows and every argument has
    the type its annotation in ``run`` says (``fits``; a public task's refusal also names its
    call's shape). ``keywords_only``: a message of a public task, whose arguments must all be
    named. Extra positional arguments a step takes as ``*_`` (kept for messages of earlier
    versions) are not checked: the step never reads them."""
    public = task in PUBLIC_TASKS
    if keywords_only or (public and not args):
        _refuse_shape(task, run, args, kwargs)
    try:
        bound = _signature(task, run).bind(*args, **kwargs)
    except TypeError as exc:
        given = {"args": list(args), "kwargs": dict(kwargs)}
        message = f"{task} takes {call_shape(task, run)}: {exc}" if public else None
        raise InvalidArgument(
            task, "arguments", given, f"they do not fit the task's signature ({exc})", message=message
        ) from None
    hints = _hints(task, run)
    for name, value in bound.arguments.items():
        check = CHECKS.get(name)
        reason = None if check is None else check(value)
        hint = hints.get(name, Any)
        if reason is None and not fits(value, hint):
            reason = f"must be {described(hint)}, not {_a(value)}"
        if reason is not None:
            if public:
                reason += f"; {task} takes {call_shape(task, run)}"
            raise InvalidArgument(task, name, value, reason)
    return dict(bound.arguments)


def check_job_id(task: str, value: Any) -> None:
    """``InvalidArgument`` unless ``value`` (``tandem.infer``'s task id: the new job's id) is a
    job id its steps will accept (a bare client chooses it as it likes)."""
    reason = _job_id(value)
    if reason is not None:
        raise InvalidArgument(task, "task id", value, f"{reason} (or leave task_id out: Celery makes one)")


def refusal_of(
    task: str,
    error: Exception,
    kwargs: Mapping[str, Any],
    args: tuple[Any, ...],
    reason: str = "invalid",
    *,
    answer: bool = False,
) -> Any:
    """What a refused message gives, after one WARNING line: an answer for a control task
    (``reason`` says why: ``invalid``, ``replayed``); for ``tandem.infer``,
    ``TaskCallError`` raised when it may ``answer`` (Celery stores it as the task's result: see the
    module docstring), else ``Ignore``; ``Ignore`` for an internal step (no result stored)."""
    log.warning("message refused, nothing done: %s", error)
    if task in CONTROL_TASKS:
        job_id = kwargs.get("job_id", args[0] if args else None)
        return {
            "job_id": job_id if isinstance(job_id, str) else None,
            "accepted": False,
            "error": str(error),
            "reason": reason,
        }
    if task == INTAKE and answer:
        from tandem.tasks.errors import TaskCallError

        raise TaskCallError(str(error))
    from celery.exceptions import Ignore

    raise Ignore()


__all__ = [
    "CHECKS",
    "CONTROL_TASKS",
    "INTAKE",
    "PUBLIC_TASKS",
    "SHAPE_VALUES",
    "STEP_TASKS",
    "InvalidArgument",
    "call_shape",
    "check_arguments",
    "check_job_id",
    "described",
    "fits",
    "refusal_of",
    "shown_value",
]
