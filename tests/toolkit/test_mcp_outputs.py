"""An MCP result or error of any size is cut before anything reads it (issue 22): ``result_text``
joins or renders only ``MAX_RESULT_CHARS``, a failed session's error is cut before it is redacted,
and the tool runner cuts further, for the model."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.messages import FunctionCallStatus
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit import McpCallError, McpToolGroup
from tandem.toolkit.mcp_group import MAX_RESULT_CHARS, result_text

SERVER = str(Path(__file__).with_name("mcp_big_server.py"))
MB = 1_000_000
NOTE = f"\n[output cut: showing the first {MAX_RESULT_CHARS} of {3 * MB} characters]"

pytestmark = pytest.mark.timeout(60)


def text_result(*texts: str, structured: Any = None) -> mcp_types.CallToolResult:
    blocks = [mcp_types.TextContent(type="text", text=t) for t in texts]
    return mcp_types.CallToolResult(content=blocks, structured_content=structured)


def test_a_long_result_is_cut_and_says_so() -> None:
    out = result_text(text_result("x" * (3 * MB)))
    assert out == "x" * MAX_RESULT_CHARS + NOTE


def test_many_blocks_are_joined_only_up_to_the_limit() -> None:
    out = result_text(text_result(*(["abc"] * 10)), limit=10)
    assert out == "abc\nabc\nab\n[output cut: showing the first 10 of 39 characters]"
    assert result_text(text_result("abc", "def"), limit=7) == "abc\ndef"


def test_huge_structured_content_is_rendered_only_as_far_as_kept() -> None:
    out = result_text(text_result(structured={"rows": ["r" * 1000] * 100_000}), limit=50)
    head, note = out.split("\n", 1)
    assert head == '{"rows": ["' + "r" * 39
    assert note.startswith("[output cut: showing the first 50 of more than ")


def test_a_huge_session_error_is_cut_before_it_is_redacted() -> None:
    class Failing(McpToolGroup):
        @asynccontextmanager
        async def session(self) -> AsyncIterator[Any]:
            raise RuntimeError("E" * (20 * MB) + " password=hunter2-pw")
            yield  # pragma: no cover

    group = Failing("calc", command="unused")
    with pytest.raises(McpCallError) as caught:
        group.call("add", {})
    assert len(str(caught.value)) < 3000
    assert str(caught.value).endswith("EEE")


def test_a_real_server_s_long_result_and_error_reach_the_model_cut() -> None:
    group = McpToolGroup("big", command=sys.executable, args=[SERVER], timeout=30.0)
    tools = {t.name: t for t in group.tools()}
    runner = ToolRunner(max_output_chars=200)
    calls = [
        ParsedFunctionCall(name="big", call_objective="", args={"chars": 3 * MB}),
        ParsedFunctionCall(name="fail_big", call_objective="", args={"chars": 3 * MB}),
    ]
    done, failed = runner.run_calls(list(tools.values()), calls)
    assert done.status is FunctionCallStatus.SUCCEEDED
    kept = MAX_RESULT_CHARS + len(NOTE)  # what the group kept of the 3 MB
    assert done.output == "x" * 200 + f"\n[output cut: showing the first 200 of {kept} characters]"
    assert failed.status is FunctionCallStatus.FAILED and "EEEE" in failed.output
    assert failed.output.endswith("characters]") and len(failed.output) < 300
