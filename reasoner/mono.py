"""``MonoModelReasoner``: one model thinks, acts, calls tools and delivers."""

from __future__ import annotations

from tandem.reasoner.approval import Approver
from tandem.reasoner.base import LoopReasoner
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.model_service import ModelService
from tandem.reasoner.tool_runner import ToolRunner


class MonoModelReasoner(LoopReasoner):
    """One model per round, with the Actor role's queue and settings when distributed."""

    mode = "mono"

    def __init__(
        self,
        model: ModelService,
        *,
        runner: ToolRunner | None = None,
        hooks: ReasonerHooks | None = None,
        approve: Approver | None = None,
    ) -> None:
        super().__init__(model, runner=runner, hooks=hooks, approve=approve)
