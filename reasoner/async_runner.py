"""The in-process loops for asyncio: ``await reasoner.arun(task)``.

The same loop as ``LoopReasoner.run`` and ``ReActReasoner.run``: both drive the reasoner's plan
(``tandem.reasoner.plan``) through ``plan.walk``, which holds every decision of what follows a
step. Only the waiting differs (``plan.adrive``): model calls are awaited (``agenerate``:
``litellm.acompletion`` for ``LiteLlmModelService``), a reply's tool calls are awaited together
(async tools in the loop, plain ones in threads), and so are approvers. One event loop can drive
hundreds of jobs at once, each waiting on its model host.

Hooks are called as in the sync loop (they are plain methods: keep them quick).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tandem.reasoner import plan, react, steps
from tandem.reasoner.errors import ReasonerError
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory
from tandem.reasoner.task import ReasonerOutcome, Task

if TYPE_CHECKING:
    from tandem.reasoner.base import LoopReasoner
    from tandem.reasoner.model_service import ModelService
    from tandem.reasoner.react import ReActReasoner

__all__ = ["arun_loop", "arun_react"]


async def arun_loop(
    reasoner: LoopReasoner, task: Task, memory: ReasonerMemory | None = None
) -> ReasonerOutcome:
    """``LoopReasoner.run`` for asyncio (what ``reasoner.arun`` calls)."""
    memory = memory if memory is not None else InMemoryReasonerMemory()
    tools, actions = task.recommend()
    models: dict[str, ModelService] = {"actor": reasoner.actor}
    if reasoner.thinker is not None:
        models["thinker"] = reasoner.thinker
    inputs = plan.StepInputs(task, memory, tools, actions, reasoner.hooks)
    try:
        status = await plan.adrive(
            plan.plan_for(reasoner.mode), models, inputs, reasoner.runner, approver=reasoner.approve
        )
        outcome = steps.make_outcome(memory, status)
    except ReasonerError as exc:
        outcome = steps.make_outcome(memory, "failed", error=f"{type(exc).__name__}: {exc}")
    reasoner.hooks.finished(outcome)
    return outcome


async def arun_react(
    reasoner: ReActReasoner, task: Task, memory: ReasonerMemory | None = None
) -> ReasonerOutcome:
    """``ReActReasoner.run`` for asyncio (what ``reasoner.arun`` calls)."""
    memory = memory if memory is not None else InMemoryReasonerMemory()
    task = dataclasses.replace(task, max_rounds=reasoner.max_steps)
    tools, _ = task.recommend()
    loop = plan.plan_for("react", function_calling=reasoner.function_calling, budget=reasoner.max_steps)
    inputs = plan.StepInputs(task, memory, tools, (), reasoner.hooks)
    try:
        status = await plan.adrive(loop, {"actor": reasoner.model}, inputs, reasoner.runner, reasoner.approve)
        outcome = react.react_outcome(memory, status, reasoner.max_steps)
    except ReasonerError as exc:
        outcome = react.react_outcome(
            memory, "failed", reasoner.max_steps, error=f"{type(exc).__name__}: {exc}"
        )
    reasoner.hooks.finished(outcome)
    return outcome
