"""The in-process driver shared by the dual and mono reasoners."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tandem.reasoner import plan, steps
from tandem.reasoner.approval import Approver
from tandem.reasoner.errors import ReasonerError
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.model_service import ModelService
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.toolkit.action import Action


class LoopReasoner:
    """Runs the round loop of ``tandem.reasoner.steps`` in this process.

    Subclasses say who speaks: ``DualModelReasoner`` (Thinker then Actor each round) or
    ``MonoModelReasoner`` (one model). ``run`` never raises for a model or tool failure: the
    outcome says ``failed`` and keeps the messages so far. ``arun``/``ainfer`` are the same loop
    for asyncio code (``tandem.reasoner.async_runner``).

    ``approve`` decides on calls that need approval (``Tool.requires_approval``,
    ``Task.approve_tools``): it gets the pending calls and returns decisions (see
    ``tandem.reasoner.approval``); sync or ``async``. Without it such calls are rejected.
    """

    mode: steps.Mode = "dual"
    thinker: ModelService | None = None

    def __init__(
        self,
        actor: ModelService,
        *,
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
    ) -> None:
        self.actor = actor
        self.runner = runner or ToolRunner()
        self.hooks = hooks or NO_HOOKS
        self.approve = approve

    def run(self, task: Task, memory: ReasonerMemory | None = None) -> ReasonerOutcome:
        """Reason about ``task`` until a deliverable, the round budget, or a failure."""
        memory = memory if memory is not None else InMemoryReasonerMemory()
        tools, actions = task.recommend()
        try:
            status = self._loop(task, memory, tools, actions)
            outcome = steps.make_outcome(memory, status)
        except ReasonerError as exc:
            outcome = steps.make_outcome(memory, "failed", error=f"{type(exc).__name__}: {exc}")
        self.hooks.finished(outcome)
        return outcome

    def _loop(
        self, task: Task, memory: ReasonerMemory, tools: list[Tool], actions: list[Action]
    ) -> Literal["completed", "truncated"]:
        models = {"actor": self.actor}
        if self.thinker is not None:
            models["thinker"] = self.thinker
        inputs = plan.StepInputs(task, memory, tools, actions, self.hooks)
        return plan.drive(plan.plan_for(self.mode), models, inputs, self.runner, approver=self.approve)

    async def arun(self, task: Task, memory: ReasonerMemory | None = None) -> ReasonerOutcome:
        """``run`` for asyncio: model calls are awaited (``agenerate``), a reply's tool calls run
        concurrently; the same steps, decisions, hooks and outcome."""
        from tandem.reasoner.async_runner import arun_loop

        return await arun_loop(self, task, memory)

    async def ainfer(self, task: Task) -> str:
        """``infer`` for asyncio."""
        memory = InMemoryReasonerMemory()
        outcome = await self.arun(task, memory)
        if outcome.status == "failed":
            raise ReasonerError(outcome.error or "the run failed")
        return self.conclude(memory)

    def infer(self, task: Task) -> str:
        """Run ``task`` and return ``conclude`` of its memory (use ``run`` to see the status)."""
        memory = InMemoryReasonerMemory()
        outcome = self.run(task, memory)
        if outcome.status == "failed":
            raise ReasonerError(outcome.error or "the run failed")
        return self.conclude(memory)

    def conclude(self, memory: ReasonerMemory) -> str:
        """The deliverable of the last Actor reply (or its visible text when it wrote none)."""
        return steps.conclude(memory)

    @staticmethod
    def stopped(message: ModelMessage) -> bool:
        """True when ``message`` holds a ``<deliverable>``: the loop ends."""
        return steps.stopped(message)
