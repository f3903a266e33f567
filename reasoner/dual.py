"""``DualModelReasoner``: a Thinker plans and instructs, an Actor acts, calls tools and delivers."""

from __future__ import annotations

from tandem.reasoner.approval import Approver
from tandem.reasoner.base import LoopReasoner
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.model_service import ModelService
from tandem.reasoner.tool_runner import ToolRunner


class DualModelReasoner(LoopReasoner):
    """Two models per round: the Thinker (deep thinking, ``<instruction>``/``<input>``, never
    tools) and then the Actor (brief thinking, ``<action>`` with tool calls, ``<deliverable>``
    once the Thinker says TASK_DONE). They may be different models on different hosts."""

    mode = "dual"

    def __init__(
        self,
        thinker: ModelService,
        actor: ModelService,
        *,
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
    ) -> None:
        super().__init__(actor, runner=runner, hooks=hooks, approve=approve)
        self.thinker = thinker
