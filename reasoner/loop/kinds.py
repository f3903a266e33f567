"""The reasoner kinds by name: ``plan_for("dual" | "mono" | "react")`` gives the kind's plan."""

from __future__ import annotations

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.react import FunctionCalling, ReActPlan
from tandem.reasoner.loop.rounds import DualPlan, MonoPlan

__all__ = ["KINDS", "plan_for"]

KINDS = ("dual", "mono", "react")
"""The reasoner kinds, as ``JobSpec.reasoner`` names them."""


def plan_for(kind: str, *, function_calling: FunctionCalling = "native", budget: int = 0) -> LoopPlan:
    """The plan of reasoner ``kind``. ReAct's takes its ``function_calling`` mode and its step
    ``budget`` (see ``ReActPlan``); the round plans need neither. ``ConfigurationError`` for an
    unknown kind."""
    if kind == "dual":
        return DualPlan()
    if kind == "mono":
        return MonoPlan()
    if kind == "react":
        return ReActPlan(function_calling, budget)
    raise ConfigurationError(f"unknown reasoner kind {kind!r}: use one of {sorted(KINDS)}")
