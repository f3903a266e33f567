"""``ToolRunner`` limits and robustness: ``run_call`` never raises and reports the tool's real outcome;
calls per reply, argument size and hung threads are bounded; secrets never reach the output."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.messages import FunctionCallStatus
from tandem.reasoner.tool_runner import HungTools, ToolRunner, render_output
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

OK, FAILED = FunctionCallStatus.SUCCEEDED, FunctionCallStatus.FAILED


def call(name: str, **args: Any) -> ParsedFunctionCall:
    return ParsedFunctionCall(name=name, call_objective="", args=args)


ran: list[str] = []


def big_int() -> int:
    """Return a number too long for str()."""
    ran.append("big_int")
    return 10**5000


class BadStr:
    def __str__(self) -> str:
        raise RuntimeError("bad __str__")

    def __repr__(self) -> str:
        raise RuntimeError("bad __repr__")


def bad_str() -> object:
    """Return an object nothing can print."""
    ran.append("bad_str")
    return BadStr()


def echo(text: str) -> str:
    """Echo the text."""
    return text


def use_secret(ctx: ToolCallContext) -> str:
    """Report the token it was given (a careless tool)."""
    return f"used token {ctx.secrets['gh_token']}"


def sleepy(seconds: float) -> str:
    """Sleep."""
    time.sleep(seconds)
    return "woke"


@pytest.mark.parametrize("fn", [big_int, bad_str], ids=["big-int", "bad-str"])
def test_an_output_that_cannot_be_rendered_is_still_a_success_of_the_tool(fn: Any) -> None:
    ran.clear()
    result = ToolRunner().run_call({fn.__name__: Tool.from_function(fn)}, call(fn.__name__), 1)
    assert ran == [fn.__name__] and result.status == OK
    assert result.output  # described, not raised


def test_render_output_never_raises() -> None:
    assert "cannot be shown" in render_output(BadStr())
    assert render_output(10**5000)  # JSON fails, str fails: described by its type


def test_an_invalid_input_schema_fails_the_call_without_raising() -> None:
    broken = Tool(name="broken", description="d", function=echo, schema={"type": "object", "properties": 5})
    result = ToolRunner().run_call({"broken": broken}, call("broken", text="x"), 1)
    assert result.status == FAILED and "'broken' was not run" in result.output


def test_non_json_arguments_do_not_make_it_raise() -> None:
    weird = ParsedFunctionCall(name="echo", call_objective="", args={"text": BadStr()})
    result = ToolRunner().run_call({"echo": Tool.from_function(echo)}, weird, 1)
    assert result.status == FAILED


def test_calls_past_the_cap_are_answered_with_the_cap_and_never_run() -> None:
    runner = ToolRunner(max_calls=3)
    calls = [call("echo", text=str(i)) for i in range(5)]
    results = runner.run_calls([Tool.from_function(echo)], calls)
    assert [r.status for r in results] == [OK, OK, OK, FAILED, FAILED]
    assert "at most 3 tool calls run per reply (TANDEM_MAX_TOOL_CALLS)" in results[3].output


def test_arguments_over_the_size_limit_are_refused_naming_the_limit() -> None:
    runner = ToolRunner(max_args_bytes=100)
    result = runner.run_call({"echo": Tool.from_function(echo)}, call("echo", text="x" * 500), 1)
    assert result.status == FAILED and "TANDEM_MAX_TOOL_ARGS_BYTES" in result.output
    assert len(str(result.args)) < 200  # the oversized arguments are not kept in the record


def test_secrets_reach_the_tool_but_never_its_reported_output() -> None:
    ctx = ToolCallContext(job_id="j", secrets={"gh_token": "ghp_live_abcdef"})
    result = ToolRunner().run_call({"use_secret": Tool.from_function(use_secret)}, call("use_secret"), 1, ctx)
    assert result.status == OK and result.output == "used token ***"
    assert "ghp_live" not in ctx.model_dump_json() and "ghp_live" not in repr(ctx)


def test_hung_tools_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    hung = HungTools()
    monkeypatch.setattr("tandem.reasoner.tool_runner.hung_tools", hung)
    release = threading.Event()

    def block(n: int) -> str:
        """Block until released."""
        release.wait(30)
        return "done"

    runner = ToolRunner(timeout=0.2, max_hung=2)
    tools = {"block": Tool.from_function(block)}
    try:
        first = [runner.run_call(tools, call("block", n=i), 1) for i in range(2)]
        assert all("timed out" in r.output for r in first) and hung.count() == 2
        refused = runner.run_call(tools, call("block", n=3), 1)
        assert refused.status == FAILED and "TANDEM_MAX_HUNG_TOOLS=2" in refused.output
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while hung.count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hung.count() == 0  # finished threads are forgotten: calls run again
    assert runner.run_call({"sleepy": Tool.from_function(sleepy)}, call("sleepy", seconds=0), 1).status == OK
