"""The in-process loop: ``walk`` a plan step by step; ``drive`` and ``adrive`` do the waiting.

``walk`` is the loop without its waiting, a generator: it yields the ``Work`` each step needs (a
model reply, a round's tool results), takes the result back and asks the plan what follows, until
``finalize``. ``drive`` does the work blocking (``plan.run_model``, ``plan.run_tools``) and
``adrive`` awaited (``plan.arun_model``, ``plan.arun_tools``): the reasoners' ``run`` and
``arun``. Before a model step both summarize the role's older rounds when the plan says a
compaction is due (``tandem.reasoner.loop.compacting``), as the workers' compaction step does.
Stored steps are not asked for again, so a memory holding an earlier part of the same run resumes
it. The Celery driver (``tandem.tasks``) runs the same plan one step per message.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from tandem.reasoner.loop.compacting import acompact, compact
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.step import MODEL_STEPS, FinalStatus, ModelRole, Step, StepInputs
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.reasoner.models.model_service import ModelService
from tandem.reasoner.tool_runner import ToolRunner

if TYPE_CHECKING:
    from tandem.reasoner.approval import Approver

__all__ = ["Done", "Work", "adrive", "drive", "walk"]


@dataclass(frozen=True)
class Work:
    """What one step of ``walk`` needs from its driver.

    A model step (``step.kind`` ``thinker`` or ``actor``): the reply of ``role``'s model, from
    ``plan.run_model`` or ``plan.arun_model``. A ``tools`` step: the results of the calls of
    ``reply`` (the round's stored Actor reply), from ``plan.run_tools`` or ``plan.arun_tools``.
    """

    step: Step
    role: ModelRole = "actor"
    reply: ModelMessage | None = None


Done: TypeAlias = ModelMessage | list[FunctionCallResult]
"""What a driver sends back into ``walk``: the step's stored reply, or its tool results."""


def walk(plan: LoopPlan, inputs: StepInputs) -> Generator[Work, Done, FinalStatus]:
    """The in-process loop of ``plan``, without its waiting: yields the ``Work`` each step needs,
    takes its result back (``generator.send``) and asks ``plan`` what follows, until ``finalize``;
    returns the run's status. ``hooks.round_started`` is called before a round's first step that
    is not stored yet.
    """
    task, memory, hooks = inputs.task, inputs.memory, inputs.hooks
    step = plan.opening(0)
    while step.kind != "finalize":
        if step.kind in MODEL_STEPS:
            if plan.starts_round(step) and memory.get_message(step.round, step.role) is None:
                hooks.round_started(step.round, plan.rounds(task))
            reply = yield Work(step, plan.model(step.role)[0])
            assert isinstance(reply, ModelMessage)
            step = plan.after_model(step, reply, task)
            continue
        stored = memory.get_message(step.round, "tool")
        if stored is None:
            asked = memory.get_message(step.round, "actor")
            assert asked is not None  # a tools step follows a stored Actor reply
            results = yield Work(step, reply=asked)
            assert isinstance(results, list)
            stored = plan.record_tools(memory, step.round, results)
        step = plan.after_tools(task, stored.function_results, step.round)
    return "truncated" if step.status == "truncated" else "completed"


def drive(
    plan: LoopPlan,
    models: Mapping[str, ModelService],
    inputs: StepInputs,
    runner: ToolRunner,
    approver: Approver | None = None,
) -> FinalStatus:
    """Run a whole loop in this process, blocking: ``walk``'s work done with ``plan.run_model``
    and ``plan.run_tools``.

    ``models`` maps a role (``thinker``, ``actor``) to its model; ``approver`` decides on calls
    that need approval.
    """
    loop = walk(plan, inputs)
    work = next(loop)
    while True:
        done: Done
        if work.reply is None:
            model = models[work.role]
            compact(plan, work.step, model, inputs.summarizers.get(work.role, model), inputs)
            done = plan.run_model(work.step, model, inputs)
        else:
            done = plan.run_tools(runner, inputs, work.reply, work.step.round, approver)
        try:
            work = loop.send(done)
        except StopIteration as end:
            return end.value


async def adrive(
    plan: LoopPlan,
    models: Mapping[str, ModelService],
    inputs: StepInputs,
    runner: ToolRunner,
    approver: Approver | None = None,
) -> FinalStatus:
    """``drive`` for asyncio: the same ``walk``, its model calls awaited (``plan.arun_model``) and a
    reply's tool calls awaited together (``plan.arun_tools``; ``approver`` may be async)."""
    loop = walk(plan, inputs)
    work = next(loop)
    while True:
        done: Done
        if work.reply is None:
            model = models[work.role]
            await acompact(plan, work.step, model, inputs.summarizers.get(work.role, model), inputs)
            done = await plan.arun_model(work.step, model, inputs)
        else:
            done = await plan.arun_tools(runner, inputs, work.reply, work.step.round, approver)
        try:
            work = loop.send(done)
        except StopIteration as end:
            return end.value
