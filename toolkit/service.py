"""``ToolkitService``: registering actions and tools in a toolkit, and recommending from it."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tandem.toolkit.action import Action
from tandem.toolkit.errors import ToolDefinitionError, UnknownVertexError
from tandem.toolkit.graph import Toolkit, check_score
from tandem.toolkit.group import ToolGroup
from tandem.toolkit.recommend import recommend_subgraph
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

ScoredActions = Sequence[tuple[Action, float]]
"""``[(action, score), ...]``: the other end of each edge and the edge's score."""


class ToolkitService:
    """The operations the reasoners and the loader use on one ``Toolkit``.

    Not a singleton: each service wraps the toolkit it is given (a new, empty one by default).
    Registration mistakes that the seed API only warns about (unknown actions, a tool with no
    action) are logged at WARNING on ``tandem.toolkit.service``; look-ups of unknown ids raise
    ``UnknownVertexError`` naming the id and the known ones.
    """

    def __init__(self, toolkit: Toolkit | None = None) -> None:
        self._toolkit = toolkit if toolkit is not None else Toolkit()

    def get_toolkit(self) -> Toolkit:
        """The toolkit this service manages (the live object, not a copy)."""
        return self._toolkit

    # -- registration ---------------------------------------------------------------------

    def add_action(
        self,
        action: Action,
        next_actions: ScoredActions = (),
        prev_actions: ScoredActions = (),
    ) -> None:
        """Add ``action`` with ``next`` edges to ``next_actions`` and from ``prev_actions``.

        Neighbour actions not yet in the toolkit are added too. Re-adding an action replaces
        its data and adds (or re-scores) the given edges; existing edges stay.
        """
        graph = self._toolkit
        graph.add_vertex(action.id, data=action)
        for other, _ in [*next_actions, *prev_actions]:
            if not isinstance(other, Action):
                raise ToolDefinitionError(f"add_action({action.id!r}): neighbours are Actions, got {other!r}")
            if other.id not in graph:
                graph.add_vertex(other.id, data=other)
        for other, score in next_actions:
            graph.add_edge(action.id, other.id, score)
        for other, score in prev_actions:
            graph.add_edge(other.id, action.id, score)

    def add_tool(self, tool: Tool, connected_actions: ScoredActions) -> None:
        """Add ``tool`` with a ``call`` edge from each of ``connected_actions``.

        An action not in the toolkit is skipped with a warning; if no action is left, the tool
        is not added (a tool no action calls can never be recommended) and a warning says so.
        """
        live = self._known_actions(f"tool {tool.name!r}", connected_actions)
        if not live:
            logger.warning("tool %r is connected to no known action; it was not added", tool.name)
            return
        self._toolkit.add_vertex(tool.id, data=tool)
        for action_id, score in live:
            self._toolkit.add_edge(action_id, tool.id, score)

    def add_tool_group(self, group: ToolGroup, connected_actions: ScoredActions) -> None:
        """Add ``group``, its tools (``group.tools()``, which may contact a server) and their edges.

        Every tool of the group gets a ``call`` edge from each known action in
        ``connected_actions`` with that action's score. Unknown actions are skipped with a
        warning; with none left, nothing is added and a warning says so.
        """
        live = self._known_actions(f"tool group {group.name!r}", connected_actions)
        if not live:
            logger.warning("tool group %r is connected to no known action; it was not added", group.name)
            return
        tools = group.tools()  # first: a failing listing must leave the toolkit untouched
        graph = self._toolkit
        graph.add_vertex(group.id, data=group)
        for tool in tools:
            graph.add_vertex(tool.id, data=tool)
            graph.add_edge(group.id, tool.id, 1.0)
            for action_id, score in live:
                graph.add_edge(action_id, tool.id, score)

    def _known_actions(self, what: str, connected: ScoredActions) -> list[tuple[str, float]]:
        live: list[tuple[str, float]] = []
        for action, score in connected:
            action_id = action.id if isinstance(action, Action) else action
            check_score(score, f"the score of {action_id!r} -> {what}")
            if self._toolkit.get_action(action_id) is None:
                logger.warning("%s: action %r is not in the toolkit; that edge was skipped", what, action_id)
                continue
            live.append((action_id, score))
        return live

    # -- look-up and removal --------------------------------------------------------------

    def get_action(self, action_id: str) -> Action:
        """The action with this id; ``UnknownVertexError`` naming it and the known action ids."""
        action = self._toolkit.get_action(action_id)
        if action is None:
            raise UnknownVertexError("action", action_id, (a.id for a in self._toolkit.actions()))
        return action

    def get_tool(self, tool_id: str) -> Tool:
        """The tool with this id; ``UnknownVertexError`` naming it and the known tool names."""
        tool = self._toolkit.get_tool(tool_id)
        if tool is None:
            raise UnknownVertexError("tool", tool_id, (t.id for t in self._toolkit.tools()))
        return tool

    def remove_tool(self, tool_id: str) -> None:
        """Remove the tool and its edges; ``UnknownVertexError`` if there is no such tool."""
        self.get_tool(tool_id)
        self._toolkit.remove_vertex(tool_id)

    def remove_action(self, action_id: str) -> None:
        """Remove the action, its edges and the tools only it called (see ``Toolkit.remove_vertex``)."""
        self.get_action(action_id)
        self._toolkit.remove_vertex(action_id)

    # -- recommendation -------------------------------------------------------------------

    def recommend_subgraph(
        self, actions: Iterable[Action | str], threshold: float = 0.5, hops: int = 0
    ) -> Toolkit:
        """The recommended actions and tools as a new toolkit; see ``tandem.toolkit.recommend``."""
        return recommend_subgraph(self._toolkit, actions, threshold, hops)

    def recommend_tools_actions(
        self, actions: Iterable[Action | str], threshold: float = 0.5, hops: int = 0
    ) -> tuple[list[Tool], list[Action]]:
        """``(tools, actions)`` of ``recommend_subgraph``.

        Actions: the start actions first, then in the order the walk reached them. Tools: in
        the order they were found, walking those actions in that order.
        """
        sub = self.recommend_subgraph(actions, threshold, hops)
        return sub.tools(), sub.actions()

    # -- pictures -------------------------------------------------------------------------

    def visualize(self, graph: Toolkit, title: str, show: bool = False) -> Figure:
        """A matplotlib figure of ``graph`` (needs ``pip install 'tandem-llm[viz]'``)."""
        from tandem.toolkit.visualize import draw_toolkit

        return draw_toolkit(graph, title, show=show)

    def to_mermaid(self, graph: Toolkit | None = None) -> str:
        """``graph`` (the managed toolkit by default) as a Mermaid flowchart; needs nothing extra."""
        from tandem.toolkit.visualize import to_mermaid

        return to_mermaid(graph if graph is not None else self._toolkit)
