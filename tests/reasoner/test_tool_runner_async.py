"""``ToolRunner.arun_call`` / ``arun_indexed``: the results of ``run_call``, awaited."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.messages import FunctionCallStatus
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

loop_threads: list[str] = []


async def where(label: str, ctx: ToolCallContext) -> str:
    """Say which thread ran it, and the call's context."""
    loop_threads.append(threading.current_thread().name)
    return f"{label} job={ctx.job_id} call={ctx.call_index}"


def blocking(label: str) -> str:
    """A plain function."""
    loop_threads.append(threading.current_thread().name)
    return label.upper()


async def fails(reason: str) -> str:
    """Always raises."""
    raise ValueError(reason)


def guarded(x: int) -> int:
    """Needs approval."""
    return x


TOOLS = {
    t.name: t
    for t in (
        Tool.from_function(where),
        Tool.from_function(blocking),
        Tool.from_function(fails),
        Tool.from_function(guarded, requires_approval=True),
    )
}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(ParsedFunctionCall(name="where", args={"label": "x"}), id="async-ok"),
        pytest.param(ParsedFunctionCall(name="blocking", args={"label": "x"}), id="sync-ok"),
        pytest.param(ParsedFunctionCall(name="fails", args={"reason": "bad"}), id="raises"),
        pytest.param(ParsedFunctionCall(name="where", args={"label": 3}), id="bad-args"),
        pytest.param(ParsedFunctionCall(name="where", args={"label": "x", "ctx": {}}), id="injected-sent"),
        pytest.param(ParsedFunctionCall(name="nope", args={}), id="unknown-tool"),
        pytest.param(ParsedFunctionCall(name="where", error="invalid JSON"), id="parse-error"),
        pytest.param(ParsedFunctionCall(name="guarded", args={"x": 1}), id="needs-approval"),
    ],
)
def test_arun_call_gives_what_run_call_gives(call: ParsedFunctionCall) -> None:
    runner = ToolRunner()
    ctx = ToolCallContext(job_id="j", call_index=2)
    expected = runner.run_call(TOOLS, call, 2, ctx)
    got = asyncio.run(runner.arun_call(TOOLS, call, 2, ctx))
    assert got == expected


def test_async_tools_run_in_the_loop_and_plain_ones_in_threads() -> None:
    loop_threads.clear()
    runner = ToolRunner()
    calls = [
        (1, ParsedFunctionCall(name="where", args={"label": "a"})),
        (3, ParsedFunctionCall(name="blocking", args={"label": "b"})),
    ]
    results = asyncio.run(runner.arun_indexed(list(TOOLS.values()), calls, ToolCallContext(job_id="j")))
    assert [(r.index, r.output) for r in results] == [(1, "a job=j call=1"), (3, "B")]
    assert loop_threads[0] == threading.main_thread().name
    assert loop_threads[1] != threading.main_thread().name


def test_an_approved_call_runs() -> None:
    call = ParsedFunctionCall(name="guarded", args={"x": 7})
    result: Any = asyncio.run(ToolRunner().arun_call(TOOLS, call, 1, approved=True))
    assert (result.status, result.output) == (FunctionCallStatus.SUCCEEDED, "7")
