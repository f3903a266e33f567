"""What a pause for approval puts on the wire: the calls waiting (``PendingCall``) and a person's
decision on one of them (``Decision``). Plain pydantic models, so a client reads and writes them
without the rest of the reasoner; the rules they follow are ``tandem.reasoner.approval``'s."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Decision", "PendingCall"]


class PendingCall(BaseModel):
    """A tool call waiting for a decision: what a person reviews."""

    model_config = ConfigDict(frozen=True)

    index: int
    """The call's number in the reply (from 1): the ``index`` its decision names."""
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    objective: str = ""
    """Why the model makes the call (its ``call_objective``; empty for native calls)."""
    round: int = 0
    call_id: str | None = None
    """The native tool call's id (ReAct), if any."""


class Decision(BaseModel):
    """A decision on one pending call, as it travels on the wire:
    ``{"index": 1, "approve": true}``, ``{"index": 2, "approve": false, "reason": "..."}``,
    ``{"index": 3, "approve": true, "args": {...}}`` (run with these arguments instead)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=1)
    approve: bool
    reason: str | None = Field(default=None, max_length=2000)
    args: dict[str, Any] | None = None
