"""``tandem.reasoner.loop.replay``: the resume point of a stored run, over a Redis memory (fakeredis).

The walk must agree with the in-process driver: a run interrupted anywhere and run again over its
memory calls the models exactly from the step the walk names.
"""

from __future__ import annotations

import fakeredis
import pytest

from tandem.reasoner.loop.drive import drive
from tandem.reasoner.loop.react import ReActPlan
from tandem.reasoner.loop.replay import ResumePoint, resume_point, rounds_used
from tandem.reasoner.loop.rounds import DualPlan, MonoPlan
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage
from tandem.reasoner.task import Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit import Tool

CALLS = (
    '<action><function_call>{"name": "add", "args": {"a": 1, "b": 2}}</function_call>\n'
    '<function_call>{"name": "add", "args": {"a": 3, "b": 4}}</function_call></action>'
)
DONE = "<deliverable>42</deliverable>"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def memory(*messages: ModelMessage) -> RedisReasonerMemory:
    mem = RedisReasonerMemory(fakeredis.FakeRedis(), "job-1", ttl=600)
    for m in messages:
        mem.add_message(m)
    return mem


def msg(round_no: int, role: str, content: str = "plan") -> ModelMessage:
    return ModelMessage(role=role, round=round_no, content=content)  # type: ignore[arg-type]


def result(index: int, output: str = "3", status: str = "succeeded") -> FunctionCallResult:
    return FunctionCallResult(index=index, name="add", status=FunctionCallStatus(status), output=output)


def tool_msg(round_no: int, n: int = 2) -> ModelMessage:
    return ModelMessage(
        role="tool", round=round_no, content="results", function_results=[result(i) for i in range(1, n + 1)]
    )


TASK = Task(goal="g", max_rounds=3)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        pytest.param([], ResumePoint(Step(0, "thinker")), id="nothing-stored"),
        pytest.param([msg(0, "thinker")], ResumePoint(Step(0, "actor"), rounds_used=1), id="after-thinker"),
        pytest.param([msg(0, "thinker"), msg(0, "actor", CALLS)],
                     ResumePoint(Step(0, "tools", calls=2), (1, 2), 1), id="tools-not-run"),
        pytest.param([msg(0, "thinker"), msg(0, "actor", CALLS), tool_msg(0)],
                     ResumePoint(Step(1, "thinker"), rounds_used=1), id="next-round"),
        pytest.param([msg(0, "thinker"), msg(0, "actor", "hmm")],
                     ResumePoint(Step(1, "thinker"), rounds_used=1), id="no-calls-next-round"),
        pytest.param([msg(0, "thinker"), msg(0, "actor", DONE)],
                     ResumePoint(Step(0, "finalize", status="completed"), rounds_used=1), id="delivered"),
        pytest.param([msg(0, "thinker"), msg(0, "actor", "hmm"), msg(1, "thinker"), msg(1, "actor", "hmm"),
                      msg(2, "thinker"), msg(2, "actor", CALLS)],
                     ResumePoint(Step(2, "finalize", status="truncated"), rounds_used=3), id="budget-spent"),
    ],
)  # fmt: skip
def test_the_walk_stops_at_the_first_step_with_nothing_stored(
    stored: list[ModelMessage], expected: ResumePoint
) -> None:
    assert resume_point(DualPlan(), TASK, memory(*stored)) == expected


def test_a_raised_budget_runs_the_calls_the_last_round_asked_for() -> None:
    stored = memory(msg(0, "thinker"), msg(0, "actor", CALLS))
    spent = resume_point(DualPlan(), Task(goal="g", max_rounds=1), stored)
    assert spent.step == Step(0, "finalize", status="truncated")
    assert resume_point(DualPlan(), Task(goal="g", max_rounds=2), stored).step == Step(0, "tools", calls=2)


def test_stored_call_results_count_as_done_and_placeholders_do_not() -> None:
    stored = memory(msg(0, "thinker"), msg(0, "actor", CALLS))
    placeholder = result(2, "the job was cancelled", "failed")
    one = resume_point(DualPlan(), TASK, stored, lambda r, n: [result(1), None])
    assert (one.step, one.todo) == (Step(0, "tools", calls=2), (2,))
    both = resume_point(DualPlan(), TASK, stored, lambda r, n: [result(1), result(2)])
    assert (both.step, both.todo) == (Step(0, "collect", calls=2), ())
    redo = resume_point(
        DualPlan(),
        TASK,
        stored,
        lambda r, n: [result(1), placeholder],
        done=lambda r: r.output != placeholder.output,
    )
    assert (redo.step, redo.todo) == (Step(0, "tools", calls=2), (2,))


def test_mono_and_react_open_with_the_actor() -> None:
    assert resume_point(MonoPlan(), TASK, memory(msg(0, "actor", "hmm"))).step == Step(1, "actor")
    react = ReActPlan("prompt")
    stored = memory(msg(0, "actor", CALLS), tool_msg(0))
    assert resume_point(react, Task(goal="g", max_rounds=9), stored).step == Step(1, "actor")


def test_rounds_used_counts_up_to_the_highest_stored_round() -> None:
    assert rounds_used(memory()) == 0
    assert rounds_used(memory(msg(0, "thinker"), msg(2, "thinker"))) == 3


def _models(fail_at: int | None) -> tuple[ScriptedModelService, ScriptedModelService]:
    """A 3-round dual run (calls in rounds 0 and 1, the deliverable in round 2); the Thinker's
    call number ``fail_at`` (from 0) raises."""
    thinker_replies: list[object] = ["<instruction>go</instruction>"] * 3
    if fail_at is not None:
        thinker_replies[fail_at] = RuntimeError("host down")
    thinker = ScriptedModelService(thinker_replies)  # type: ignore[arg-type]
    actor = ScriptedModelService([CALLS, CALLS, DONE])
    return thinker, actor


def test_a_run_resumed_over_its_memory_calls_the_models_from_the_walks_step() -> None:
    tools = [Tool.from_function(add)]
    task = Task(goal="g", tools=tools, max_rounds=5)
    mem = memory()
    thinker, actor = _models(fail_at=1)
    with pytest.raises(RuntimeError):
        drive(DualPlan(), {"thinker": thinker, "actor": actor}, StepInputs(task, mem, tools), ToolRunner())
    point = resume_point(DualPlan(), task, mem)
    assert point == ResumePoint(Step(1, "thinker"), rounds_used=1)

    thinker2 = ScriptedModelService(["<instruction>go</instruction>"] * 2)
    actor2 = ScriptedModelService([CALLS, DONE])
    models = {"thinker": thinker2, "actor": actor2}
    status = drive(DualPlan(), models, StepInputs(task, mem, tools), ToolRunner())
    assert status == "completed"
    assert (len(thinker2.calls), len(actor2.calls)) == (2, 2)  # rounds 1 and 2 only
    assert resume_point(DualPlan(), task, mem).step == Step(2, "finalize", status="completed")
