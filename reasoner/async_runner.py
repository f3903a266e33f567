"""The in-process loops for asyncio: ``await reasoner.arun(task)``.

The same loops as ``LoopReasoner.run`` and ``ReActReasoner.run``, asking the same questions of
the same functions: what a step sends (``steps.thinker_request``, ``steps.actor_request``,
``react.react_request``), how its reply is stored (``steps.record_reply``, ``react.react_record``),
what comes next (``steps.plan_next``, ``react.react_plan_next``, ``react.react_after_tools``) and
how a round's tools run (``tool_round``). Only the waiting differs: model calls are awaited
(``agenerate``: ``litellm.acompletion`` for ``LiteLlmModelService``), a reply's tool calls are
awaited together (async tools in the loop, plain ones in threads), and so are approvers. One
event loop can drive hundreds of jobs at once, each waiting on its model host.

Hooks are called as in the sync loop (they are plain methods: keep them quick).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from tandem.reasoner import react, steps
from tandem.reasoner.errors import ReasonerError
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.model_service import ModelService, agenerate
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.reasoner.tool_round import arun_tool_round
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.reasoner.base import LoopReasoner
    from tandem.reasoner.hooks import ReasonerHooks
    from tandem.reasoner.react import FunctionCalling, ReActReasoner
    from tandem.toolkit.action import Action

__all__ = ["aactor_step", "areact_step", "arun_loop", "arun_react", "athinker_step"]


# -- the steps ------------------------------------------------------------------------------


async def athinker_step(
    model: ModelService,
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: list[Tool],
    hooks: ReasonerHooks,
) -> ModelMessage:
    """``steps.thinker_step`` with the model call awaited."""
    existing = memory.get_message(round_no, "thinker")
    if existing is not None:
        return existing
    reply = await agenerate(model, steps.thinker_request(task, memory, round_no, tools))
    return steps.record_reply(memory, reply, round_no, "thinker", hooks)


async def aactor_step(
    model: ModelService,
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: list[Tool],
    actions: list[Action],
    mode: steps.Mode,
    hooks: ReasonerHooks,
) -> ModelMessage:
    """``steps.actor_step`` with the model call awaited."""
    existing = memory.get_message(round_no, "actor")
    if existing is not None:
        return existing
    reply = await agenerate(model, steps.actor_request(task, memory, round_no, tools, actions, mode))
    return steps.record_reply(memory, reply, round_no, "actor", hooks)


async def areact_step(
    model: ModelService,
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: list[Tool],
    mode: FunctionCalling,
    hooks: ReasonerHooks,
) -> ModelMessage:
    """``react.react_step`` with the model call awaited."""
    existing = memory.get_message(round_no, "actor")
    if existing is not None:
        return existing
    request = react.react_request(task, memory, round_no, tools, mode=mode)
    reply = await agenerate(model, request)
    return react.react_record(task, memory, round_no, reply, tools, mode=mode, hooks=hooks)


# -- the dual and mono loop -----------------------------------------------------------------


async def arun_loop(
    reasoner: LoopReasoner, task: Task, memory: ReasonerMemory | None = None
) -> ReasonerOutcome:
    """``LoopReasoner.run`` for asyncio (what ``reasoner.arun`` calls)."""
    memory = memory if memory is not None else InMemoryReasonerMemory()
    tools, actions = task.recommend()
    try:
        status = await _loop(reasoner, task, memory, tools, actions)
        outcome = steps.make_outcome(memory, status)
    except ReasonerError as exc:
        outcome = steps.make_outcome(memory, "failed", error=f"{type(exc).__name__}: {exc}")
    reasoner.hooks.finished(outcome)
    return outcome


async def _loop(
    reasoner: LoopReasoner, task: Task, memory: ReasonerMemory, tools: list[Tool], actions: list[Action]
) -> Literal["completed", "truncated"]:
    hooks = reasoner.hooks
    for round_no in range(task.max_rounds):
        hooks.round_started(round_no, task.max_rounds)
        if reasoner.mode == "dual":
            assert reasoner.thinker is not None
            await athinker_step(reasoner.thinker, task, memory, round_no, tools, hooks)
        reply = await aactor_step(
            reasoner.actor, task, memory, round_no, tools, actions, reasoner.mode, hooks
        )
        nxt = steps.plan_next(task, reply, round_no)
        if nxt.kind == "deliver":
            return "completed"
        if nxt.kind == "truncated":
            return "truncated"
        if nxt.kind == "tools":
            results = await arun_tool_round(
                reasoner.runner,
                tools,
                nxt.calls,
                task=task,
                round_no=round_no,
                hooks=hooks,
                approver=reasoner.approve,
            )
            steps.apply_tool_results(memory, round_no, results)
    return "truncated"


# -- the ReAct loop -------------------------------------------------------------------------


async def arun_react(
    reasoner: ReActReasoner, task: Task, memory: ReasonerMemory | None = None
) -> ReasonerOutcome:
    """``ReActReasoner.run`` for asyncio (what ``reasoner.arun`` calls)."""
    memory = memory if memory is not None else InMemoryReasonerMemory()
    task = dataclasses.replace(task, max_rounds=reasoner.max_steps)
    tools, _ = task.recommend()
    try:
        status = await _react_loop(reasoner, task, memory, tools)
        outcome = react.react_outcome(memory, status, reasoner.max_steps)
    except ReasonerError as exc:
        outcome = react.react_outcome(
            memory, "failed", reasoner.max_steps, error=f"{type(exc).__name__}: {exc}"
        )
    reasoner.hooks.finished(outcome)
    return outcome


async def _react_loop(
    reasoner: ReActReasoner, task: Task, memory: ReasonerMemory, tools: list[Tool]
) -> Literal["completed", "truncated"]:
    mode, hooks = reasoner.function_calling, reasoner.hooks
    rounds = react.rounds_for(reasoner.max_steps)
    for round_no in range(rounds):
        if memory.get_message(round_no, "actor") is None:
            hooks.round_started(round_no, rounds)
        reply = await areact_step(reasoner.model, task, memory, round_no, tools, mode, hooks)
        nxt = react.react_plan_next(task, reply, round_no, mode=mode)
        if nxt.kind == "deliver":
            return "completed"
        if nxt.kind == "truncated":
            return "truncated"
        stored = memory.get_message(round_no, "tool")
        if stored is None:
            results = await arun_tool_round(
                reasoner.runner,
                tools,
                nxt.calls,
                task=task,
                round_no=round_no,
                hooks=hooks,
                approver=reasoner.approve,
                call_ids=react.react_call_ids(reply, nxt.calls),
            )
            stored = steps.apply_tool_results(memory, round_no, results)
        after = react.react_after_tools(task, stored.function_results, round_no)
        if after.kind == "deliver":
            return "completed"
        if after.kind == "truncated":
            return "truncated"
    return "truncated"  # not reached: the budget ends the loop through react_plan_next
