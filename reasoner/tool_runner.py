"""Running tool calls: validation, injection, timeouts, output limits, results in call order.

One ``ToolRunner`` serves both drivers: the in-process reasoners call ``run_calls`` for a whole
reply, and the Celery ``run_tool`` task calls ``run_call`` for one call of a fan-out.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tandem.reasoner.function_calling import ParsedFunctionCall, format_parse_error, parse_function_calls
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.toolkit.context import InjectionMapping, ToolCallContext
from tandem.toolkit.errors import ToolArgumentsError
from tandem.toolkit.tool import InjectedPolicy, Tool


def render_output(value: Any) -> str:
    """A tool's return value as text: strings as they are, the rest as JSON when it can be."""
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def cut_output(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so, so the model knows it saw a part."""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output cut: showing the first {limit} of {len(text)} characters]"


def _call_with_timeout(fn: Any, timeout: float) -> Any:
    """Run ``fn()`` in a daemon thread; ``TimeoutError`` if it has not returned in ``timeout``.

    A thread cannot be killed: a hung tool keeps its thread until it returns, but the job moves on.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="tandem-tool", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"the tool did not finish within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@dataclass
class ToolRunner:
    """Executes tool calls and turns every outcome, good or bad, into a ``FunctionCallResult``.

    ``timeout`` applies to tools without their own; ``max_output_chars`` cuts long outputs;
    ``services`` overrides the process-wide injection mapping; ``max_parallel`` bounds how many
    calls of one reply run at once.
    """

    timeout: float = 60.0
    max_output_chars: int = 8000
    max_parallel: int = 8
    services: InjectionMapping | None = None
    on_injected: InjectedPolicy = "refuse"

    def call_function(
        self,
        tools: Sequence[Tool],
        model_response_text: str,
        tool_call_ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult] | None:
        """Parse the ``<function_call>`` blocks of a reply and run them; ``None`` if there are none."""
        calls = parse_function_calls(model_response_text)
        if not calls:
            return None
        return self.run_calls(tools, calls, tool_call_ctx)

    def run_calls(
        self,
        tools: Sequence[Tool],
        calls: Sequence[ParsedFunctionCall],
        ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult]:
        """Run ``calls`` in parallel (up to ``max_parallel``); results come back in call order."""
        by_name = {t.name: t for t in tools}
        base = ctx or ToolCallContext()

        def one(index: int) -> FunctionCallResult:
            call_ctx = base.model_copy(update={"call_index": index})
            return self.run_call(by_name, calls[index - 1], index, call_ctx)

        if len(calls) == 1:
            return [one(1)]
        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(calls))) as pool:
            return list(pool.map(one, range(1, len(calls) + 1)))

    def run_call(
        self,
        tools: Mapping[str, Tool],
        call: ParsedFunctionCall,
        index: int,
        ctx: ToolCallContext | None = None,
        *,
        call_id: str | None = None,
    ) -> FunctionCallResult:
        """Run one call; never raises for anything the tool or the model did wrong."""

        def failed(output: str) -> FunctionCallResult:
            return FunctionCallResult(
                index=index,
                name=call.name or "(unnamed)",
                call_objective=call.call_objective,
                args=dict(call.args),
                status=FunctionCallStatus.FAILED,
                output=cut_output(output, self.max_output_chars),  # an error's text can be long too
                call_id=call_id,
            )

        if call.error:
            if call_id is not None:  # a native call: no <function_call> block to correct
                return failed(
                    f"The call was not run: {call.error}. Call {call.name!r} again with arguments "
                    "that are a JSON object matching its parameters."
                )
            return failed(format_parse_error(call))
        tool = tools.get(call.name)
        if tool is None:
            valid = ", ".join(sorted(tools)) or "(no tools are available in this step)"
            return failed(f"There is no tool named {call.name!r}. Valid tool names: {valid}.")
        try:
            args = tool.validate_args(call.args, on_injected=self.on_injected)
        except ToolArgumentsError as exc:
            return failed(
                f"Invalid arguments for {tool.name!r}: field {exc.field!r}: {exc.reason}. "
                "Fix this argument and call the tool again."
            )
        timeout = tool.timeout if tool.timeout is not None else self.timeout
        try:
            value = _call_with_timeout(
                lambda: tool.invoke(args, context=ctx, services=self.services), timeout
            )
        except TimeoutError as exc:
            return failed(f"{tool.name!r} timed out: {exc}. Try smaller input or another approach.")
        except Exception as exc:
            return failed(f"{tool.name!r} raised {type(exc).__name__}: {exc}")
        return FunctionCallResult(
            index=index,
            name=tool.name,
            call_objective=call.call_objective,
            args=dict(call.args),
            status=FunctionCallStatus.SUCCEEDED,
            output=cut_output(render_output(value), self.max_output_chars),
            call_id=call_id,
            return_direct=tool.return_direct,
        )
