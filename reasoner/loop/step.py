"""The one vocabulary of a run: ``Step`` values, and what a model step reads (``StepInputs``).

A run is a sequence of steps: model steps (``thinker``, ``actor``), a ``tools`` step (the calls of
the round's Actor reply), a ``collect`` step (their results stored; distributed runs only) and
``finalize`` (with the run's status). Every plan (``tandem.reasoner.loop.plan``) answers "what
next?" with a ``Step``, and every driver, in-process or Celery, reads the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tandem.reasoner.context.compaction import DROP_ROUNDS, Compactor
from tandem.reasoner.context.counting import TokenCache
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.task import Task
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.reasoner.models.model_service import ModelService
    from tandem.toolkit.action import Action

__all__ = [
    "COMPACT_STEPS",
    "MODEL_STEPS",
    "FinalStatus",
    "ModelRole",
    "Step",
    "StepInputs",
    "StepKind",
    "finalize",
]

StepKind = Literal["thinker", "actor", "tools", "collect", "finalize", "compact_thinker", "compact_actor"]
"""The kinds of step: two model turns, the tool fan-out, storing its results, the end, and the
summary of a role's older rounds before its model turn (distributed runs; in process the drivers
summarize before the model step: ``tandem.reasoner.loop.compacting``)."""

ModelRole = Literal["thinker", "actor"]
"""The roles whose replies a run stores (mono and ReAct use the Actor's)."""

FinalStatus = Literal["completed", "truncated"]
"""How a run that did not fail ends."""

MODEL_STEPS: frozenset[str] = frozenset({"thinker", "actor"})
COMPACT_STEPS: frozenset[str] = frozenset({"compact_thinker", "compact_actor"})


@dataclass(frozen=True)
class Step:
    """One step of a run: its round, its kind, the number of calls (``tools``, ``collect``) or the
    status the run ends with (``finalize``)."""

    round: int
    kind: StepKind
    calls: int = 0
    status: str = ""

    @property
    def role(self) -> ModelRole:
        """The role whose reply a model step stores (or whose view a compaction step summarizes):
        ``thinker`` for a Thinker step, else ``actor``."""
        return "thinker" if self.kind in ("thinker", "compact_thinker") else "actor"

    def compaction(self) -> Step:
        """The step that summarizes the older rounds of model step ``self``'s role, before it."""
        return Step(self.round, "compact_thinker" if self.role == "thinker" else "compact_actor")

    def compacted(self) -> Step:
        """The model step a compaction step ``self`` goes back to."""
        return Step(self.round, self.role)


def finalize(round_no: int, status: FinalStatus) -> Step:
    """The step that ends a run in ``round_no`` with ``status``."""
    return Step(round_no, "finalize", status=status)


@dataclass
class StepInputs:
    """What a model step reads: the task, the memory, the offered tools and actions, the hooks;
    the job's token counts (kept between its steps) and what stands in for rounds a request
    leaves out (``tandem.reasoner.context``); ``compact_at``: the share of a role's budget past
    which its older rounds are summarized (0: never, only the deterministic drop), by the model
    ``summarizers`` names for the role (else the role's own: ``tandem.reasoner.loop.compacting``)."""

    task: Task
    memory: ReasonerMemory
    tools: Sequence[Tool] = ()
    actions: Sequence[Action] = ()
    hooks: ReasonerHooks = field(default_factory=lambda: NO_HOOKS)
    tokens: TokenCache = field(default_factory=TokenCache)
    compactor: Compactor = DROP_ROUNDS
    compact_at: float = 0.0
    summarizers: Mapping[str, ModelService] = field(default_factory=dict)
