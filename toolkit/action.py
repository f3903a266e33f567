"""``Action``: a step of a task, the vertex that tools hang off in a toolkit graph."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from tandem.toolkit.errors import ToolDefinitionError


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Action:
    """A decision point the model may be in: what to do now, which tools serve it, what comes next.

    ``Action(id, name, description)`` positionally, or by keyword. ``id`` is the vertex id in a
    toolkit; leave it empty to use ``name`` (and an empty ``name`` takes ``id``). Actions are
    immutable and compared by value, so the same definition loaded twice is the same action.
    """

    id: str = ""
    name: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not self.id and not self.name:
            raise ToolDefinitionError("an Action needs an id or a name")
        if not self.id:
            object.__setattr__(self, "id", self.name)
        if not self.name:
            object.__setattr__(self, "name", self.id)

    def to_dict(self) -> dict[str, Any]:
        """The action as plain JSON-ready data."""
        return {"id": self.id, "name": self.name, "description": self.description}
