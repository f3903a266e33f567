"""``Reasoner``: one in-process reasoner (a plan, its models, a tool runner, hooks, an approver).

``run`` drives the plan's loop blocking (``drive``), ``arun`` awaited (``adrive``); both end the
same way: the plan's outcome, ``hooks.finished``, and never an exception for a model or tool
failure (the outcome says ``failed`` and keeps the messages so far). ``DualModelReasoner``,
``MonoModelReasoner`` and ``ReActReasoner`` are its constructors for the three kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager

from tandem.reasoner.approval import Approver
from tandem.reasoner.artifacts import artifacts_of, keeping
from tandem.reasoner.context.summary import COMPACT_AT
from tandem.reasoner.errors import ConfigurationError, ReasonerError
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks
from tandem.reasoner.loop.drive import adrive, drive
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.react import FunctionCalling, ReActPlan, dropping
from tandem.reasoner.loop.rounds import DualPlan, MonoPlan, delivered
from tandem.reasoner.loop.step import StepInputs
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.model_service import ModelService
from tandem.reasoner.questions import AskCallback, asking
from tandem.reasoner.task import OutcomeStatus, ReasonerOutcome, Task
from tandem.reasoner.tool_runner import ToolRunner

__all__ = ["DualModelReasoner", "MonoModelReasoner", "ReActReasoner", "Reasoner"]


class Reasoner:
    """Runs ``plan``'s loop in this process with ``models`` (role -> model: ``thinker`` for a
    dual plan, ``actor`` for every plan).

    ``runner`` executes the tool calls; ``hooks`` see every step; ``approve`` decides on calls that
    need approval (``Tool.requires_approval``, ``Task.approve_tools``): it gets the pending calls
    and returns decisions (see ``tandem.reasoner.approval``), sync or ``async``. Without it such
    calls are rejected. ``ask`` answers the questions tools ask (``ToolCallContext.ask``, the
    built-in ``ask_person``): given a ``Question``, it returns the person's answer (sync or
    ``async``; see ``tandem.reasoner.questions``); without it a question fails, saying so.
    A ``memory`` passed to ``run`` that holds an earlier part of the same run resumes it: stored
    steps are not run again. ``compact_at``: the share of a role's context budget past which its
    older rounds are summarized (0: never; ``tandem.reasoner.context.summary``), by
    ``summarizers[role]`` when given, else by the role's own model.
    """

    def __init__(
        self,
        plan: LoopPlan,
        models: Mapping[str, ModelService],
        *,
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
        ask: AskCallback | None = None,
        compact_at: float = COMPACT_AT,
        summarizers: Mapping[str, ModelService] | None = None,
    ) -> None:
        needed = {plan.model(plan.opening(0).role)[0], plan.model("actor")[0]}
        missing = sorted(needed - set(models))
        if missing:
            raise ConfigurationError(
                f"the {plan.kind} plan needs a model for {', '.join(map(repr, missing))}; "
                f"got models for {sorted(models)}"
            )
        self.plan = plan
        self.models = dict(models)
        self.runner = runner or ToolRunner()
        self.hooks = hooks or NO_HOOKS
        self.approve = approve
        self.ask = ask
        if (
            isinstance(compact_at, bool)
            or not isinstance(compact_at, int | float)
            or not 0 <= compact_at <= 1
        ):
            raise ConfigurationError(
                f"compact_at must be a share of the budget from 0 (no summaries) to 1, got {compact_at!r}"
            )
        self.compact_at = float(compact_at)
        self.summarizers = dict(summarizers or {})

    def run(self, task: Task, memory: ReasonerMemory | None = None) -> ReasonerOutcome:
        """Reason about ``task`` until the plan's end (an answer, the budget) or a failure."""
        inputs = self._inputs(task, memory)
        try:
            with asking(self.ask, task.answer_timeout_s), self._keeping(inputs):
                status = drive(self.plan, self.models, inputs, self.runner, self.approve)
        except ReasonerError as exc:
            return self._finish(inputs, "failed", f"{type(exc).__name__}: {exc}")
        return self._finish(inputs, status)

    async def arun(self, task: Task, memory: ReasonerMemory | None = None) -> ReasonerOutcome:
        """``run`` for asyncio: model calls are awaited (``agenerate``), a reply's tool calls run
        concurrently; the same steps, decisions, hooks and outcome."""
        inputs = self._inputs(task, memory)
        try:
            with asking(self.ask, task.answer_timeout_s), self._keeping(inputs):
                status = await adrive(self.plan, self.models, inputs, self.runner, self.approve)
        except ReasonerError as exc:
            return self._finish(inputs, "failed", f"{type(exc).__name__}: {exc}")
        return self._finish(inputs, status)

    def infer(self, task: Task) -> str:
        """Run ``task`` and return its answer (``conclude``); ``ReasonerError`` if the run failed
        (use ``run`` to see the status)."""
        memory = InMemoryReasonerMemory()
        return self._answer(self.run(task, memory), memory)

    async def ainfer(self, task: Task) -> str:
        """``infer`` for asyncio."""
        memory = InMemoryReasonerMemory()
        return self._answer(await self.arun(task, memory), memory)

    def conclude(self, memory: ReasonerMemory) -> str:
        """The answer ``memory`` holds: for dual and mono the last Actor reply's ``<deliverable>``
        (or its visible text when it wrote none); for ReAct see ``ReActPlan.answer``."""
        return self.plan.answer(memory)

    @staticmethod
    def stopped(message: ModelMessage) -> bool:
        """True when ``message`` holds a ``<deliverable>`` outside thinking sections (what ends a
        dual or mono run)."""
        return delivered(message)

    def _inputs(self, task: Task, memory: ReasonerMemory | None) -> StepInputs:
        inputs = self.plan.inputs(
            task, memory if memory is not None else InMemoryReasonerMemory(), self.hooks
        )
        inputs.compact_at, inputs.summarizers = self.compact_at, self.summarizers
        return inputs

    def _keeping(self, inputs: StepInputs) -> AbstractContextManager[None]:
        """Large tool outputs kept in the memory's artifacts (``tandem.reasoner.artifacts``),
        within the task's memory limit, read a page of ``runner.max_output_chars`` at a time."""
        page = self.runner.max_output_chars if self.runner.max_output_chars > 0 else 8000
        return keeping(artifacts_of(inputs.memory), inputs.task.max_memory_bytes, page)

    def _finish(self, inputs: StepInputs, status: OutcomeStatus, error: str | None = None) -> ReasonerOutcome:
        outcome = self.plan.outcome(inputs.memory, status, error)
        store = artifacts_of(inputs.memory)
        if store is not None:
            refs = [r.artifact for m in outcome.messages if m.role == "tool" for r in m.function_results]
            kept = {ref.handle: store.get(ref.handle) for ref in refs if ref is not None}
            outcome.artifacts = {handle: text for handle, text in kept.items() if text is not None}
        self.hooks.finished(outcome)
        return outcome

    def _answer(self, outcome: ReasonerOutcome, memory: ReasonerMemory) -> str:
        if outcome.status == "failed":
            raise ReasonerError(outcome.error or "the run failed")
        return self.conclude(memory)


class DualModelReasoner(Reasoner):
    """Two models per round: the Thinker (deep thinking, ``<instruction>``/``<input>``, never
    tools) and then the Actor (brief thinking, ``<action>`` with tool calls, ``<deliverable>``
    once the Thinker says TASK_DONE). They may be different models on different hosts."""

    def __init__(
        self,
        thinker: ModelService,
        actor: ModelService,
        *,
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
        ask: AskCallback | None = None,
        compact_at: float = COMPACT_AT,
        summarizers: Mapping[str, ModelService] | None = None,
    ) -> None:
        models = {"thinker": thinker, "actor": actor}
        super().__init__(
            DualPlan(),
            models,
            runner=runner,
            hooks=hooks,
            approve=approve,
            ask=ask,
            compact_at=compact_at,
            summarizers=summarizers,
        )


class MonoModelReasoner(Reasoner):
    """One model per round, with the Actor role's queue and settings when distributed."""

    def __init__(
        self,
        model: ModelService,
        *,
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
        ask: AskCallback | None = None,
        compact_at: float = COMPACT_AT,
        summarizers: Mapping[str, ModelService] | None = None,
    ) -> None:
        super().__init__(
            MonoPlan(),
            {"actor": model},
            runner=runner,
            hooks=hooks,
            approve=approve,
            ask=ask,
            compact_at=compact_at,
            summarizers=summarizers,
        )


class ReActReasoner(Reasoner):
    """A ReAct agent in this process: the model calls tools until it answers.

    ``max_steps`` is the step budget (model steps and tool steps count one each; see
    ``tandem.reasoner.loop.react_budget``); it replaces ``Task.max_rounds``, which ``run`` does
    not read. ``function_calling`` picks native tool calls or the ``<function_call>`` prompt
    protocol. ``runner`` executes the calls (a copy with ``on_injected="drop"`` is used: values the
    model sends for injected parameters are dropped). ``hooks.round_started`` gets
    ``rounds_for(max_steps)`` as the round count.
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
        ask: AskCallback | None = None,
        compact_at: float = COMPACT_AT,
        summarizers: Mapping[str, ModelService] | None = None,
    ) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigurationError(f"max_steps must be a whole number of at least 1, got {max_steps!r}")
        if function_calling not in ("native", "prompt"):
            raise ConfigurationError(
                f"function_calling must be 'native' or 'prompt', got {function_calling!r}"
            )
        plan = ReActPlan(function_calling, budget=max_steps)
        runner = dropping(runner or ToolRunner())
        super().__init__(
            plan,
            {"actor": model},
            runner=runner,
            hooks=hooks,
            approve=approve,
            ask=ask,
            compact_at=compact_at,
            summarizers=summarizers,
        )
