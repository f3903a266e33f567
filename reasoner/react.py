"""The ReAct loop: one model calls tools until it answers, in-process or one step per Celery task.

A round ``r`` is a model step (the reply stored as ``(r, "actor")``) and, when the reply asks for
tools, a tool step (all of its calls run in parallel; their results are stored as one
``(r, "tool")`` message whose ``function_results`` carry the calls' ids). The loop stops when a
reply asks for no tool (its content is the answer), when a tool marked ``return_direct`` succeeds
(its output is the answer), or when the step budget is spent.

Function calling comes in two modes:

- ``"native"``: the tools go to the model as OpenAI tool schemas (``generate(..., tools=...)``),
  the reply's ``tool_calls`` are the calls, and each result goes back as a ``tool`` message with
  its ``tool_call_id``.
- ``"prompt"``: for models without native tool calling. The system prompt describes the tools and
  the ``<function_call>`` protocol, calls are parsed from the reply, and the results go back as
  ``<function_call_result>`` user text.

The step budget (``ReActReasoner(max_steps=...)``; ``JobSpec.max_rounds`` for a ``react`` job)
counts every model step and every tool step as one step, so with a budget ``B`` the model step of
round ``r`` is step ``2r + 1`` and leaves ``B - 2r - 1`` steps (``steps_left``). A reply's calls run
only if the steps left can hold the tool step *and* a model step to read the results (at least 2),
or just the tool step (at least 1) when every call goes to a ``return_direct`` tool. Otherwise the
reply is stored as the "needs more steps" answer (``NEEDS_MORE_STEPS``, naming the tools it wanted,
without its calls) and the run ends ``truncated``. So no run ever ends with a tool call that has no
result, and every model call sees a result for every call made before it, whatever the budget, even
or odd: budgets 1 and 2 allow one model call, 3 and 4 allow two, ``B`` allows ``(B + 1) // 2``.

The steps here are idempotent like ``tandem.reasoner.steps``: ``react_step`` returns the stored reply of
its round instead of calling the model again, and the tool step is skipped when its results are
stored. The in-process ``ReActReasoner`` and the Celery state machine use them through
``tandem.reasoner.plan.ReActPlan``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from tandem.reasoner import steps
from tandem.reasoner.approval import Approver
from tandem.reasoner.errors import ConfigurationError, ReasonerError
from tandem.reasoner.function_calling import (
    FUNCTION_CALLING_GUIDE,
    ParsedFunctionCall,
    extract_tag,
    strip_thinking,
)
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks, streaming_listener
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, NativeToolCall
from tandem.reasoner.model_service import ChatMessage, DeltaListener, ModelRequest, ModelService
from tandem.reasoner.prompts import task_text
from tandem.reasoner.task import OutcomeStatus, ReasonerOutcome, Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

__all__ = [
    "NEEDS_MORE_STEPS",
    "FunctionCalling",
    "ReActReasoner",
    "budget_error",
    "needs_more_steps",
    "react_after_tools",
    "react_answer",
    "react_call_ids",
    "react_calls",
    "react_outcome",
    "react_plan_next",
    "react_prompt",
    "react_record",
    "react_request",
    "react_step",
    "react_view",
    "rounds_for",
    "run_call",
    "run_tools",
    "steps_left",
    "tools_fit",
]

FunctionCalling = Literal["native", "prompt"]
"""How the model asks for tools: the provider's ``tool_calls`` or ``<function_call>`` blocks."""

NEEDS_MORE_STEPS = "Sorry, I need more steps to finish this request."
"""The first sentence of the answer of a run whose step budget ran out while tools were wanted."""

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


# -- the budget ---------------------------------------------------------------------------


def steps_left(budget: int, round_no: int) -> int:
    """Steps left in ``budget`` after the model step of ``round_no`` (``budget - 2*round_no - 1``)."""
    return budget - 2 * round_no - 1


def rounds_for(budget: int) -> int:
    """How many model steps (rounds) a step budget allows: ``(budget + 1) // 2``."""
    return (budget + 1) // 2


def tools_fit(budget: int, round_no: int, calls: Sequence[ParsedFunctionCall], tools: Sequence[Tool]) -> bool:
    """Whether the calls of round ``round_no``'s reply may run within ``budget``.

    They need a tool step and a model step to read the results (2 steps left), or only the tool
    step (1 step left) when every call is a readable call of a ``return_direct`` tool.
    """
    left = steps_left(budget, round_no)
    if left >= 2:
        return True
    direct = {t.name for t in tools if t.return_direct}
    return left >= 1 and bool(calls) and all(c.error is None and c.name in direct for c in calls)


def budget_error(budget: int) -> str:
    """``ReasonerOutcome.error`` / ``JobResult.error`` of a run truncated by its step budget."""
    return (
        f"the step budget ({budget} steps) ran out while the model still asked for tools; "
        "raise max_steps (max_rounds for a job) to let it go on"
    )


def needs_more_steps(message: ModelMessage) -> bool:
    """True for the reply ``react_step`` stores when the budget could not hold its tool calls."""
    return message.role == "actor" and not message.tool_calls and message.content.startswith(NEEDS_MORE_STEPS)


def _truncated_reply(reply: ModelMessage, calls: Sequence[ParsedFunctionCall], budget: int) -> ModelMessage:
    names = ", ".join(dict.fromkeys(c.name or "(unnamed)" for c in calls))
    content = (
        f"{NEEDS_MORE_STEPS} The step budget of {budget} steps ran out while I still wanted to call "
        f"tools ({names}), so they were not run."
    )
    # The calls are dropped, as LangGraph does: a stored call must always have a result.
    return reply.model_copy(update={"content": content, "tool_calls": []})


# -- the conversation ---------------------------------------------------------------------


def react_prompt(tools: Sequence[Tool], mode: FunctionCalling = "native") -> str:
    """The system prompt: the ReAct instructions, plus the tools and the ``<function_call>`` guide
    in prompt mode (in native mode the tools travel as schemas)."""
    if mode == "native":
        return REACT_PROMPT
    from tandem.toolkit.describe import describe_tools

    listed = describe_tools(list(tools)) if tools else "(none: answer from your own knowledge)"
    return REACT_PROMPT_TOOLS.format(intro=REACT_PROMPT, guide=FUNCTION_CALLING_GUIDE, tools=listed)


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


def react_view(
    task: Task, history: Sequence[ModelMessage], round_no: int, mode: FunctionCalling = "native"
) -> list[ChatMessage]:
    """The conversation the model reads before its step in ``round_no``.

    The task, then for each earlier round the model's reply (its visible content; reasoning never
    goes back) and its tool results: ``tool`` messages with the calls' ``tool_call_id`` in native
    mode, one ``<function_call_result>`` user message in prompt mode.
    """
    chat: list[ChatMessage] = [{"role": "user", "content": task_text(task.goal, task.context)}]
    replies = {m.round: m for m in history if m.role == "actor" and m.round < round_no}
    results = {m.round: m for m in history if m.role == "tool" and m.round < round_no}
    for r in sorted(replies):
        reply = replies[r]
        if mode == "native":
            chat.extend(_native_turns(reply, results.get(r)))
            continue
        chat.append({"role": "assistant", "content": strip_thinking(reply.content).strip()})
        if r in results:
            chat.append({"role": "user", "content": results[r].content})
    return chat


def react_calls(message: ModelMessage, mode: FunctionCalling = "native") -> list[ParsedFunctionCall]:
    """The tool calls a reply asks for: its native ``tool_calls`` in native mode (a
    ``<function_call>`` block in a native reply is just text), ``steps.calls_of`` in prompt mode.
    Call ``i`` (from 1) is the one ``steps.calls_of(message)[i - 1]`` gives to a ``run_tool`` task."""
    if mode == "native":
        return [steps.native_to_call(c) for c in message.tool_calls]
    return steps.calls_of(message)


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


# -- the steps ----------------------------------------------------------------------------


def react_step(
    model: ModelService,
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: Sequence[Tool] = (),
    *,
    mode: FunctionCalling = "native",
    hooks: ReasonerHooks = NO_HOOKS,
    on_delta: DeltaListener | None = None,
) -> ModelMessage:
    """The model step of ``round_no``: returns the stored reply, calling the model only once.

    ``task.max_rounds`` is the step budget. A reply whose calls do not fit it (``tools_fit``) is
    stored as the ``NEEDS_MORE_STEPS`` answer, without calls. Raises ``ReasonerError`` when the
    previous round asked for tools whose results are not stored (the model would see a call
    without its result), and whatever the model service raises.
    """
    existing = memory.get_message(round_no, "actor")
    if existing is not None:
        return existing
    request = react_request(task, memory, round_no, tools, mode=mode)
    listener = streaming_listener(hooks, round_no, "actor", on_delta)
    try:
        reply = model.generate(request.sys_prompt, request.messages, tools=request.tools, on_delta=listener)
    finally:
        hooks.model_streamed(round_no, "actor")
    return react_record(task, memory, round_no, reply, tools, mode=mode, hooks=hooks)


def react_request(
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: Sequence[Tool] = (),
    *,
    mode: FunctionCalling = "native",
) -> ModelRequest:
    """What the model is sent in ``round_no``; ``ReasonerError`` when the previous round asked for
    tools whose results are not stored (the model would see a call without its result)."""
    if round_no > 0:
        previous = memory.get_message(round_no - 1, "actor")
        pending = previous is not None and react_calls(previous, mode)
        if pending and memory.get_message(round_no - 1, "tool") is None:
            raise ReasonerError(
                f"round {round_no} cannot start: the tool results of round {round_no - 1} are not stored"
            )
    history = memory.get_messages()
    steps.check_memory_size(task, history)
    return ModelRequest(
        react_prompt(tools, mode),
        react_view(task, history, round_no, mode),
        list(tools) if mode == "native" and tools else None,
    )


def react_record(
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    reply: ModelMessage,
    tools: Sequence[Tool] = (),
    *,
    mode: FunctionCalling = "native",
    hooks: ReasonerHooks = NO_HOOKS,
) -> ModelMessage:
    """Store the model's reply of ``round_no`` (ids made unique; calls that do not fit the budget
    replaced by the ``NEEDS_MORE_STEPS`` answer); returns the stored message."""
    if reply.tool_calls:
        reply = reply.model_copy(update={"tool_calls": _unique_ids(list(reply.tool_calls), round_no)})
    calls = react_calls(reply, mode)
    if calls and not tools_fit(task.max_rounds, round_no, calls, tools):
        reply = _truncated_reply(reply, calls, task.max_rounds)
    message = reply.model_copy(update={"role": "actor", "round": round_no})
    stored = memory.add_message(message)
    if stored:
        hooks.model_replied(message)
    # A concurrent duplicate may have stored first: the stored message is the truth.
    return memory.get_message(round_no, "actor") or message


def react_call_ids(message: ModelMessage, calls: Sequence[ParsedFunctionCall]) -> list[str | None]:
    """The native ids of a reply's calls (``None`` for each ``<function_call>`` block)."""
    if message.tool_calls:
        return [c.id for c in message.tool_calls]
    return [None] * len(calls)


def react_plan_next(
    task: Task, message: ModelMessage, round_no: int, *, mode: FunctionCalling = "native"
) -> steps.NextStep:
    """What follows the stored reply of ``round_no``: ``truncated`` for the ``NEEDS_MORE_STEPS``
    answer, ``tools`` with the calls to run, or ``deliver`` (the reply is the answer)."""
    if needs_more_steps(message):
        return steps.NextStep("truncated")
    calls = react_calls(message, mode)
    if calls:
        return steps.NextStep("tools", calls)
    return steps.NextStep("deliver")


def react_after_tools(task: Task, results: Sequence[FunctionCallResult], round_no: int) -> steps.NextStep:
    """What follows the tool step of ``round_no``: ``deliver`` when a ``return_direct`` tool
    succeeded, ``continue`` to round ``round_no + 1``, or ``truncated`` when the budget holds no
    further model step (only after calls to ``return_direct`` tools that all failed)."""
    if any(r.return_direct and r.status == FunctionCallStatus.SUCCEEDED for r in results):
        return steps.NextStep("deliver")
    if steps_left(task.max_rounds, round_no) < 2:
        return steps.NextStep("truncated")
    return steps.NextStep("continue")


def _dropping(runner: ToolRunner) -> ToolRunner:
    """``runner`` with the ReAct policy: values a model sends for injected parameters are dropped."""
    return runner if runner.on_injected == "drop" else dataclasses.replace(runner, on_injected="drop")


def run_call(
    runner: ToolRunner,
    tools: Mapping[str, Tool],
    call: ParsedFunctionCall,
    index: int,
    ctx: ToolCallContext | None = None,
    *,
    call_id: str | None = None,
    approved: bool = False,
) -> FunctionCallResult:
    """Run call ``index`` of a ReAct reply: ``ToolRunner.run_call`` with values for injected
    parameters dropped; never raises for what the model or the tool did wrong (``approved``: see
    ``ToolRunner.run_call``)."""
    return _dropping(runner).run_call(tools, call, index, ctx, call_id=call_id, approved=approved)


def run_tools(
    runner: ToolRunner,
    tools: Sequence[Tool],
    calls: Sequence[ParsedFunctionCall],
    ctx: ToolCallContext,
    call_ids: Sequence[str | None],
) -> list[FunctionCallResult]:
    """Run all ``calls`` at once (up to ``runner.max_parallel``); results in call order, each with
    its call's id and a context whose ``call_index`` is the call's number (from 1)."""
    by_name = {t.name: t for t in tools}

    def one(index: int) -> FunctionCallResult:
        call_ctx = ctx.model_copy(update={"call_index": index})
        return run_call(runner, by_name, calls[index - 1], index, call_ctx, call_id=call_ids[index - 1])

    if len(calls) == 1:
        return [one(1)]
    with ThreadPoolExecutor(max_workers=max(1, min(runner.max_parallel, len(calls)))) as pool:
        return list(pool.map(one, range(1, len(calls) + 1)))


def react_answer(memory: ReasonerMemory) -> str:
    """The answer of a finished run: the output of the first ``return_direct`` tool that succeeded
    in the last tool step, else the last reply's visible text (its ``<deliverable>`` if it wrote
    one); a "needs more steps" answer when the run ended on results no model step could read."""
    messages = memory.get_messages()
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


def react_outcome(
    memory: ReasonerMemory, status: OutcomeStatus, budget: int, error: str | None = None
) -> ReasonerOutcome:
    """The outcome of a ReAct run: the deliverable is ``react_answer`` when completed or truncated."""
    messages = memory.get_messages()
    if status == "truncated" and error is None:
        error = budget_error(budget)
    return ReasonerOutcome(
        status=status,
        deliverable=react_answer(memory) if status != "failed" else "",
        rounds=max((m.round for m in messages), default=-1) + 1,
        messages=messages,
        usage=steps.total_usage(messages),
        error=error,
    )


# -- the in-process driver ----------------------------------------------------------------


class ReActReasoner:
    """A ReAct agent in this process: the model calls tools until it answers.

    ``max_steps`` is the step budget (model steps and tool steps count one each; see the module
    docstring); it replaces ``Task.max_rounds``, which ``run`` does not read. ``function_calling``
    picks native tool calls or the ``<function_call>`` prompt protocol. ``approve`` decides on
    calls that need approval, as for ``LoopReasoner``. ``runner`` executes the
    calls (a copy with ``on_injected="drop"`` is used: values the model sends for injected
    parameters are dropped). ``hooks.round_started`` gets ``rounds_for(max_steps)`` as the round
    count. ``run`` never raises for a model or tool failure: the outcome says ``failed`` and keeps
    the messages so far.
    """

    def __init__(
        self,
        model: ModelService,
        max_steps: int = 25,
        *,
        function_calling: FunctionCalling = "native",
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
    ) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigurationError(f"max_steps must be a whole number of at least 1, got {max_steps!r}")
        if function_calling not in ("native", "prompt"):
            raise ConfigurationError(
                f"function_calling must be 'native' or 'prompt', got {function_calling!r}"
            )
        self.model = model
        self.max_steps = max_steps
        self.function_calling: FunctionCalling = function_calling
        self.runner = _dropping(runner or ToolRunner())
        self.hooks = hooks or NO_HOOKS
        self.approve = approve

    def run(self, task: Task, memory: ReasonerMemory | None = None) -> ReasonerOutcome:
        """Run ``task`` until an answer, a ``return_direct`` result, the budget, or a failure.

        A ``memory`` holding an earlier part of the same run resumes it: stored steps are not
        run again.
        """
        memory = memory if memory is not None else InMemoryReasonerMemory()
        task = dataclasses.replace(task, max_rounds=self.max_steps)
        tools, _ = task.recommend()
        try:
            status = self._loop(task, memory, tools)
            outcome = react_outcome(memory, status, self.max_steps)
        except ReasonerError as exc:
            outcome = react_outcome(memory, "failed", self.max_steps, error=f"{type(exc).__name__}: {exc}")
        self.hooks.finished(outcome)
        return outcome

    def _loop(
        self, task: Task, memory: ReasonerMemory, tools: list[Tool]
    ) -> Literal["completed", "truncated"]:
        from tandem.reasoner import plan

        loop = plan.plan_for("react", function_calling=self.function_calling, budget=self.max_steps)
        inputs = plan.StepInputs(task, memory, tools, (), self.hooks)
        return plan.drive(loop, {"actor": self.model}, inputs, self.runner, approver=self.approve)

    async def arun(self, task: Task, memory: ReasonerMemory | None = None) -> ReasonerOutcome:
        """``run`` for asyncio: model calls are awaited (``agenerate``), a reply's tool calls run
        concurrently; the same steps, decisions, hooks and outcome."""
        from tandem.reasoner.async_runner import arun_react

        return await arun_react(self, task, memory)

    async def ainfer(self, task: Task) -> str:
        """``infer`` for asyncio."""
        outcome = await self.arun(task)
        if outcome.status == "failed":
            raise ReasonerError(outcome.error or "the run failed")
        return outcome.deliverable

    def infer(self, task: Task) -> str:
        """Run ``task`` and return its answer; ``ReasonerError`` if the run failed."""
        outcome = self.run(task)
        if outcome.status == "failed":
            raise ReasonerError(outcome.error or "the run failed")
        return outcome.deliverable
