"""Child jobs as a tool sees them: what ``ToolCallContext.spawn`` takes and returns.

A tool (or the model, through the built-in ``spawn_jobs`` tool) starts whole reasoning jobs and
waits for them: ``ctx.spawn([ChildSpec(goal=...), ...], wait="all")`` returns one ``ChildOutcome``
per child, in order. On workers each child is a job of its own (``tandem.tasks.control.children``);
this module holds the plain data only, with no Celery (the built-in tool is the reasoner
package's ``spawning`` module: the toolkit imports nothing of the reasoner).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tandem.toolkit.errors import SpawnError

__all__ = ["ChildOutcome", "ChildSpec", "Spawner", "Wait", "check_specs", "check_wait"]

Wait = Literal["all", "any"] | int
"""When ``spawn`` returns: once ``all`` children ended, once ``any`` did, or once ``n`` did."""


class ChildSpec(BaseModel):
    """One child job: its ``goal`` and, optionally, the tools it may use (``None``: the parent's
    allow-list), its reasoner (``None``: the parent's), its ``context`` and ``max_rounds``."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1)
    context: str = ""
    tools: list[str] | None = None
    reasoner: Literal["dual", "mono", "react"] | None = None
    max_rounds: int | None = Field(default=None, ge=1, le=500)


class ChildOutcome(BaseModel):
    """How one child ended (or where it stands, for a child still running when ``spawn`` returned
    with ``wait="any"`` or ``n``): its ``job_id``, ``status`` (a final state, or ``running``),
    ``deliverable`` and ``error``. ``usage``: an ended child's ``JobResult.usage`` as a dict
    (``prompt_tokens``, ``completion_tokens``, ``total_tokens``, ``calls``, ``cost_usd``,
    ``counted_calls``; its own children's included), which the framework counts as the parent's
    spend; ``None`` for a child still running."""

    job_id: str
    status: str
    deliverable: str = ""
    error: str | None = None
    usage: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        """Whether the child has ended."""
        return self.status in ("completed", "truncated", "failed", "cancelled")


Spawner = Callable[[list[ChildSpec], "Wait", int], list[ChildOutcome]]
"""What starts the children and waits: given the specs, the wait condition and the spawn's number
within its call (from 1), the outcomes. The job's pause on workers; raises ``SpawnError``."""


def check_specs(specs: Any) -> list[ChildSpec]:
    """The specs as ``ChildSpec``s (dicts or ``ChildSpec``s, or goal strings); ``SpawnError`` naming
    the first that does not fit."""
    if not isinstance(specs, Sequence) or isinstance(specs, str | bytes) or not specs:
        raise SpawnError(
            f"spawn takes a non-empty list of child specs (each a goal at least), got {specs!r:.80}"
        )
    checked: list[ChildSpec] = []
    for n, spec in enumerate(specs, start=1):
        try:
            if isinstance(spec, str):
                spec = {"goal": spec}
            checked.append(spec if isinstance(spec, ChildSpec) else ChildSpec.model_validate(spec))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(the spec)"
            raise SpawnError(f"child spec {n}: field {where!r}: {first['msg']}") from None
    return checked


def check_wait(wait: Any, count: int) -> Wait:
    """``wait`` if it is ``"all"``, ``"any"`` or a number of children from 1 to ``count``; else
    ``SpawnError``."""
    if wait in ("all", "any"):
        return wait
    if isinstance(wait, int) and not isinstance(wait, bool) and 1 <= wait <= count:
        return wait
    raise SpawnError(f'wait must be "all", "any" or a number from 1 to {count}, got {wait!r}')
