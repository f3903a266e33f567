"""``ReActPlan``: one model calls tools until it answers.

A round ``r`` is a model step (the reply stored as ``(r, "actor")``) and, when the reply asks for
tools, a tool step (all of its calls run in parallel; their results are stored as one
``(r, "tool")`` message whose ``function_results`` carry the calls' ids). The run stops when a
reply asks for no tool (its content is the answer), when a tool marked ``return_direct`` succeeds
(its output is the answer), or when the step budget is spent (``tandem.reasoner.loop.react_budget``;
``Task.max_rounds`` is the budget, in steps).

Function calling comes in two modes:

- ``"native"``: the tools go to the model as OpenAI tool schemas (``generate(..., tools=...)``),
  the reply's ``tool_calls`` are the calls, and each result goes back as a ``tool`` message with
  its ``tool_call_id``.
- ``"prompt"``: for models without native tool calling. The system prompt describes the tools and
  the ``<function_call>`` protocol, calls are parsed from the reply, and the results go back as
  ``<function_call_result>`` user text.

Values a model sends for injected parameters are dropped (``ToolRunner(on_injected="drop")``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Literal

from tandem.reasoner.errors import ReasonerError
from tandem.reasoner.function_calling import (
    FUNCTION_CALLING_GUIDE,
    ParsedFunctionCall,
    extract_tag,
    strip_thinking,
)
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks
from tandem.reasoner.loop.calls import calls_of, native_to_call
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.react_budget import (
    NEEDS_MORE_STEPS,
    budget_error,
    needs_more_steps,
    rounds_for,
    steps_left,
    tools_fit,
    truncated_reply,
)
from tandem.reasoner.loop.rounds import merge_turns
from tandem.reasoner.loop.step import ModelRole, Step, StepInputs, finalize
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, NativeToolCall
from tandem.reasoner.models.model_service import ChatMessage
from tandem.reasoner.prompts import person_note, task_text
from tandem.reasoner.task import OutcomeStatus, Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

__all__ = ["REACT_PROMPT", "FunctionCalling", "ReActPlan", "dropping"]

FunctionCalling = Literal["native", "prompt"]
"""How the model asks for tools: the provider's ``tool_calls`` or ``<function_call>`` blocks."""

REACT_PROMPT = """\
You solve the task step by step, using the tools when they help.

Call a tool whenever a fact, a computation or an action is better done by a tool than guessed.
You may call several tools in one reply when the calls do not depend on each other: they run at
the same time and every result comes back to you. If a call fails, read the error, fix the call
and try again, or take another way.

When you have the answer, reply with it and call no tool: a reply without tool calls is the final
answer the user reads.
"""

REACT_PROMPT_TOOLS = """\
{intro}
{guide}
A reply without any <function_call> block is your final answer.

Tools you can call:
{tools}
"""


def dropping(runner: ToolRunner) -> ToolRunner:
    """``runner`` with the ReAct policy: values a model sends for injected parameters are dropped."""
    return runner if runner.on_injected == "drop" else dataclasses.replace(runner, on_injected="drop")


def _tool_text(result: FunctionCallResult) -> str:
    if result.status == FunctionCallStatus.SUCCEEDED:
        return result.output
    return f"Error: {result.output}"


def _native_turns(reply: ModelMessage, results: ModelMessage | None) -> list[ChatMessage]:
    """The assistant message of a reply and one ``tool`` message per call, in call order."""
    visible = strip_thinking(reply.content).strip()
    if not reply.tool_calls:
        return [{"role": "assistant", "content": visible}]
    chat: list[ChatMessage] = [
        {
            "role": "assistant",
            "content": visible or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ],
        }
    ]
    by_index = {r.index: r for r in (results.function_results if results else [])}
    for index, call in enumerate(reply.tool_calls, start=1):
        result = by_index.get(index)
        # Every call gets its answer, so the history is always one a provider accepts.
        text = _tool_text(result) if result is not None else "Error: no result was recorded for this call."
        chat.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return chat


def _unique_ids(calls: list[NativeToolCall], round_no: int) -> list[NativeToolCall]:
    """The calls with non-empty ids that differ (some hosts send none, or send duplicates)."""
    seen: set[str] = set()
    fixed = []
    for i, call in enumerate(calls, start=1):
        if not call.id or call.id in seen:
            call = call.model_copy(update={"id": f"call_r{round_no}_{i}"})
        seen.add(call.id)
        fixed.append(call)
    return fixed


class ReActPlan(LoopPlan):
    """ReAct: a model step, then the tool step of its calls; ``task.max_rounds`` is the step budget.

    ``budget``: the budget of the run this plan serves (``max_steps`` in process, the job's
    ``max_rounds`` when distributed); a truncated outcome's error names it, and ``inputs`` gives
    the task this budget. ``0``: the task's own ``max_rounds``.
    """

    kind = "react"

    def __init__(self, function_calling: FunctionCalling = "native", budget: int = 0) -> None:
        self.function_calling: FunctionCalling = function_calling
        self.budget = budget

    def opening(self, round_no: int) -> Step:
        """The model step."""
        return Step(round_no, "actor")

    def model(self, role: ModelRole) -> tuple[ModelRole, str]:
        """The Actor role's model."""
        return "actor", "react"

    def rounds(self, task: Task) -> int:
        """How many model steps the step budget allows (``rounds_for``)."""
        return rounds_for(task.max_rounds)

    def inputs(self, task: Task, memory: ReasonerMemory, hooks: ReasonerHooks = NO_HOOKS) -> StepInputs:
        """The task with this plan's ``budget`` as its ``max_rounds`` and its recommended tools (no
        actions: ReAct has no action graph in its prompt)."""
        if self.budget:
            task = dataclasses.replace(task, max_rounds=self.budget)
        tools, _ = task.recommend()
        return StepInputs(task, memory, tools, (), hooks)

    # -- the conversation --------------------------------------------------------------------

    def prompt(self, tools: Sequence[Tool]) -> str:
        """The system prompt: the ReAct instructions, plus the tools and the ``<function_call>``
        guide in prompt mode (in native mode the tools travel as schemas)."""
        if self.function_calling == "native":
            return REACT_PROMPT
        from tandem.toolkit.describe import describe_tools  # prompt mode only

        listed = describe_tools(list(tools)) if tools else "(none: answer from your own knowledge)"
        return REACT_PROMPT_TOOLS.format(intro=REACT_PROMPT, guide=FUNCTION_CALLING_GUIDE, tools=listed)

    def view(self, task: Task, history: Sequence[ModelMessage], round_no: int) -> list[ChatMessage]:
        """The conversation the model reads before its step in ``round_no``.

        The task, then for each earlier round the model's reply (its visible content; reasoning
        never goes back) and its tool results: ``tool`` messages with the calls' ``tool_call_id``
        in native mode, one ``<function_call_result>`` user message in prompt mode. The person's
        messages (``tandem.message``) come first in their round, as user messages.
        """
        chat: list[ChatMessage] = [{"role": "user", "content": task_text(task.goal, task.context)}]
        replies = {m.round: m for m in history if m.role == "actor" and m.round < round_no}
        results = {m.round: m for m in history if m.role == "tool" and m.round < round_no}
        said: dict[int, list[str]] = {}  # the person's messages open their round (theirs too)
        for m in history:
            if m.role == "person" and m.round <= round_no:
                said.setdefault(m.round, []).append(person_note(m.content))
        for r in sorted(set(replies) | set(said)):
            chat.extend({"role": "user", "content": text} for text in said.get(r, []))
            if r not in replies:
                continue
            reply = replies[r]
            if self.function_calling == "native":
                chat.extend(_native_turns(reply, results.get(r)))
                continue
            chat.append({"role": "assistant", "content": strip_thinking(reply.content).strip()})
            if r in results:
                chat.append({"role": "user", "content": results[r].content})
        return chat if self.function_calling == "native" else merge_turns(chat)

    def check_ready(self, step: Step, inputs: StepInputs) -> None:
        """``ReasonerError`` when the previous round asked for tools whose results are not stored
        (the model would see a call without its result)."""
        memory, round_no = inputs.memory, step.round
        if round_no > 0:
            previous = memory.get_message(round_no - 1, "actor")
            pending = previous is not None and self.calls_of(previous)
            if pending and memory.get_message(round_no - 1, "tool") is None:
                raise ReasonerError(
                    f"round {round_no} cannot start: the tool results of round {round_no - 1} are not stored"
                )

    def system_prompt(self, step: Step, inputs: StepInputs) -> str:
        """``prompt`` of the offered tools."""
        return self.prompt(inputs.tools)

    def native_tools(self, inputs: StepInputs) -> list[Tool] | None:
        """The offered tools in native mode (``None`` in prompt mode, or with none offered)."""
        return list(inputs.tools) if self.function_calling == "native" and inputs.tools else None

    def chat(self, step: Step, task: Task, history: Sequence[ModelMessage]) -> list[ChatMessage]:
        """``view`` before the step's round."""
        return self.view(task, history, step.round)

    def shape(self, step: Step, reply: ModelMessage, inputs: StepInputs) -> ModelMessage:
        """The reply with unique call ids; a reply whose calls do not fit the budget (``tools_fit``)
        becomes the ``NEEDS_MORE_STEPS`` answer, without calls."""
        if reply.tool_calls:
            reply = reply.model_copy(update={"tool_calls": _unique_ids(list(reply.tool_calls), step.round)})
        calls = self.calls_of(reply)
        budget = inputs.task.max_rounds
        if calls and not tools_fit(budget, step.round, calls, inputs.tools):
            reply = truncated_reply(reply, calls, budget)
        return reply

    # -- the decisions -----------------------------------------------------------------------

    def after_model(self, step: Step, reply: ModelMessage, task: Task) -> Step:
        """``truncated`` for the ``NEEDS_MORE_STEPS`` answer, the ``tools`` step of the reply's
        calls, or ``completed`` (a reply without calls is the answer)."""
        if needs_more_steps(reply):
            return finalize(step.round, "truncated")
        calls = self.calls_of(reply)
        if calls:
            return Step(step.round, "tools", calls=len(calls))
        return finalize(step.round, "completed")

    def after_tools(self, task: Task, results: Sequence[FunctionCallResult], round_no: int) -> Step:
        """``completed`` when a ``return_direct`` tool succeeded, the next model step, or
        ``truncated`` when the budget holds no further model step (only after calls to
        ``return_direct`` tools that all failed)."""
        if any(r.return_direct and r.status == FunctionCallStatus.SUCCEEDED for r in results):
            return finalize(round_no, "completed")
        if steps_left(task.max_rounds, round_no) < 2:
            return finalize(round_no, "truncated")
        return self.opening(round_no + 1)

    # -- the calls ---------------------------------------------------------------------------

    def calls_of(self, reply: ModelMessage) -> list[ParsedFunctionCall]:
        """Native mode: the reply's ``tool_calls`` (a ``<function_call>`` block is just text);
        prompt mode: its native calls if any, else its ``<function_call>`` blocks."""
        if self.function_calling == "native":
            return [native_to_call(c) for c in reply.tool_calls]
        return calls_of(reply)

    def call_ids(self, reply: ModelMessage, calls: Sequence[ParsedFunctionCall]) -> list[str | None]:
        """The native ids of a reply's calls (``None`` for each ``<function_call>`` block)."""
        if reply.tool_calls:
            return [c.id for c in reply.tool_calls]
        return [None] * len(calls)

    def run_call(
        self,
        runner: ToolRunner,
        tools: Mapping[str, Tool],
        call: ParsedFunctionCall,
        index: int,
        ctx: ToolCallContext,
        *,
        call_id: str | None = None,
        approved: bool = False,
    ) -> FunctionCallResult:
        """``ToolRunner.run_call`` with values sent for injected parameters dropped."""
        return dropping(runner).run_call(tools, call, index, ctx, call_id=call_id, approved=approved)

    # -- the end -----------------------------------------------------------------------------

    def answer(self, memory: ReasonerMemory) -> str:
        """The output of the first ``return_direct`` tool that succeeded in the last tool step,
        else the last reply's visible text (its ``<deliverable>`` if it wrote one); a "needs more
        steps" answer when the run ended on results no model step could read."""
        messages = [m for m in memory.get_messages() if m.role != "person"]
        if not messages:
            return ""
        last = messages[-1]
        if last.role == "tool":
            for result in last.function_results:
                if result.return_direct and result.status == FunctionCallStatus.SUCCEEDED:
                    return result.output
            return f"{NEEDS_MORE_STEPS} The step budget ran out before I could read my last tool results."
        if needs_more_steps(last):
            return last.content
        found = extract_tag(last.content, "deliverable")
        return found if found is not None else strip_thinking(last.content).strip()

    def delivers(self, status: OutcomeStatus) -> bool:
        """A truncated run has an answer too (the "needs more steps" one)."""
        return status != "failed"

    def truncated_error(self) -> str:
        """``budget_error`` of the plan's budget."""
        return budget_error(self.budget)
