"""``ToolRunner``: every outcome of a tool call, good or bad, becomes a ``FunctionCallResult``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from tandem.reasoner.function_calling import FUNCTION_CALLING_GUIDE, ParsedFunctionCall
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.reasoner.tool_runner import ToolRunner, cut_output, render_output
from tandem.toolkit.context import InjectionMapping, ToolCallContext
from tandem.toolkit.tool import Tool

OK, FAILED = FunctionCallStatus.SUCCEEDED, FunctionCallStatus.FAILED


def call(name: str, objective: str = "", **args: Any) -> ParsedFunctionCall:
    return ParsedFunctionCall(name=name, call_objective=objective, args=args)


def block(name: str, args: str) -> str:
    return (
        f'<function_call>\n{{"name": "{name}", "call_objective": "test", "args": {args}}}\n</function_call>'
    )


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot handle {reason}")


ADD, SHOUT, EXPLODE = (Tool.from_function(f) for f in (add, shout, explode))


@pytest.fixture
def runner() -> ToolRunner:
    return ToolRunner(timeout=10)


# -- results and validation ---------------------------------------------------------------------


def test_a_call_succeeds_with_its_output_and_echo(runner: ToolRunner) -> None:
    (result,) = runner.run_calls([ADD], [call("add", "sum them", a=2, b=3)])
    assert result == FunctionCallResult(
        index=1, name="add", call_objective="sum them", args={"a": 2, "b": 3}, status=OK, output="5"
    )
    assert result.to_prompt() == (
        "<function_call_result>\ncall 1: add(a=2, b=3)\nstatus: succeeded\nobjective: sum them\n"
        "output:\n5\n</function_call_result>"
    )


def test_results_are_numbered_in_call_order(runner: ToolRunner) -> None:
    calls = [call("shout", text=w) for w in ("one", "two", "three", "four", "five")]
    results = runner.run_calls([SHOUT], calls)
    assert [(r.index, r.output) for r in results] == [
        (1, "ONE"),
        (2, "TWO"),
        (3, "THREE"),
        (4, "FOUR"),
        (5, "FIVE"),
    ]


@pytest.mark.parametrize(
    ("args", "field", "reason"),
    [
        pytest.param({"a": "seven", "b": 1}, "a", "valid integer", id="wrong-type"),
        pytest.param({"a": 1}, "b", "required parameter is missing", id="missing"),
        pytest.param({"a": 1, "b": 2, "c": 3}, "c", "the parameters are: a, b", id="unknown-field"),
    ],
)
def test_invalid_arguments_name_the_field_and_reason(
    runner: ToolRunner, args: dict[str, Any], field: str, reason: str
) -> None:
    (result,) = runner.run_calls([ADD], [call("add", **args)])
    assert result.status is FAILED
    assert f"field {field!r}" in result.output and reason in result.output
    assert "call the tool again" in result.output
    assert result.args == args  # echoed so the model sees what it sent


def test_an_exception_becomes_a_failed_result(runner: ToolRunner) -> None:
    results = runner.run_calls([EXPLODE, ADD], [call("explode", reason="x"), call("add", a=1, b=1)])
    assert [r.status for r in results] == [FAILED, OK]
    assert results[0].output == "'explode' raised RuntimeError: cannot handle x"
    assert results[1].output == "2"


def test_an_unknown_tool_lists_the_valid_names(runner: ToolRunner) -> None:
    (result,) = runner.run_calls([SHOUT, ADD], [call("multiply", a=1)])
    assert result.status is FAILED and result.name == "multiply"
    assert result.output == "There is no tool named 'multiply'. Valid tool names: add, shout."


def test_an_unknown_tool_with_no_tools_at_all(runner: ToolRunner) -> None:
    (result,) = runner.run_calls([], [call("anything")])
    assert result.status is FAILED and "no tools are available" in result.output


def test_a_parse_error_comes_back_short_without_the_guide(runner: ToolRunner) -> None:
    results = runner.call_function(
        [ADD], '<action>\n<function_call>\n{"name": "add", "args": {"a": 1,, "b": 2}}\n</function_call>'
    )
    assert results is not None
    (result,) = results
    assert result.status is FAILED
    assert result.output.startswith("This <function_call> block was not run: invalid JSON at line 2")
    assert "Expected: <function_call>" in result.output
    assert "## Calling functions" not in result.output
    assert len(result.output) < len(FUNCTION_CALLING_GUIDE) / 3


def test_a_bad_block_does_not_stop_the_good_ones(runner: ToolRunner) -> None:
    text = "\n".join(
        [
            block("add", '{"a": 1, "b": 2}'),
            "<function_call>[1, 2]</function_call>",
            block("shout", '{"text": "hi"}'),
        ]
    )
    results = runner.call_function([ADD, SHOUT], text)
    assert results is not None
    assert [(r.index, r.status) for r in results] == [(1, OK), (2, FAILED), (3, OK)]
    assert "not a JSON object" in results[1].output
    assert results[2].output == "HI"


def test_call_function_without_blocks_is_none(runner: ToolRunner) -> None:
    assert runner.call_function([ADD], "<action>No tools needed.</action>") is None
    # Blocks inside thinking sections are not calls.
    assert runner.call_function([ADD], f"<think>{block('add', '{}')}</think>done") is None


# -- output ---------------------------------------------------------------------------------------


def test_a_long_output_is_cut_and_says_so() -> None:
    def long_text(n: int) -> str:
        """A long text."""
        return "x" * n

    runner = ToolRunner(max_output_chars=100)
    (result,) = runner.run_calls([Tool.from_function(long_text)], [call("long_text", n=1000)])
    assert result.status is OK
    assert result.output.startswith("x" * 100 + "\n")
    assert "x" * 101 not in result.output
    assert "[output cut: showing the first 100 of 1000 characters]" in result.output


def test_a_long_error_is_cut_too() -> None:
    def noisy() -> str:
        """Fails with a huge message (a server's error page, say)."""
        raise RuntimeError("E" * 5000)

    runner = ToolRunner(max_output_chars=100)
    (result,) = runner.run_calls([Tool.from_function(noisy)], [call("noisy")])
    assert result.status is FAILED
    assert result.output.startswith("'noisy' raised RuntimeError: EEE")
    assert result.output.endswith("[output cut: showing the first 100 of 5029 characters]")


def test_cut_output_leaves_short_text_alone() -> None:
    assert cut_output("abc", 3) == "abc"
    assert cut_output("abc", 0) == "abc"  # 0 means no limit
    assert cut_output("abcd", 3) == "abc\n[output cut: showing the first 3 of 4 characters]"


CIRCULAR: list[object] = []
CIRCULAR.append(CIRCULAR)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param("plain", "plain", id="str"),
        pytest.param(None, "(no output)", id="none"),
        pytest.param({"k": [1, "é"]}, '{"k": [1, "é"]}', id="json"),
        pytest.param(3.5, "3.5", id="number"),
        pytest.param(CIRCULAR, str(CIRCULAR), id="not-json"),
    ],
)
def test_render_output(value: object, text: str) -> None:
    assert render_output(value) == text


# -- execution: parallel, timeout, async ----------------------------------------------------------


def test_calls_of_one_reply_run_at_the_same_time() -> None:
    # Each call waits for the other at the barrier: run one after the other, the barrier breaks.
    barrier = threading.Barrier(2)

    def meet(who: str) -> str:
        """Wait for the other call."""
        barrier.wait(timeout=10)
        return f"{who} met"

    runner = ToolRunner(timeout=30, max_parallel=2)
    results = runner.run_calls(
        [Tool.from_function(meet)], [call("meet", who="left"), call("meet", who="right")]
    )
    assert [(r.status, r.output) for r in results] == [(OK, "left met"), (OK, "right met")]


def test_max_parallel_one_runs_calls_one_at_a_time() -> None:
    """The converse of the barrier test: with one slot the second call never meets the first."""
    barrier = threading.Barrier(2)

    def meet() -> str:
        """Wait for the other call."""
        barrier.wait(timeout=0.3)
        return "met"

    runner = ToolRunner(timeout=30, max_parallel=1)
    results = runner.run_calls([Tool.from_function(meet)], [call("meet"), call("meet")])
    assert [r.status for r in results] == [FAILED, FAILED]
    assert "BrokenBarrierError" in results[0].output


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # lets the abandoned tool thread end once the test is over


def test_a_hung_tool_times_out_as_a_failed_result(gate: threading.Event) -> None:
    def hang() -> str:
        """Never returns on its own."""
        gate.wait()
        return "released"

    runner = ToolRunner(timeout=0.2)
    results = runner.run_calls([Tool.from_function(hang), ADD], [call("hang"), call("add", a=1, b=2)])

    assert results[0].status is FAILED
    assert "'hang' timed out" in results[0].output and "0.2 s" in results[0].output
    assert not gate.is_set()  # the result came from the timeout, not from the tool
    assert (results[1].status, results[1].output) == (OK, "3")  # the other call is unaffected


def test_a_tool_timeout_overrides_the_runner_default(gate: threading.Event) -> None:
    def hang() -> str:
        """Never returns on its own."""
        gate.wait()
        return "released"

    runner = ToolRunner(timeout=3600)
    (result,) = runner.run_calls([Tool.from_function(hang, timeout=0.2)], [call("hang")])
    assert result.status is FAILED and "timed out" in result.output
    assert not gate.is_set()


def test_async_tools_are_awaited(runner: ToolRunner) -> None:
    async def fetch(key: str) -> dict[str, str]:
        """Fetch a value."""
        await asyncio.sleep(0)
        return {"key": key, "value": key[::-1]}

    async def fail_async() -> str:
        """Fails after awaiting."""
        await asyncio.sleep(0)
        raise ValueError("async failure")

    tools = [Tool.from_function(fetch), Tool.from_function(fail_async)]
    results = runner.run_calls(tools, [call("fetch", key="abc"), call("fail_async")])
    assert (results[0].status, results[0].output) == (OK, '{"key": "abc", "value": "cba"}')
    assert (results[1].status, results[1].output) == (FAILED, "'fail_async' raised ValueError: async failure")


# -- injection ------------------------------------------------------------------------------------


def test_the_context_is_injected_with_the_call_index(runner: ToolRunner) -> None:
    def whoami(label: str, ctx: ToolCallContext) -> str:
        """Report the call's context."""
        return f"{label}:{ctx.job_id}:{ctx.round}:{ctx.call_index}:{ctx.metadata.get('tenant')}"

    tool = Tool.from_function(whoami)
    assert set(tool.parameters["properties"]) == {"label"}
    base = ToolCallContext(job_id="job-7", round=4, metadata={"tenant": "t1"})

    results = runner.run_calls([tool], [call("whoami", label="a"), call("whoami", label="b")], base)

    assert [r.output for r in results] == ["a:job-7:4:1:t1", "b:job-7:4:2:t1"]
    assert base.call_index == 0  # each call got its own copy


def test_a_context_is_made_when_none_is_given(runner: ToolRunner) -> None:
    def index_of(ctx: ToolCallContext) -> int:
        """The call index."""
        return ctx.call_index

    (result,) = runner.run_calls([Tool.from_function(index_of)], [call("index_of")])
    assert (result.status, result.output) == (OK, "1")


def test_a_value_for_an_injected_parameter_is_refused(runner: ToolRunner) -> None:
    def whoami(ctx: ToolCallContext) -> str:
        """Say the job id."""
        return ctx.job_id

    tool = Tool.from_function(whoami)
    forged = ToolCallContext(job_id="real")
    (result,) = runner.run_calls([tool], [call("whoami", ctx={"job_id": "forged"})], forged)
    assert result.status is FAILED
    assert "field 'ctx'" in result.output and "supplied by the system" in result.output


def test_the_drop_policy_ignores_the_forged_value() -> None:
    def whoami(ctx: ToolCallContext) -> str:
        """Say the job id."""
        return ctx.job_id

    runner = ToolRunner(on_injected="drop")
    ctx = ToolCallContext(job_id="real")
    (result,) = runner.run_calls(
        [Tool.from_function(whoami)], [call("whoami", ctx={"job_id": "forged"})], ctx
    )
    assert (result.status, result.output) == (OK, "real")


def test_an_optional_context_is_injected(runner: ToolRunner) -> None:
    def old_style(x: int, ctx: Optional[ToolCallContext] = None) -> str:  # noqa: UP045
        """Optional[...] spelling."""
        return f"{x}:{ctx.job_id if ctx else 'none'}"

    def new_style(x: int, ctx: ToolCallContext | None = None) -> str:
        """X | None spelling."""
        return f"{x}:{ctx.job_id if ctx else 'none'}"

    tools = [Tool.from_function(old_style), Tool.from_function(new_style)]
    assert all(set(t.parameters["properties"]) == {"x"} for t in tools)
    ctx = ToolCallContext(job_id="j1")
    results = runner.run_calls(tools, [call("old_style", x=1), call("new_style", x=2)], ctx)
    assert [r.output for r in results] == ["1:j1", "2:j1"]


class Database:
    def __init__(self, name: str) -> None:
        self.name = name


def test_a_mapped_service_is_injected_and_hidden(runner: ToolRunner) -> None:
    services = InjectionMapping()
    services.register(Database, Database("live-db"))

    def lookup(key: str, db: Database, maybe: Optional[Database] = None) -> str:  # noqa: UP045
        """Look a key up."""
        return f"{key} in {db.name} / {maybe.name if maybe else None}"

    tool = Tool.from_function(lookup, injection=services)
    assert set(tool.parameters["properties"]) == {"key"}

    results = runner.run_calls([tool], [call("lookup", key="k1"), call("lookup", key="k2", db="attacker")])

    assert (results[0].status, results[0].output) == (OK, "k1 in live-db / live-db")
    assert results[1].status is FAILED and "field 'db'" in results[1].output


def test_the_runner_services_supply_the_instance() -> None:
    """``ToolRunner.services`` overrides the tool's mapping for the value injected."""
    registered = InjectionMapping()
    registered.register(Database, Database("default-db"))
    override = InjectionMapping()
    override.register(Database, Database("tenant-db"))

    def lookup(db: Database) -> str:
        """Which database."""
        return db.name

    tool = Tool.from_function(lookup, injection=registered)
    (plain,) = ToolRunner().run_calls([tool], [call("lookup")])
    (overridden,) = ToolRunner(services=override).run_calls([tool], [call("lookup")])
    assert (plain.output, overridden.output) == ("default-db", "tenant-db")


def test_run_call_keeps_the_native_call_id(runner: ToolRunner) -> None:
    result = runner.run_call({"add": ADD}, call("add", a=1, b=2), 3, call_id="call_9")
    assert (result.index, result.call_id, result.output) == (3, "call_9", "3")
    failed = runner.run_call({}, call("nope"), 2, call_id="call_8")
    assert (failed.index, failed.call_id, failed.status) == (2, "call_8", FAILED)
