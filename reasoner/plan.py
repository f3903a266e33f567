"""One loop logic: what follows each step of a run, per reasoner kind, as a typed plan.

A run is a sequence of ``Step`` values: model steps (``thinker``, ``actor``), a ``tools`` step
(the calls of the round's Actor reply), a ``collect`` step (their results stored, distributed runs
only) and ``finalize`` (with the run's status). A ``LoopPlan`` answers "what next?" after each
step; ``DualPlan``, ``MonoPlan`` and ``ReActPlan`` are the three kinds. Every driver asks the
same plan: ``walk`` is the in-process loop as a generator of the work each step needs (a model
reply, a round's tool results), ``drive`` and ``adrive`` do that work blocking or awaited (the
reasoners' ``run`` and ``arun``), and the Celery state machine (``tandem.tasks``) runs one step
per message and records the next step in Redis.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from tandem.reasoner import react, steps
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks, streaming_listener
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.reasoner.model_service import ModelRequest, ModelService, agenerate
from tandem.reasoner.task import OutcomeStatus, ReasonerOutcome, Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.reasoner.approval import Approver
    from tandem.toolkit.action import Action

StepKind = Literal["thinker", "actor", "tools", "collect", "finalize"]
"""The kinds of step: two model turns, the tool fan-out, storing its results, and the end."""

ModelRole = Literal["thinker", "actor"]
FinalStatus = Literal["completed", "truncated"]
MODEL_STEPS: frozenset[str] = frozenset({"thinker", "actor"})


@dataclass(frozen=True)
class Step:
    """One step of a run: its round, its kind, the number of calls (``tools``) or the status
    the run ends with (``finalize``)."""

    round: int
    kind: StepKind
    calls: int = 0
    status: str = ""


@dataclass
class StepInputs:
    """What a model step reads: the task, the memory, the recommended tools and actions."""

    task: Task
    memory: ReasonerMemory
    tools: Sequence[Tool] = ()
    actions: Sequence[Action] = ()
    hooks: ReasonerHooks = field(default_factory=lambda: NO_HOOKS)


def idempotency_key(job_id: str, round_no: int, index: int) -> str:
    """The key of one tool call, the same on every attempt: ``"<job>:<round>:<call index>"``."""
    return f"{job_id}:{round_no}:{index}"


def call_context(task: Task, round_no: int, index: int, attempt: int = 1) -> ToolCallContext:
    """The context injected into call ``index`` (from 1) of ``round_no``."""
    return steps.tool_context(task, round_no).model_copy(update={"call_index": index, "attempt": attempt})


class LoopPlan(ABC):
    """The decisions of one reasoner kind. Stateless: one instance serves every job."""

    kind: str
    """``dual``, ``mono`` or ``react``."""

    @abstractmethod
    def opening(self, round_no: int) -> Step:
        """The first step of ``round_no``."""

    @abstractmethod
    def model(self, role: ModelRole) -> tuple[ModelRole, str]:
        """The role whose model a step of kind ``role`` calls, and the demo script's mode."""

    @abstractmethod
    def run_model(self, step: Step, model: ModelService, inputs: StepInputs) -> ModelMessage:
        """Run model step ``step`` (returns the stored reply when there is one)."""

    @abstractmethod
    def request(self, step: Step, inputs: StepInputs) -> ModelRequest:
        """What model step ``step`` sends (the request ``run_model`` makes)."""

    @abstractmethod
    def record(self, step: Step, reply: ModelMessage, inputs: StepInputs) -> ModelMessage:
        """Store ``reply`` as the reply of model step ``step``; returns the stored message."""

    async def arun_model(self, step: Step, model: ModelService, inputs: StepInputs) -> ModelMessage:
        """``run_model`` for asyncio: the same request, streaming hooks and stored reply, the model
        call awaited (``model_service.agenerate``)."""
        role: ModelRole = "thinker" if step.kind == "thinker" else "actor"
        existing = inputs.memory.get_message(step.round, role)
        if existing is not None:
            return existing
        request = self.request(step, inputs)
        listener = streaming_listener(inputs.hooks, step.round, role, None)
        try:
            reply = await agenerate(model, request, on_delta=listener)
        finally:
            inputs.hooks.model_streamed(step.round, role)
        return self.record(step, reply, inputs)

    @abstractmethod
    def after_model(self, step: Step, reply: ModelMessage, task: Task) -> Step:
        """What follows the model step ``step`` whose reply is ``reply``."""

    @abstractmethod
    def after_tools(self, task: Task, results: Sequence[FunctionCallResult], round_no: int) -> Step:
        """What follows the tool step of ``round_no`` with its stored ``results``."""

    @abstractmethod
    def rounds(self, task: Task) -> int:
        """How many rounds the task's budget allows (for ``round_started``)."""

    @abstractmethod
    def calls_of(self, reply: ModelMessage) -> list[ParsedFunctionCall]:
        """The tool calls of an Actor reply; call ``i`` (from 1) is ``calls_of(reply)[i - 1]``."""

    @abstractmethod
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
        """Run one call; never raises for what the model or the tool did wrong. ``approved``: a
        person's decision approved it (a ``requires_approval`` tool runs only then)."""

    @abstractmethod
    def outcome(
        self, memory: ReasonerMemory, status: OutcomeStatus, error: str | None = None
    ) -> ReasonerOutcome:
        """The outcome of a run that ended with ``status`` (deliverable, rounds, usage, error)."""

    def starts_round(self, step: Step) -> bool:
        """True for the step that opens its round."""
        return step == self.opening(step.round)

    def call_ids(self, reply: ModelMessage, calls: Sequence[ParsedFunctionCall]) -> list[str | None] | None:
        """The ids of a reply's native calls, in call order (``None`` in prompt mode)."""
        return [c.id for c in reply.tool_calls] if reply.tool_calls else None

    def run_tools(
        self,
        runner: ToolRunner,
        tools: Sequence[Tool],
        reply: ModelMessage,
        task: Task,
        round_no: int,
        hooks: ReasonerHooks = NO_HOOKS,
        approver: Approver | None = None,
    ) -> list[FunctionCallResult]:
        """Run every call of ``reply`` in this process (``run_tool_round``: free calls at once,
        calls that need approval after ``approver`` decided), results in call order."""
        from tandem.reasoner.tool_round import run_tool_round

        calls = self.calls_of(reply)
        return run_tool_round(
            runner,
            tools,
            calls,
            task=task,
            round_no=round_no,
            hooks=hooks,
            approver=approver,
            call_ids=self.call_ids(reply, calls),
        )

    async def arun_tools(
        self,
        runner: ToolRunner,
        tools: Sequence[Tool],
        reply: ModelMessage,
        task: Task,
        round_no: int,
        hooks: ReasonerHooks = NO_HOOKS,
        approver: Approver | None = None,
    ) -> list[FunctionCallResult]:
        """``run_tools`` for asyncio (``arun_tool_round``): the calls awaited together, async tools
        on the loop and plain ones in threads, the approver awaited when it is async."""
        from tandem.reasoner.tool_round import arun_tool_round

        calls = self.calls_of(reply)
        return await arun_tool_round(
            runner,
            tools,
            calls,
            task=task,
            round_no=round_no,
            hooks=hooks,
            approver=approver,
            call_ids=self.call_ids(reply, calls),
        )


def _finalize(round_no: int, status: FinalStatus) -> Step:
    return Step(round_no, "finalize", status=status)


class _RoundPlan(LoopPlan):
    """Dual and mono: ``steps.plan_next`` after the Actor, the round budget after the tools."""

    mode: steps.Mode = "dual"

    def model(self, role: ModelRole) -> tuple[ModelRole, str]:
        """The Thinker's or the Actor's model (the demo script follows the kind)."""
        return role, self.mode

    def run_model(self, step: Step, model: ModelService, inputs: StepInputs) -> ModelMessage:
        """The Thinker's or the Actor's turn."""
        task, memory = inputs.task, inputs.memory
        if step.kind == "thinker":
            return steps.thinker_step(model, task, memory, step.round, inputs.tools, hooks=inputs.hooks)
        return steps.actor_step(
            model, task, memory, step.round, inputs.tools, inputs.actions, mode=self.mode, hooks=inputs.hooks
        )

    def request(self, step: Step, inputs: StepInputs) -> ModelRequest:
        """``steps.thinker_request`` or ``steps.actor_request``."""
        if step.kind == "thinker":
            return steps.thinker_request(inputs.task, inputs.memory, step.round, inputs.tools)
        return steps.actor_request(
            inputs.task, inputs.memory, step.round, inputs.tools, inputs.actions, self.mode
        )

    def record(self, step: Step, reply: ModelMessage, inputs: StepInputs) -> ModelMessage:
        """``steps.record_reply``."""
        role: ModelRole = "thinker" if step.kind == "thinker" else "actor"
        return steps.record_reply(inputs.memory, reply, step.round, role, inputs.hooks)

    def after_model(self, step: Step, reply: ModelMessage, task: Task) -> Step:
        """The Thinker hands over to the Actor; the Actor's reply decides the rest."""
        if step.kind == "thinker":
            return Step(step.round, "actor")
        nxt = steps.plan_next(task, reply, step.round)
        if nxt.kind == "deliver":
            return _finalize(step.round, "completed")
        if nxt.kind == "truncated":
            return _finalize(step.round, "truncated")
        if nxt.kind == "tools":
            return Step(step.round, "tools", calls=len(nxt.calls))
        return self.opening(step.round + 1)

    def after_tools(self, task: Task, results: Sequence[FunctionCallResult], round_no: int) -> Step:
        """The next round, or ``truncated`` when the rounds are spent."""
        if round_no + 1 >= task.max_rounds:
            return _finalize(round_no, "truncated")
        return self.opening(round_no + 1)

    def rounds(self, task: Task) -> int:
        """``task.max_rounds``."""
        return task.max_rounds

    def calls_of(self, reply: ModelMessage) -> list[ParsedFunctionCall]:
        """``steps.calls_of``."""
        return steps.calls_of(reply)

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
        """``ToolRunner.run_call``."""
        return runner.run_call(tools, call, index, ctx, call_id=call_id, approved=approved)

    def outcome(
        self, memory: ReasonerMemory, status: OutcomeStatus, error: str | None = None
    ) -> ReasonerOutcome:
        """``steps.make_outcome``."""
        return steps.make_outcome(memory, status, error)


class DualPlan(_RoundPlan):
    """Thinker then Actor every round."""

    kind = "dual"
    mode: steps.Mode = "dual"

    def opening(self, round_no: int) -> Step:
        """The Thinker's turn."""
        return Step(round_no, "thinker")


class MonoPlan(_RoundPlan):
    """One model (the Actor role) every round."""

    kind = "mono"
    mode: steps.Mode = "mono"

    def opening(self, round_no: int) -> Step:
        """The model's turn."""
        return Step(round_no, "actor")


class ReActPlan(LoopPlan):
    """ReAct: a model step, then the tool step of its calls; ``task.max_rounds`` is the step budget."""

    kind = "react"

    def __init__(self, function_calling: react.FunctionCalling = "native") -> None:
        self.function_calling: react.FunctionCalling = function_calling

    def opening(self, round_no: int) -> Step:
        """The model step."""
        return Step(round_no, "actor")

    def model(self, role: ModelRole) -> tuple[ModelRole, str]:
        """The Actor role's model."""
        return "actor", "react"

    def run_model(self, step: Step, model: ModelService, inputs: StepInputs) -> ModelMessage:
        """``react.react_step``."""
        return react.react_step(
            model,
            inputs.task,
            inputs.memory,
            step.round,
            inputs.tools,
            mode=self.function_calling,
            hooks=inputs.hooks,
        )

    def request(self, step: Step, inputs: StepInputs) -> ModelRequest:
        """``react.react_request``."""
        return react.react_request(
            inputs.task, inputs.memory, step.round, inputs.tools, mode=self.function_calling
        )

    def record(self, step: Step, reply: ModelMessage, inputs: StepInputs) -> ModelMessage:
        """``react.react_record``."""
        return react.react_record(
            inputs.task,
            inputs.memory,
            step.round,
            reply,
            inputs.tools,
            mode=self.function_calling,
            hooks=inputs.hooks,
        )

    def after_model(self, step: Step, reply: ModelMessage, task: Task) -> Step:
        """``react.react_plan_next``: the answer, the tools, or the budget ran out."""
        nxt = react.react_plan_next(task, reply, step.round, mode=self.function_calling)
        if nxt.kind == "deliver":
            return _finalize(step.round, "completed")
        if nxt.kind == "truncated":
            return _finalize(step.round, "truncated")
        return Step(step.round, "tools", calls=len(nxt.calls))

    def after_tools(self, task: Task, results: Sequence[FunctionCallResult], round_no: int) -> Step:
        """``react.react_after_tools``: a ``return_direct`` answer, the next step, or the budget."""
        nxt = react.react_after_tools(task, results, round_no)
        if nxt.kind == "deliver":
            return _finalize(round_no, "completed")
        if nxt.kind == "truncated":
            return _finalize(round_no, "truncated")
        return self.opening(round_no + 1)

    def call_ids(self, reply: ModelMessage, calls: Sequence[ParsedFunctionCall]) -> list[str | None] | None:
        """``react.react_call_ids``."""
        return react.react_call_ids(reply, calls)

    def rounds(self, task: Task) -> int:
        """``react.rounds_for(task.max_rounds)``."""
        return react.rounds_for(task.max_rounds)

    def calls_of(self, reply: ModelMessage) -> list[ParsedFunctionCall]:
        """``react.react_calls`` in this plan's function-calling mode."""
        return react.react_calls(reply, self.function_calling)

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
        """``react.run_call`` (values sent for injected parameters are dropped)."""
        return react.run_call(runner, tools, call, index, ctx, call_id=call_id, approved=approved)

    def outcome(
        self, memory: ReasonerMemory, status: OutcomeStatus, error: str | None = None
    ) -> ReasonerOutcome:
        """``react.react_outcome`` with the budget of the plan's task (read from the error)."""
        return react.react_outcome(memory, status, self._budget, error)

    _budget: int = 0

    def with_budget(self, budget: int) -> ReActPlan:
        """A copy that reports ``budget`` in a truncated outcome's error."""
        made = ReActPlan(self.function_calling)
        made._budget = budget
        return made


_PLANS: dict[str, type[LoopPlan]] = {"dual": DualPlan, "mono": MonoPlan, "react": ReActPlan}


def plan_for(kind: str, *, function_calling: react.FunctionCalling = "native", budget: int = 0) -> LoopPlan:
    """The plan of reasoner ``kind`` (``dual``, ``mono`` or ``react``)."""
    try:
        cls = _PLANS[kind]
    except KeyError:
        from tandem.reasoner.errors import ConfigurationError

        raise ConfigurationError(f"unknown reasoner kind {kind!r}: use one of {sorted(_PLANS)}") from None
    if cls is ReActPlan:
        return ReActPlan(function_calling).with_budget(budget)
    return cls()


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
    returns the run's status. Stored steps are not asked for again, so a memory holding an earlier
    part of the same run resumes it. ``drive`` and ``adrive`` are its two consumers.
    """
    task, memory, hooks = inputs.task, inputs.memory, inputs.hooks
    step = plan.opening(0)
    while step.kind != "finalize":
        if step.kind in MODEL_STEPS:
            role: ModelRole = "thinker" if step.kind == "thinker" else "actor"
            if plan.starts_round(step) and memory.get_message(step.round, role) is None:
                hooks.round_started(step.round, plan.rounds(task))
            reply = yield Work(step, plan.model(role)[0])
            assert isinstance(reply, ModelMessage)
            step = plan.after_model(step, reply, task)
            continue
        stored = memory.get_message(step.round, "tool")
        if stored is None:
            asked = memory.get_message(step.round, "actor")
            assert asked is not None  # a tools step follows a stored Actor reply
            results = yield Work(step, reply=asked)
            assert isinstance(results, list)
            stored = steps.apply_tool_results(memory, step.round, results)
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
    that need approval. Stored steps are not run again, so a memory holding an earlier part of the
    same run resumes it.
    """
    loop = walk(plan, inputs)
    work = next(loop)
    while True:
        done: Done
        if work.reply is None:
            done = plan.run_model(work.step, models[work.role], inputs)
        else:
            done = plan.run_tools(
                runner, inputs.tools, work.reply, inputs.task, work.step.round, inputs.hooks, approver
            )
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
            done = await plan.arun_model(work.step, models[work.role], inputs)
        else:
            done = await plan.arun_tools(
                runner, inputs.tools, work.reply, inputs.task, work.step.round, inputs.hooks, approver
            )
        try:
            work = loop.send(done)
        except StopIteration as end:
            return end.value
