"""``tandem.reasoner.plan``: what follows each step, per reasoner kind, and the in-process driver."""

from __future__ import annotations

import pytest

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage
from tandem.reasoner.plan import DualPlan, MonoPlan, ReActPlan, Step, StepInputs, drive, plan_for
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
