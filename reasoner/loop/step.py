"""The one vocabulary of a run: ``Step`` values, and what a model step reads (``StepInputs``).

A run is a sequence of steps: model steps (``thinker``, ``actor``), a ``tools`` step (the calls of
the round's Actor reply), a ``collect`` step (their results stored; distributed runs only) and
``finalize`` (with the run's status). Every plan (``tandem.reasoner.loop.plan``) answers "what
next?" with a ``Step``, and every driver, in-process or Celery, reads the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.task import Task
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.toolkit.action import Action

__all__ = [
    "MODEL_STEPS",
    "FinalStatus",
    "ModelRole",
    "Step",
    "StepInputs",
    "StepKind",
    "finalize",
]

StepKind = Literal["thinker", "actor", "tools", "collect", "finalize"]
"""The kinds of step: two model turns, the tool fan-out, storing its results, and the end."""

ModelRole = Literal["thinker", "actor"]
"""The roles whose replies a run stores (mono and ReAct use the Actor's)."""

FinalStatus = Literal["completed", "truncated"]
"""How a run that did not fail ends."""

MODEL_STEPS: frozenset[str] = frozenset({"thinker", "actor"})


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
        """The role whose reply a model step stores: ``thinker`` for a Thinker step, else ``actor``."""
        return "thinker" if self.kind == "thinker" else "actor"


def finalize(round_no: int, status: FinalStatus) -> Step:
    """The step that ends a run in ``round_no`` with ``status``."""
    return Step(round_no, "finalize", status=status)


@dataclass
class StepInputs:
    """What a model step reads: the task, the memory, the offered tools and actions, the hooks."""

    task: Task
    memory: ReasonerMemory
    tools: Sequence[Tool] = ()
    actions: Sequence[Action] = ()
    hooks: ReasonerHooks = field(default_factory=lambda: NO_HOOKS)
