"""Tool approval: which calls of a reply wait for a person, and what their decisions mean.

A call needs approval when its tool says ``requires_approval=True`` or the task's
``approve_tools`` names it (``"all"``: every tool). Calls that need none run as usual; each
waiting call gets one ``Decision``: approve, approve with edited ``args`` (validated against the
tool's schema), or reject with a ``reason``. A rejected call is not run: the model reads a
FAILED result carrying the reason. No decision within the timeout counts as a rejection.

Everything here is pure, so any driver can use it: the in-process reasoners (an ``approve``
callback, sync or async) and a queue that parks a job until a decision arrives by message.
``validate_decisions`` is the one place a batch of decisions is checked: all apply or none.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from tandem.reasoner.decisions import Decision, PendingCall
from tandem.reasoner.errors import ApprovalError
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.toolkit.errors import ToolArgumentsError
from tandem.toolkit.tool import Tool

__all__ = [
    "ApprovalAnswer",
    "ApproveTools",
    "Approver",
    "Decision",
    "PendingCall",
    "adecide",
    "apply_decisions",
    "decide",
    "needs_approval",
    "pending_calls",
    "reject_all",
    "rejected_result",
    "timeout_reason",
    "validate_approve_tools",
    "validate_decisions",
]

ApproveTools = list[str] | Literal["all"]
"""Tools whose calls need approval on top of those declaring ``requires_approval``."""

NO_APPROVER_REASON = (
    "this tool needs a person's approval and the reasoner has no approve callback "
    "(pass approve=... to the reasoner)"
)


ApprovalAnswer = bool | Sequence[Decision | Mapping[str, Any]]
"""What an ``approve`` callback returns: ``True``/``False`` for every pending call at once, or
one decision per pending call (``Decision`` objects or their dict form)."""

Approver = Callable[[list[PendingCall]], "ApprovalAnswer | Awaitable[ApprovalAnswer]"]
"""An ``approve`` callback: gets the pending calls of one reply, returns the decisions."""


def validate_approve_tools(value: Any) -> ApproveTools:
    """``value`` as an ``approve_tools`` setting: ``"all"`` or a list of tool names.

    Raises ``ValueError`` saying what was wrong (pydantic validators reuse it).
    """
    if value == "all":
        return "all"
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"approve_tools must be 'all' or a list of tool names, got {value!r}")
    names: list[str] = []
    for name in value:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"approve_tools holds {name!r}: each entry must be a tool name")
        if name not in names:
            names.append(name)
    return names


def needs_approval(tool: Tool | None, approve_tools: ApproveTools | Sequence[str] = ()) -> bool:
    """Whether a call to ``tool`` waits for a decision (an unknown tool never does: it fails)."""
    if tool is None:
        return False
    return tool.requires_approval or approve_tools == "all" or tool.name in approve_tools


def pending_calls(
    calls: Sequence[ParsedFunctionCall],
    tools: Sequence[Tool],
    approve_tools: ApproveTools | Sequence[str] = (),
    *,
    round_no: int = 0,
    call_ids: Sequence[str | None] | None = None,
) -> list[PendingCall]:
    """The calls of a reply that wait for a decision, in reply order.

    A call the runner would refuse anyway (unreadable, or naming no tool) never waits.
    """
    by_name = {t.name: t for t in tools}
    pending = []
    for index, call in enumerate(calls, start=1):
        if call.error is not None or not needs_approval(by_name.get(call.name), approve_tools):
            continue
        pending.append(
            PendingCall(
                index=index,
                tool=call.name,
                args=dict(call.args),
                objective=call.call_objective,
                round=round_no,
                call_id=call_ids[index - 1] if call_ids else None,
            )
        )
    return pending


def _as_decisions(answer: Any, pending: Sequence[PendingCall]) -> list[Any]:
    if isinstance(answer, bool):
        return [Decision(index=p.index, approve=answer) for p in pending]
    if isinstance(answer, Decision | Mapping):
        return [answer]
    if isinstance(answer, str | bytes) or not isinstance(answer, Sequence):
        raise ApprovalError(
            f"decisions must be a list of {{'index', 'approve', 'reason'?, 'args'?}} objects "
            f"(or True/False for every waiting call), got {answer!r}"
        )
    return list(answer)


def validate_decisions(
    pending: Sequence[PendingCall],
    decisions: Any,
    tools: Sequence[Tool] | Mapping[str, Tool],
    *,
    require_all: bool = True,
) -> dict[int, Decision]:
    """Check a batch of decisions against the calls waiting for them; the decisions by index.

    ``decisions`` is what an approver gave: ``True``/``False`` (every waiting call), a list of
    ``Decision`` or dicts of its wire form. Refused with ``ApprovalError`` (nothing applies):
    an entry that is not a decision, an index no waiting call has, two decisions for one call,
    ``args`` on a rejection, edited ``args`` the tool's schema refuses, and, with
    ``require_all``, a waiting call left without a decision. A rejection without a reason gets
    one.
    """
    by_index = {p.index: p for p in pending}
    by_name = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
    waiting = ", ".join(str(i) for i in sorted(by_index)) or "none"
    decided: dict[int, Decision] = {}
    for position, raw in enumerate(_as_decisions(decisions, pending)):
        try:
            decision = raw if isinstance(raw, Decision) else Decision.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(decision)"
            reason = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            raise ApprovalError(
                f"decision {position + 1} ({raw!r}) is not usable: field {where!r}: {reason}; "
                "write {'index': N, 'approve': true|false, 'reason'?: str, 'args'?: object}"
            ) from None
        call = by_index.get(decision.index)
        if call is None:
            raise ApprovalError(
                f"no call {decision.index!r} is waiting for a decision (waiting calls: {waiting}); "
                "nothing was decided"
            )
        if decision.index in decided:
            raise ApprovalError(f"call {decision.index} has two decisions; give one per call")
        if not decision.approve and decision.args is not None:
            raise ApprovalError(
                f"call {decision.index} is rejected but its decision has args; "
                "edited args belong to an approval ('approve': true)"
            )
        if decision.approve and decision.args is not None:
            tool = by_name.get(call.tool)
            if tool is None:
                raise ApprovalError(f"call {decision.index} names tool {call.tool!r}, which is not available")
            try:
                tool.validate_args(decision.args)
            except ToolArgumentsError as exc:
                raise ApprovalError(
                    f"the edited args of call {decision.index} ({call.tool!r}) do not fit its schema: "
                    f"field {exc.field!r}: {exc.reason}; nothing was decided"
                ) from None
        if not decision.approve and not (decision.reason or "").strip():
            decision = decision.model_copy(update={"reason": "rejected without a reason"})
        decided[decision.index] = decision
    missing = [i for i in sorted(by_index) if i not in decided]
    if require_all and missing:
        raise ApprovalError(
            f"no decision for call(s) {', '.join(map(str, missing))}; decide every waiting call "
            f"(waiting calls: {waiting})"
        )
    return decided


def reject_all(pending: Sequence[PendingCall], reason: str) -> dict[int, Decision]:
    """A rejection with ``reason`` for every pending call."""
    return {p.index: Decision(index=p.index, approve=False, reason=reason) for p in pending}


def timeout_reason(seconds: float) -> str:
    """The reason of a rejection by timeout."""
    return f"no decision within {seconds:g} s"


def apply_decisions(
    calls: Sequence[ParsedFunctionCall], decisions: Mapping[int, Decision]
) -> tuple[list[tuple[int, ParsedFunctionCall]], list[int]]:
    """The approved calls to run, as ``(index, call)`` with edited args applied, and the indexes of
    the rejected ones."""
    approved: list[tuple[int, ParsedFunctionCall]] = []
    rejected: list[int] = []
    for index, decision in sorted(decisions.items()):
        call = calls[index - 1]
        if not decision.approve:
            rejected.append(index)
        elif decision.args is not None:
            approved.append((index, call.model_copy(update={"args": dict(decision.args)})))
        else:
            approved.append((index, call))
    return approved, rejected


def rejected_result(call: PendingCall, reason: str) -> FunctionCallResult:
    """The FAILED result the model reads for a rejected call."""
    return FunctionCallResult(
        index=call.index,
        name=call.tool,
        call_objective=call.objective,
        args=dict(call.args),
        status=FunctionCallStatus.FAILED,
        output=(
            f"The call was not run: a person reviewing {call.tool!r} calls rejected it. Reason: {reason}. "
            "Do not repeat the same call; change it to meet the reason or take another way."
        ),
        call_id=call.call_id,
    )


# -- asking an approver ----------------------------------------------------------------------


def _approver_failed(exc: BaseException) -> ApprovalError:
    return ApprovalError(f"the approve callback raised {type(exc).__name__}: {exc}")


def decide(
    approver: Approver | None,
    pending: list[PendingCall],
    tools: Sequence[Tool],
    timeout: float | None = None,
) -> dict[int, Decision]:
    """Ask ``approver`` (blocking) for the decisions on ``pending``; validated, by index.

    No approver rejects every call; no answer within ``timeout`` seconds rejects every call
    with ``timeout_reason``. An approver that raises, or answers what ``validate_decisions``
    refuses, raises ``ApprovalError``. An async approver is run to completion here.
    """
    if not pending:
        return {}
    if approver is None:
        return reject_all(pending, NO_APPROVER_REASON)
    box: dict[str, Any] = {}

    def ask() -> None:
        try:
            answer = approver(list(pending))
            if inspect.isawaitable(answer):
                answer = asyncio.run(_await(answer))
            box["answer"] = answer
        except BaseException as exc:
            box["error"] = exc

    if timeout is None:
        ask()
    else:
        # A thread, so a person who never answers cannot hold the run past its timeout.
        thread = threading.Thread(target=ask, name="tandem-approve", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            return reject_all(pending, timeout_reason(timeout))
    if "error" in box:
        if isinstance(box["error"], ApprovalError):
            raise box["error"]
        raise _approver_failed(box["error"]) from box["error"]
    return validate_decisions(pending, box.get("answer"), tools)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _is_async(fn: Any) -> bool:
    method = type(fn).__call__ if not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(method)


async def adecide(
    approver: Approver | None,
    pending: list[PendingCall],
    tools: Sequence[Tool],
    timeout: float | None = None,
) -> dict[int, Decision]:
    """``decide`` for asyncio: an async approver is awaited in the loop, a plain one runs in a
    thread so a blocking prompt never stalls other jobs; the same timeout and validation."""
    if not pending:
        return {}
    if approver is None:
        return reject_all(pending, NO_APPROVER_REASON)

    async def ask() -> Any:
        if _is_async(approver):
            return await approver(list(pending))  # type: ignore[misc]
        answer = await asyncio.to_thread(approver, list(pending))
        return await answer if inspect.isawaitable(answer) else answer

    try:
        answer = await asyncio.wait_for(ask(), timeout)
    except TimeoutError:
        return reject_all(pending, timeout_reason(timeout or 0))
    except ApprovalError:
        raise
    except Exception as exc:
        raise _approver_failed(exc) from exc
    return validate_decisions(pending, answer, tools)
