"""``LoopPlan``: the decisions and the model steps of one reasoner kind, written once for all kinds.

A plan answers "what next?" after each step (``after_model``, ``after_tools``) and runs the
steps it owns: what a model step sends (``request``, from the plan's view of the memory), how its
reply is stored (``record``), which calls a reply makes (``calls_of``), how a round's results are
stored (``record_tools``) and what a finished run's outcome is (``outcome``). ``DualPlan`` and
``MonoPlan`` (``tandem.reasoner.loop.rounds``) and ``ReActPlan`` (``tandem.reasoner.loop.react``)
fill in what differs.

Every step is idempotent: a model step whose reply is stored returns it without calling the model,
and storing a reply or a round's results keeps the first stored (a redelivered Celery message, or
two workers racing, give one stored message). The in-process drivers (``tandem.reasoner.loop.drive``)
and the Celery state machine (``tandem.tasks``) both run a job through the same plan.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tandem.reasoner import tracing
from tandem.reasoner.artifacts import kept_bytes, offer_reader
from tandem.reasoner.context.budget import ContextBudget, budget_of
from tandem.reasoner.context.compaction import Compaction
from tandem.reasoner.context.counting import MESSAGE_SLACK, REQUEST_SLACK
from tandem.reasoner.context.fitting import fit_history
from tandem.reasoner.context.summary import Due, compaction_due, latest_summary
from tandem.reasoner.errors import MemoryLimitError
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks, streaming_listener
from tandem.reasoner.loop.calls import tool_results_text
from tandem.reasoner.loop.step import ModelRole, Step, StepInputs
from tandem.reasoner.loop.tool_round import arun_tool_round, run_tool_round
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, calls_usage, total_usage
from tandem.reasoner.models.model_service import (
    ChatMessage,
    DeltaListener,
    ModelRequest,
    ModelService,
    agenerate,
)
from tandem.reasoner.task import OutcomeStatus, ReasonerOutcome, Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.reasoner.approval import Approver

__all__ = ["LoopPlan", "check_memory_size", "compacted"]


def compacted(hooks: ReasonerHooks, compaction: Compaction) -> None:
    """Report ``compaction``: ``hooks.memory_compacted`` and an event on the current trace span."""
    hooks.memory_compacted(compaction)
    tracing.event(
        "tandem.memory_compacted",
        {
            "tandem.round": compaction.round,
            "tandem.role": compaction.role,
            "tandem.tokens_before": compaction.tokens_before,
            "tandem.tokens_after": compaction.tokens_after,
            "tandem.summary_of_rounds": "{}-{}".format(*compaction.summary_of_rounds),
            "tandem.rounds_summarized": compaction.rounds_summarized,
            "tandem.how": compaction.how,
        },
    )


def check_memory_size(task: Task, history: Sequence[ModelMessage], kept: int = 0) -> None:
    """``MemoryLimitError`` when ``history`` (as JSON) and ``kept`` bytes of artifacts
    (``tandem.reasoner.artifacts``) are over ``task.max_memory_bytes``."""
    limit = task.max_memory_bytes
    if not limit:
        return
    size = kept
    for message in history:
        size += len(message.model_dump_json().encode("utf-8", "surrogatepass"))
        if size > limit:
            raise MemoryLimitError(
                f"the job's memory (its conversation and its artifacts) is over {limit} bytes (limit "
                "Task.max_memory_bytes, "
                "TANDEM_MAX_MEMORY_BYTES on workers): the job stops here and its memory is kept; "
                "split the work into smaller jobs or raise the limit"
            )


class LoopPlan(ABC):
    """The steps and decisions of one reasoner kind. Holds no job's state: one instance serves
    every job of its kind and settings."""

    kind: str
    """``dual``, ``mono`` or ``react``."""

    # -- the shape of a run ------------------------------------------------------------------

    @abstractmethod
    def opening(self, round_no: int) -> Step:
        """The first step of ``round_no``."""

    @abstractmethod
    def model(self, role: ModelRole) -> tuple[ModelRole, str]:
        """The role whose model a step of kind ``role`` calls, and the demo script's mode."""

    @abstractmethod
    def rounds(self, task: Task) -> int:
        """How many rounds the task's budget allows (for ``round_started``)."""

    def starts_round(self, step: Step) -> bool:
        """True for the step that opens its round."""
        return step == self.opening(step.round)

    def inputs(self, task: Task, memory: ReasonerMemory, hooks: ReasonerHooks = NO_HOOKS) -> StepInputs:
        """What the model steps of an in-process run of ``task`` read: the task's recommended
        tools and actions (``Task.recommend``)."""
        tools, actions = task.recommend()
        return StepInputs(task, memory, tools, actions, hooks)

    # -- model steps -------------------------------------------------------------------------

    @abstractmethod
    def system_prompt(self, step: Step, inputs: StepInputs) -> str:
        """The system prompt of model step ``step``."""

    @abstractmethod
    def chat(self, step: Step, task: Task, history: Sequence[ModelMessage]) -> list[ChatMessage]:
        """The conversation model step ``step`` reads, built from ``history``; its first message
        is the task."""

    def native_tools(self, inputs: StepInputs) -> list[Tool] | None:
        """The tools a request offers as schemas (native tool calling); ``None``: the prompt
        describes them."""
        return None

    def check_ready(self, step: Step, inputs: StepInputs) -> None:
        """Raise when model step ``step`` cannot be asked yet (nothing to check here)."""
        return None

    def request(self, step: Step, inputs: StepInputs, budget: ContextBudget | None = None) -> ModelRequest:
        """What model step ``step`` sends: the plan's system prompt and its view of the memory,
        fitted to ``budget`` (``tandem.reasoner.context.fitting``: the role's latest summary in
        place of the rounds it stands for, then the oldest rounds left out of the view, a marker in
        their place, ``hooks.memory_compacted`` when the cut moves; ``ContextLimitError`` when what
        is always kept does not fit). ``MemoryLimitError`` when the memory is over
        ``task.max_memory_bytes``."""
        self.check_ready(step, inputs)
        history = self.history(inputs)
        sys_prompt = self.system_prompt(step, inputs)
        tools = self.native_tools(inputs)
        if budget is None:  # no budget, no compaction: the originals, every one
            plain = [m for m in history if m.role != "summary"]
            return ModelRequest(sys_prompt, self.chat(step, inputs.task, plain), tools)
        fitted = fit_history(
            history,
            round_no=step.round,
            kind=step.role,
            fixed=self._fixed(inputs, budget, sys_prompt, tools),
            budget=budget,
            cache=inputs.tokens,
            compactor=inputs.compactor,
            summary=latest_summary(history, step.role),
        )
        chat = self.chat(step, inputs.task, fitted.history)
        if fitted.stand_in is not None and fitted.stand_in.text:
            chat[0] = {**chat[0], "content": f"{chat[0]['content']}\n\n{fitted.stand_in.text}"}
        if fitted.compaction is not None:
            compacted(inputs.hooks, fitted.compaction)
        return ModelRequest(sys_prompt, chat, tools)

    def _fixed(
        self, inputs: StepInputs, budget: ContextBudget, sys_prompt: str, tools: Sequence[Tool] | None
    ) -> int:
        """The tokens of a request's parts that are not stored messages: the system prompt, the
        task, the tools' schemas, the request's and the task message's slack."""
        tokenizer, cache, task = budget.tokenizer, inputs.tokens, inputs.task
        return (
            cache.text(tokenizer, sys_prompt)
            + cache.task(tokenizer, task.goal, task.context)
            + cache.tools(tokenizer, tools or ())
            + REQUEST_SLACK
            + 2 * MESSAGE_SLACK
        )

    def compaction_due(self, step: Step, inputs: StepInputs, budget: ContextBudget | None) -> Due | None:
        """The compaction model step ``step`` needs before it asks its model
        (``tandem.reasoner.context.summary.compaction_due``: its request past ``inputs.compact_at``
        of ``budget``, and rounds left to summarize); ``None`` without a budget, with summaries
        off, or once its reply is stored. Both drivers ask it before a model step."""
        if budget is None or inputs.compact_at <= 0:
            return None
        if inputs.memory.get_message(step.round, step.role) is not None:
            return None
        self.check_ready(step, inputs)
        history = self.history(inputs)
        return compaction_due(
            history,
            round_no=step.round,
            kind=step.role,
            fixed=self._fixed(inputs, budget, self.system_prompt(step, inputs), self.native_tools(inputs)),
            budget=budget,
            cache=inputs.tokens,
            at=inputs.compact_at,
        )

    @abstractmethod
    def after_model(self, step: Step, reply: ModelMessage, task: Task) -> Step:
        """What follows the model step ``step`` whose stored reply is ``reply``."""

    def history(self, inputs: StepInputs) -> list[ModelMessage]:
        """The stored messages a request is built from, checked against ``task.max_memory_bytes``."""
        history = inputs.memory.get_messages()
        check_memory_size(inputs.task, history, kept_bytes(inputs.memory, history))
        return history

    def shape(self, step: Step, reply: ModelMessage, inputs: StepInputs) -> ModelMessage:
        """The reply as it is stored (unchanged here; ReAct fixes call ids and its budget)."""
        return reply

    def record(self, step: Step, reply: ModelMessage, inputs: StepInputs) -> ModelMessage:
        """Store ``reply`` as the reply of model step ``step`` (``shape``d, with the step's round and
        role) and return the stored message: the first stored wins, and ``hooks.model_replied`` is
        called only by the caller that stored it."""
        role = step.role
        message = self.shape(step, reply, inputs).model_copy(update={"role": role, "round": step.round})
        if inputs.memory.add_message(message):
            inputs.hooks.model_replied(message)
        # A concurrent duplicate may have stored first: the stored message is the truth.
        return inputs.memory.get_message(step.round, role) or message

    def run_model(
        self,
        step: Step,
        model: ModelService,
        inputs: StepInputs,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """Run model step ``step``: the stored reply when there is one, else ``model``'s reply to
        ``request``, recorded. The reply streams to ``on_delta`` and to the hooks' listener."""
        existing = inputs.memory.get_message(step.round, step.role)
        if existing is not None:
            return existing
        inputs = offer_reader(inputs)  # ``read_artifact`` once the memory holds an artifact
        request = self.request(step, inputs, budget_of(model))
        listener = streaming_listener(inputs.hooks, step.round, step.role, on_delta)
        try:
            reply = model.generate(
                request.sys_prompt, request.messages, tools=request.tools, on_delta=listener
            )
        finally:
            inputs.hooks.model_streamed(step.round, step.role)
        return self.record(step, reply, inputs)

    async def arun_model(
        self,
        step: Step,
        model: ModelService,
        inputs: StepInputs,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """``run_model`` for asyncio: the same request, stored reply and streaming, the model call
        awaited (``model_service.agenerate``)."""
        existing = inputs.memory.get_message(step.round, step.role)
        if existing is not None:
            return existing
        inputs = offer_reader(inputs)  # ``read_artifact`` once the memory holds an artifact
        request = self.request(step, inputs, budget_of(model))
        listener = streaming_listener(inputs.hooks, step.round, step.role, on_delta)
        try:
            reply = await agenerate(model, request, on_delta=listener)
        finally:
            inputs.hooks.model_streamed(step.round, step.role)
        return self.record(step, reply, inputs)

    # -- tool steps --------------------------------------------------------------------------

    @abstractmethod
    def calls_of(self, reply: ModelMessage) -> list[ParsedFunctionCall]:
        """The tool calls of an Actor reply; call ``i`` (from 1) is ``calls_of(reply)[i - 1]``."""

    @abstractmethod
    def after_tools(self, task: Task, results: Sequence[FunctionCallResult], round_no: int) -> Step:
        """What follows the tool step of ``round_no`` with its stored ``results``."""

    def call_ids(self, reply: ModelMessage, calls: Sequence[ParsedFunctionCall]) -> list[str | None] | None:
        """The ids of a reply's native calls, in call order (``None`` in prompt mode)."""
        return [c.id for c in reply.tool_calls] if reply.tool_calls else None

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
        """Run one call (``ToolRunner.run_call``); never raises for what the model or the tool did
        wrong. ``approved``: a person's decision approved it (a ``requires_approval`` tool runs
        only then)."""
        return runner.run_call(tools, call, index, ctx, call_id=call_id, approved=approved)

    def run_tools(
        self,
        runner: ToolRunner,
        inputs: StepInputs,
        reply: ModelMessage,
        round_no: int,
        approver: Approver | None = None,
    ) -> list[FunctionCallResult]:
        """Run every call of ``reply`` in this process (``run_tool_round``: free calls at once,
        calls that need approval after ``approver`` decided), results in call order."""
        calls = self.calls_of(reply)
        inputs = offer_reader(inputs)
        return run_tool_round(
            runner,
            inputs.tools,
            calls,
            task=inputs.task,
            round_no=round_no,
            hooks=inputs.hooks,
            approver=approver,
            call_ids=self.call_ids(reply, calls),
        )

    async def arun_tools(
        self,
        runner: ToolRunner,
        inputs: StepInputs,
        reply: ModelMessage,
        round_no: int,
        approver: Approver | None = None,
    ) -> list[FunctionCallResult]:
        """``run_tools`` for asyncio (``arun_tool_round``): the calls awaited together, async tools
        on the loop and plain ones in threads, the approver awaited when it is async."""
        calls = self.calls_of(reply)
        inputs = offer_reader(inputs)
        return await arun_tool_round(
            runner,
            inputs.tools,
            calls,
            task=inputs.task,
            round_no=round_no,
            hooks=inputs.hooks,
            approver=approver,
            call_ids=self.call_ids(reply, calls),
        )

    def record_tools(
        self, memory: ReasonerMemory, round_no: int, results: Sequence[FunctionCallResult]
    ) -> ModelMessage:
        """Store the round's tool results (in call order) as one ``tool`` message and return the
        stored one; idempotent (the first stored wins). Its usage is what the child jobs its calls
        started spent (``FunctionCallResult.usage``)."""
        ordered = sorted(results, key=lambda r: r.index)
        message = ModelMessage(
            role="tool",
            round=round_no,
            content=tool_results_text(ordered),
            function_results=ordered,
            usage=calls_usage(ordered),  # what the child jobs of its calls spent
        )
        memory.add_message(message)
        return memory.get_message(round_no, "tool") or message

    # -- the end -----------------------------------------------------------------------------

    @abstractmethod
    def answer(self, memory: ReasonerMemory) -> str:
        """The answer a finished run's memory holds (what ``infer`` returns)."""

    @abstractmethod
    def truncated_error(self) -> str:
        """The error of a run that ended ``truncated`` (its budget ran out)."""

    def delivers(self, status: OutcomeStatus) -> bool:
        """Whether an outcome with ``status`` carries the ``answer`` as its deliverable."""
        return status == "completed"

    def outcome(
        self, memory: ReasonerMemory, status: OutcomeStatus, error: str | None = None
    ) -> ReasonerOutcome:
        """The outcome of a run that ended with ``status``, from what its memory holds: the
        deliverable, the rounds used, the messages, the usage summed, the error."""
        messages = memory.get_messages()
        if status == "truncated" and error is None:
            error = self.truncated_error()
        return ReasonerOutcome(
            status=status,
            deliverable=self.answer(memory) if self.delivers(status) else "",
            rounds=max((m.round for m in messages if m.role != "person"), default=-1) + 1,
            messages=messages,
            usage=total_usage(messages),
            error=error,
        )
