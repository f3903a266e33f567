"""The tool calls of a reply, the context each runs with, and the text of a round's results.

Both drivers read a call the same way: call ``i`` (from 1) of a reply is ``plan.calls_of(reply)[i -
1]``, whether the in-process tool round runs them all or a Celery ``run_tool`` task runs one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tandem.reasoner.function_calling import ParsedFunctionCall, parse_function_calls
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, NativeToolCall
from tandem.reasoner.task import Task
from tandem.toolkit.context import ToolCallContext

__all__ = [
    "call_context",
    "calls_of",
    "native_to_call",
    "tool_context",
    "tool_results_text",
]


def native_to_call(call: NativeToolCall) -> ParsedFunctionCall:
    """A native tool call as a ``ParsedFunctionCall`` (``error`` set when its arguments are not a
    JSON object)."""
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return ParsedFunctionCall(
            name=call.name,
            call_objective="",
            args={},
            raw=call.arguments,
            error=f"the arguments of {call.name!r} are not valid JSON ({exc.msg} at position {exc.pos}); "
            "send a JSON object",
        )
    if not isinstance(args, dict):
        return ParsedFunctionCall(
            name=call.name,
            call_objective="",
            args={},
            raw=call.arguments,
            error=f"the arguments of {call.name!r} must be a JSON object, got {type(args).__name__}",
        )
    return ParsedFunctionCall(name=call.name, call_objective="", args=args, raw=call.arguments)


def calls_of(message: ModelMessage) -> list[ParsedFunctionCall]:
    """The tool calls a reply asks for: its native ``tool_calls`` if any, else its
    ``<function_call>`` blocks (how dual and mono plans, and ReAct in prompt mode, read a reply)."""
    if message.tool_calls:
        return [native_to_call(c) for c in message.tool_calls]
    return parse_function_calls(message.content)


def tool_context(task: Task, round_no: int) -> ToolCallContext:
    """The context injected into the tools of ``round_no`` (in an in-process run, its ``ask``
    answered by the reasoner's ``ask`` callback: ``tandem.reasoner.questions``)."""
    from tandem.reasoner.artifacts import bind_current
    from tandem.reasoner.questions import current_asker

    ctx = ToolCallContext(
        job_id=task.job_id,
        round=round_no,
        role="actor",
        metadata=dict(task.metadata),
        secrets=dict(task.secrets),
    ).bind_asker(current_asker())
    return bind_current(ctx)  # in process: the run's artifacts (``tandem.reasoner.artifacts``)


def call_context(task: Task, round_no: int, index: int, attempt: int = 1) -> ToolCallContext:
    """The context injected into call ``index`` (from 1) of ``round_no``."""
    return tool_context(task, round_no).model_copy(update={"call_index": index, "attempt": attempt})


def tool_results_text(results: Sequence[FunctionCallResult]) -> str:
    """The ``<function_call_result>`` blocks of a round, in call order."""
    return "\n\n".join(r.to_prompt() for r in results)
