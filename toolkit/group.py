"""``ToolGroup``: tools registered together, such as every tool of one MCP server."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tandem.toolkit.errors import ToolDefinitionError
from tandem.toolkit.tool import Tool


class ToolGroup(ABC):
    """A named source of tools; in a toolkit graph it has a ``has`` edge to each of its tools.

    ``tools()`` may be slow the first time (an MCP group asks its server) and should be cached
    by the implementation; ``refresh()`` forgets the cache. The group's ``name`` is its vertex
    id, shared with actions and tools, so it must not collide with them.
    """

    def __init__(self, name: str, description: str = "") -> None:
        if not name or not isinstance(name, str):
            raise ToolDefinitionError(f"a tool group needs a non-empty name, got {name!r}")
        self.name = name
        self.description = description

    @property
    def id(self) -> str:
        """The group's vertex id: its name."""
        return self.name

    @abstractmethod
    def tools(self) -> list[Tool]:
        """The group's tools, in a stable order."""

    def refresh(self) -> None:  # noqa: B027 - optional hook, a no-op for static groups
        """Forget any cached listing so the next ``tools()`` asks again."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class StaticToolGroup(ToolGroup):
    """A group over a fixed list of tools, e.g. the functions of one Python module."""

    def __init__(self, name: str, tools: Sequence[Tool], description: str = "") -> None:
        super().__init__(name, description)
        seen: set[str] = set()
        for item in tools:
            if not isinstance(item, Tool):
                raise ToolDefinitionError(f"tool group {name!r}: {item!r} is not a toolkit.Tool")
            if item.name in seen:
                raise ToolDefinitionError(f"tool group {name!r}: the tool name {item.name!r} appears twice")
            seen.add(item.name)
        self._tools = list(tools)

    def tools(self) -> list[Tool]:
        """The tools given at construction."""
        return list(self._tools)
