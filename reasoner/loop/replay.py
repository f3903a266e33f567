"""Where a stored run stands: walk a ``LoopPlan`` over a memory to the first step not yet done.

A run's memory holds every model reply by ``(round, role)`` and, once a round's tools ran, the
round's ``tool`` message with their results. Walking the plan from ``opening(0)`` over it, every
stored reply answers its model step and every stored ``tool`` message answers its tools step, so
the walk stops at the first step nothing answers: that is where the run resumes (``resume_point``).
Nothing stored is run again.

A tools step whose round has no ``tool`` message yet may have some of its calls' results stored
apart (the distributed driver stores each call's result as it comes, before the round's results
are collected): ``call_results(round, count)`` gives them (``None`` where missing). Calls with a
result count as done; when every call has one the run resumes at ``collect``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.step import MODEL_STEPS, Step
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult
from tandem.reasoner.task import Task

CallResults = Callable[[int, int], Sequence[FunctionCallResult | None]]
"""``(round, count) -> results of calls 1..count`` (``None`` where none is stored)."""


def _none_stored(round_no: int, count: int) -> list[FunctionCallResult | None]:
    return [None] * count


@dataclass(frozen=True)
class ResumePoint:
    """The first step of a run with nothing stored: ``step``; for a ``tools`` step, the calls
    still to run (``todo``, from 1). ``rounds_used`` counts the rounds that have a stored message."""

    step: Step
    todo: tuple[int, ...] = ()
    rounds_used: int = 0


def rounds_used(memory: ReasonerMemory) -> int:
    """How many rounds have at least one stored message of a model or the tools (the highest
    such round plus one; a person's message waiting for its round does not count)."""
    messages = memory.get_messages()
    return max((m.round for m in messages if m.role != "person"), default=-1) + 1


def resume_point(
    plan: LoopPlan,
    task: Task,
    memory: ReasonerMemory,
    call_results: CallResults = _none_stored,
    *,
    done: Callable[[FunctionCallResult], bool] = lambda result: True,
) -> ResumePoint:
    """Walk ``plan`` over ``memory`` (with ``task``'s budget) to the first step with nothing stored.

    ``done`` says whether a stored call result counts (a placeholder written for a call that never
    ran, such as a cancelled job's, does not: the call is in ``todo`` again). The walk ends at a
    ``finalize`` step when the stored run ends under this budget.
    """
    used = rounds_used(memory)
    step = plan.opening(0)
    while step.kind != "finalize":
        if step.kind in MODEL_STEPS:
            reply = memory.get_message(step.round, step.role)
            if reply is None:
                return ResumePoint(step, rounds_used=used)
            step = plan.after_model(step, reply, task)
            continue
        stored = memory.get_message(step.round, "tool")
        if stored is None:
            results = call_results(step.round, step.calls)
            todo = tuple(i for i, r in enumerate(results, start=1) if r is None or not done(r))
            if todo:
                return ResumePoint(step, todo, used)
            return ResumePoint(Step(step.round, "collect", calls=step.calls), rounds_used=used)
        step = plan.after_tools(task, stored.function_results, step.round)
    return ResumePoint(step, rounds_used=used)


__all__ = ["CallResults", "ResumePoint", "resume_point", "rounds_used"]
