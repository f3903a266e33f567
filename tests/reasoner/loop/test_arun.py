"""``arun``/``ainfer``: the same loops as ``run``, awaited.

Every scenario runs through ``run`` and ``arun`` and must give the same outcome, the same
requests to the models and the same hook events. Then what only asyncio gives: tools awaited
together, and many jobs sharing one event loop against a slow model host.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from bench.async_jobs import run_jobs, two_step_host
from tandem.reasoner import DualModelReasoner, MonoModelReasoner, ReActReasoner
from tandem.reasoner.errors import ModelCallError, ReasonerError
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, NativeToolCall
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.toolkit.tool import Tool


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot handle {reason}")


TOOLS = [Tool.from_function(add), Tool.from_function(explode)]


def fc(name: str, args: dict[str, Any]) -> str:
    payload = {"name": name, "call_objective": f"use {name}", "args": args}
    return f"<function_call>\n{json.dumps(payload)}\n</function_call>"


class Recorder(ReasonerHooks):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def round_started(self, round_no: int, max_rounds: int) -> None:
        self.events.append(("round", round_no, max_rounds))

    def model_replied(self, message: ModelMessage) -> None:
        self.events.append(("reply", message.round, message.role, message.content))

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall) -> None:
        self.events.append(("call", round_no, index, call.name))

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        self.events.append(("result", round_no, result.index, result.status.value, result.output))

    def finished(self, outcome: ReasonerOutcome) -> None:
        self.events.append(("finished", outcome.status))


ACT_0 = "<action>\n" + fc("add", {"a": 2, "b": 3}) + "\n" + fc("explode", {"reason": "x"}) + "\n</action>"
ACT_1 = "<action>\n" + fc("add", {"a": "two", "b": 3}) + "\n</action>"
DONE = "TASK_DONE\n<deliverable>5</deliverable>"


def dual() -> tuple[Any, list[ScriptedModelService]]:
    thinker = ScriptedModelService(
        ["<instruction>a</instruction>"] * 2 + ["<instruction>TASK_DONE</instruction>"]
    )
    actor = ScriptedModelService([ACT_0, ACT_1, DONE])
    return DualModelReasoner(thinker, actor, hooks=Recorder()), [thinker, actor]


def mono() -> tuple[Any, list[ScriptedModelService]]:
    model = ScriptedModelService([ACT_0, ACT_1, DONE])
    return MonoModelReasoner(model, hooks=Recorder()), [model]


def react_native() -> tuple[Any, list[ScriptedModelService]]:
    calling = ModelMessage(
        role="actor",
        content="",
        tool_calls=[
            NativeToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}'),
            NativeToolCall(id="c2", name="explode", arguments='{"reason": "x"}'),
        ],
    )
    model = ScriptedModelService([calling, "It is 5."])
    return ReActReasoner(model, max_steps=6, hooks=Recorder()), [model]


def react_prompt() -> tuple[Any, list[ScriptedModelService]]:
    model = ScriptedModelService([ACT_0, "It is 5."])
    return ReActReasoner(model, max_steps=6, function_calling="prompt", hooks=Recorder()), [model]


def truncated() -> tuple[Any, list[ScriptedModelService]]:
    model = ScriptedModelService([ACT_0, ACT_1])
    return MonoModelReasoner(model, hooks=Recorder()), [model]


def failing() -> tuple[Any, list[ScriptedModelService]]:
    model = ScriptedModelService([ACT_0, ModelCallError("host down", model="m")])
    return MonoModelReasoner(model, hooks=Recorder()), [model]


BUILDS = [
    pytest.param(dual, 5, id="dual"),
    pytest.param(mono, 5, id="mono"),
    pytest.param(react_native, 5, id="react-native"),
    pytest.param(react_prompt, 5, id="react-prompt"),
    pytest.param(truncated, 2, id="truncated"),
    pytest.param(failing, 5, id="failed"),
]


@pytest.mark.parametrize(("build", "rounds"), BUILDS)
def test_arun_is_run(build: Any, rounds: int) -> None:
    sync_reasoner, sync_models = build()
    async_reasoner, async_models = build()
    task = Task(goal="Add two and three", tools=TOOLS, max_rounds=rounds, job_id="j")

    expected = sync_reasoner.run(task)
    got = asyncio.run(async_reasoner.arun(task))

    assert got.model_dump() == expected.model_dump()
    assert async_reasoner.hooks.events == sync_reasoner.hooks.events
    for sync_model, async_model in zip(sync_models, async_models, strict=True):
        assert async_model.calls == sync_model.calls
    assert len(expected.messages) >= 2


def test_ainfer_returns_the_deliverable_and_raises_on_failure() -> None:
    reasoner, _ = mono()
    assert asyncio.run(reasoner.ainfer(Task(goal="g", tools=TOOLS))) == "5"
    react, _ = react_native()
    assert asyncio.run(react.ainfer(Task(goal="g", tools=TOOLS))) == "It is 5."
    broken, _ = failing()
    with pytest.raises(ReasonerError, match="host down"):
        asyncio.run(broken.ainfer(Task(goal="g", tools=TOOLS)))


def test_a_replies_calls_are_awaited_together() -> None:
    """Three async tools and two plain ones, 0.4 s each, finish in well under 2 s."""
    spans: dict[str, tuple[float, float]] = {}

    async def wait_async(name: str) -> str:
        """Wait, asynchronously."""
        start = time.monotonic()
        await asyncio.sleep(0.4)
        spans[name] = (start, time.monotonic())
        return name

    def wait_sync(name: str) -> str:
        """Wait, blocking (runs in a thread)."""
        start = time.monotonic()
        time.sleep(0.4)
        spans[name] = (start, time.monotonic())
        return name

    tools = [Tool.from_function(wait_async), Tool.from_function(wait_sync)]
    calls = [fc("wait_async", {"name": f"a{i}"}) for i in range(3)] + [
        fc("wait_sync", {"name": f"s{i}"}) for i in range(2)
    ]
    model = ScriptedModelService(["<action>\n" + "\n".join(calls) + "\n</action>", DONE])
    outcome = asyncio.run(MonoModelReasoner(model).arun(Task(goal="wait", tools=tools)))
    assert outcome.status == "completed"
    results = next(m for m in outcome.messages if m.role == "tool").function_results
    assert [r.output for r in results] == ["a0", "a1", "a2", "s0", "s1"]
    latest_start = max(s for s, _ in spans.values())
    earliest_end = min(e for _, e in spans.values())
    assert latest_start < earliest_end, "every call was running at the same moment"


def test_an_async_tool_timeout_fails_the_call_only() -> None:
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(30)
        return "late"

    tool = Tool.from_function(hang, timeout=0.2)
    model = ScriptedModelService(["<action>\n" + fc("hang", {}) + "\n</action>", DONE])
    outcome = asyncio.run(MonoModelReasoner(model).arun(Task(goal="g", tools=[tool])))
    assert outcome.status == "completed"
    [result] = next(m for m in outcome.messages if m.role == "tool").function_results
    assert result.status.value == "failed" and "did not finish within 0.2 s" in result.output


# -- many jobs, one loop, a slow host -----------------------------------------------------------


def test_fifty_concurrent_jobs_on_one_loop_have_their_calls_in_flight_together() -> None:
    """50 jobs on one event loop against a host answering in 5 s (in its own process, as a real
    host is); each job makes two model calls and runs a tool, and all complete.

    Every job's first model call is in flight before any of them is answered: the loop does not
    wait for one call to send the next. (How long the 50 take against one is a figure, not a
    test: ``python -m bench.async_jobs`` prints it; the goal is at most 1.5 times one job.)
    """
    latency = 5.0
    with two_step_host(latency) as url:
        host = LiteLlmModelService("openai/test-model", api_base=url, api_key="k", timeout=60)
        clock = Clock()
        asyncio.run(run_jobs(MonoModelReasoner(host, hooks=clock), 50))  # raises unless all complete
    assert len(clock.asked) == len(clock.answered) == 50
    assert max(clock.asked) < min(clock.answered), "the 50 first calls were in flight together"


class Clock(ReasonerHooks):
    """When the jobs sharing these hooks started round 0, and when their round-0 replies came."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.answered: list[float] = []

    def round_started(self, round_no: int, max_rounds: int) -> None:
        if round_no == 0:
            self.asked.append(time.monotonic())

    def model_replied(self, message: ModelMessage) -> None:
        if message.round == 0:
            self.answered.append(time.monotonic())
