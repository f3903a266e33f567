"""``ToolRunner`` cuts an output before anything reads it (issue 22): a 50 MB return value, a huge
error, a value whose JSON would be enormous cost what ``max_output_chars`` characters cost; the
redaction never reads more than the cut and its margin, and a secret the cut splits is still masked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tandem.reasoner import tool_runner
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.messages import FunctionCallStatus
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit import redaction
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

OK, FAILED = FunctionCallStatus.SUCCEEDED, FunctionCallStatus.FAILED
MB = 1_000_000
LIMIT = 100


def call(name: str, **args: Any) -> ParsedFunctionCall:
    return ParsedFunctionCall(name=name, call_objective="", args=args)


@pytest.fixture
def read_by_redaction(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text the redaction is given."""
    seen: list[int] = []
    original = redaction.redact

    def counting(text: Any, *args: Any, **kwargs: Any) -> str:
        seen.append(len(text) if isinstance(text, str) else -1)
        return original(text, *args, **kwargs)

    monkeypatch.setattr(redaction, "redact", counting)
    monkeypatch.setattr(tool_runner, "redact", counting)
    return seen


def bounded(seen: list[int]) -> bool:
    return bool(seen) and max(seen) <= LIMIT + redaction.head_margin()


def fifty_megabytes() -> str:
    """Return a 50 MB text."""
    return "x" * (50 * MB)


def huge_json() -> list[str]:
    """Return a value whose JSON is 200 MB (a list of one string 200,000 times)."""
    return ["y" * 1000] * 200_000


def noisy() -> str:
    """Fail with a 50 MB message (a server's error page, say)."""
    raise RuntimeError("E" * (50 * MB))


def test_a_fifty_megabyte_output_is_cut_before_it_is_redacted(read_by_redaction: list[int]) -> None:
    runner = ToolRunner(max_output_chars=LIMIT)
    (result,) = runner.run_calls([Tool.from_function(fifty_megabytes)], [call("fifty_megabytes")])
    assert result.status is OK
    assert result.output == "x" * LIMIT + f"\n[output cut: showing the first {LIMIT} of {50 * MB} characters]"
    assert bounded(read_by_redaction), max(read_by_redaction, default=None)


def test_a_value_whose_json_is_huge_is_rendered_only_as_far_as_shown(read_by_redaction: list[int]) -> None:
    runner = ToolRunner(max_output_chars=LIMIT)
    (result,) = runner.run_calls([Tool.from_function(huge_json)], [call("huge_json")])
    assert result.status is OK
    head, note = result.output.split("\n", 1)
    assert head == '["' + "y" * (LIMIT - 2)
    assert note.startswith(f"[output cut: showing the first {LIMIT} of more than ")  # never rendered whole
    assert bounded(read_by_redaction)


def test_a_huge_error_is_cut_before_it_is_redacted(read_by_redaction: list[int]) -> None:
    runner = ToolRunner(max_output_chars=LIMIT)
    (result,) = runner.run_calls([Tool.from_function(noisy)], [call("noisy")])
    assert result.status is FAILED
    assert result.output.startswith("'noisy' raised RuntimeError: EEE")
    assert result.output.endswith(f"[output cut: showing the first {LIMIT} of {50 * MB + 29} characters]")
    assert bounded(read_by_redaction)


def test_the_async_runner_cuts_first_too(read_by_redaction: list[int]) -> None:
    async def fifty_async() -> str:
        """Return a 50 MB text, awaited."""
        return "z" * (50 * MB)

    runner = ToolRunner(max_output_chars=LIMIT)
    tool = Tool.from_function(fifty_async)
    result = asyncio.run(runner.arun_call({tool.name: tool}, call(tool.name), 1))
    assert result.status is OK and result.output.startswith("z" * LIMIT + "\n[output cut")
    assert bounded(read_by_redaction)


def test_a_secret_the_cut_would_split_is_masked_whole() -> None:
    secret = "sk-job-secret-0123456789"

    def leaky() -> str:
        """Return text with the job's secret across the cut."""
        return "a" * (LIMIT - 5) + secret + "b" * 1000

    runner = ToolRunner(max_output_chars=LIMIT)
    ctx = ToolCallContext(secrets={"key": secret})
    (result,) = runner.run_calls([Tool.from_function(leaky)], [call("leaky")], ctx)
    shown = result.output.split("\n", 1)[0]
    assert shown == "a" * (LIMIT - 5) + redaction.MASK + "bb"
    assert secret[:5] not in result.output
