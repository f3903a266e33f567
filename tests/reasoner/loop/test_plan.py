"""``tandem.reasoner.loop``: what follows each step, per reasoner kind, and the in-process drivers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.loop.drive import adrive, drive
from tandem.reasoner.loop.kinds import plan_for
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.react import ReActPlan
from tandem.reasoner.loop.rounds import DualPlan, MonoPlan
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage
from tandem.reasoner.task import Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit import Tool, ToolCallContext

CALL = '<action><function_call>{"name": "add", "args": {"a": 1, "b": 2}}</function_call></action>'


def reply(content: str) -> ModelMessage:
    return ModelMessage(role="actor", content=content)


@pytest.mark.parametrize(
    ("step", "content", "max_rounds", "expected"),
    [
        pytest.param(Step(0, "thinker"), "plan", 5, Step(0, "actor"), id="thinker-hands-over"),
        pytest.param(Step(1, "actor"), "<deliverable>42</deliverable>", 5, Step(1, "finalize", status="completed"),  # noqa: E501
                     id="deliverable"),
        pytest.param(Step(1, "actor"), CALL, 5, Step(1, "tools", calls=1), id="tool-call"),
        pytest.param(Step(1, "actor"), "thinking aloud", 5, Step(2, "thinker"), id="next-round"),
        pytest.param(Step(4, "actor"), CALL, 5, Step(4, "finalize", status="truncated"), id="last-round"),
    ],
)  # fmt: skip
def test_the_dual_plan(step: Step, content: str, max_rounds: int, expected: Step) -> None:
    task = Task(goal="g", max_rounds=max_rounds)
    assert DualPlan().after_model(step, reply(content), task) == expected


def test_mono_and_dual_differ_only_in_the_opening() -> None:
    task = Task(goal="g", max_rounds=3)
    assert (DualPlan().opening(2), MonoPlan().opening(2)) == (Step(2, "thinker"), Step(2, "actor"))
    assert MonoPlan().after_model(Step(0, "actor"), reply("hmm"), task) == Step(1, "actor")
    assert MonoPlan().after_tools(task, [], 1) == Step(2, "actor")
    assert MonoPlan().after_tools(task, [], 2) == Step(2, "finalize", status="truncated")


def test_the_react_plan() -> None:
    plan = ReActPlan("prompt")
    task = Task(goal="g", max_rounds=9)
    assert plan.after_model(Step(0, "actor"), reply(CALL), task) == Step(0, "tools", calls=1)
    assert plan.after_model(Step(0, "actor"), reply("the answer"), task) == Step(
        0, "finalize", status="completed"
    )
    direct = FunctionCallResult(
        index=1, name="add", status=FunctionCallStatus.SUCCEEDED, output="3", return_direct=True
    )
    assert plan.after_tools(task, [direct], 0) == Step(0, "finalize", status="completed")
    assert plan.after_tools(task, [direct.model_copy(update={"return_direct": False})], 0) == Step(1, "actor")
    assert plan.model("thinker") == ("actor", "react")


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown reasoner kind 'triple'"):
        plan_for("triple")


def test_in_process_tools_get_the_idempotency_key_and_attempt_one() -> None:
    seen: list[ToolCallContext] = []

    def add(a: int, b: int, ctx: ToolCallContext) -> int:
        """Add."""
        seen.append(ctx)
        return a + b

    model = ScriptedModelService([CALL, "<deliverable>3</deliverable>"])
    task = Task(goal="g", tools=[Tool.from_function(add)], max_rounds=4, job_id="job-9")
    tools, _ = task.recommend()
    status = drive(
        MonoPlan(), {"actor": model}, StepInputs(task, InMemoryReasonerMemory(), tools), ToolRunner()
    )
    assert status == "completed"
    assert [(c.idempotency_key, c.attempt, c.call_index) for c in seen] == [("job-9:0:1", 1, 1)]


# -- the blocking and the asyncio driver walk the same plan -----------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Events(ReasonerHooks):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def round_started(self, round_no: int, max_rounds: int) -> None:
        self.seen.append(("round", round_no, max_rounds))

    def model_replied(self, message: ModelMessage) -> None:
        self.seen.append(("reply", message.round, message.role))

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        self.seen.append(("result", round_no, result.index, result.output))


def spied(plan: LoopPlan) -> tuple[LoopPlan, list[Step]]:
    """``plan`` with every step it decides on recorded, in order (the opening step first)."""
    taken = [plan.opening(0)]
    after_model, after_tools = plan.after_model, plan.after_tools

    def model_then(step: Step, reply: ModelMessage, task: Task) -> Step:
        taken.append(after_model(step, reply, task))
        return taken[-1]

    def tools_then(task: Task, results: Any, round_no: int) -> Step:
        taken.append(after_tools(task, results, round_no))
        return taken[-1]

    plan.after_model = model_then  # type: ignore[method-assign]
    plan.after_tools = tools_then  # type: ignore[method-assign]
    return plan, taken


TWO_CALLS = (
    '<action><function_call>{"name": "add", "args": {"a": 1, "b": 2}}</function_call>'
    '<function_call>{"name": "add", "args": {"a": 3, "b": 4}}</function_call></action>'
)
SCRIPTS: dict[str, tuple[dict[str, list[str]], int, list[Step]]] = {
    "dual": (
        {"thinker": ["plan", "more", "end"], "actor": [TWO_CALLS, "hmm", "<deliverable>3</deliverable>"]},
        5,
        [Step(0, "thinker"), Step(0, "actor"), Step(0, "tools", calls=2), Step(1, "thinker"),
         Step(1, "actor"), Step(2, "thinker"), Step(2, "actor"), Step(2, "finalize", status="completed")],
    ),
    "mono": (
        {"actor": [TWO_CALLS, CALL, "still going"]},
        3,
        [Step(0, "actor"), Step(0, "tools", calls=2), Step(1, "actor"), Step(1, "tools", calls=1),
         Step(2, "actor"), Step(2, "finalize", status="truncated")],
    ),
    "react": (
        {"actor": [TWO_CALLS, CALL, "the answer is 3"]},
        9,
        [Step(0, "actor"), Step(0, "tools", calls=2), Step(1, "actor"), Step(1, "tools", calls=1),
         Step(2, "actor"), Step(2, "finalize", status="completed")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_drive_and_adrive_take_the_same_steps(kind: str) -> None:
    """The same scripted models through the blocking and the asyncio driver: the same steps, in
    the same order, the same hooks, requests and stored messages."""
    script, max_rounds, expected = SCRIPTS[kind]
    runs = []
    for driver in ("sync", "async"):
        plan, taken = spied(plan_for(kind, function_calling="prompt", budget=max_rounds))
        models = {role: ScriptedModelService(list(replies)) for role, replies in script.items()}
        task = Task(goal="g", tools=[Tool.from_function(add)], max_rounds=max_rounds, job_id="j")
        tools, actions = task.recommend()
        memory, hooks = InMemoryReasonerMemory(), Events()
        inputs = StepInputs(task, memory, tools, actions, hooks)
        if driver == "sync":
            status = drive(plan, models, inputs, ToolRunner())
        else:
            status = asyncio.run(adrive(plan, models, inputs, ToolRunner()))
        calls = {role: [c["messages"] for c in m.calls] for role, m in models.items()}
        runs.append((status, taken, hooks.seen, calls, [m.model_dump() for m in memory.get_messages()]))
    (sync_status, sync_steps, *sync_rest), (async_status, async_steps, *async_rest) = runs
    assert sync_steps == expected
    assert async_steps == sync_steps
    assert async_status == sync_status == expected[-1].status
    assert async_rest == sync_rest
