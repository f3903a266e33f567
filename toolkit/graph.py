"""``Toolkit``: the directed graph of actions, tools and tool groups (``toolkit/digraph.py``).

Vertices carry ``{"data": Action | Tool | ToolGroup}``; the vertex id is the object's ``id``
(an action's id, a tool's or a group's name), so ids are shared across the three kinds.
Edges carry ``{"kind": ..., "score": ...}`` and their kind follows from their ends:

==========================  ========  ============================================
ends                        kind      meaning
==========================  ========  ============================================
Action  -> Action           ``next``  the second step may follow the first
Action  -> Tool             ``call``  the step may call the tool
ToolGroup -> Tool           ``has``   the tool belongs to the group (score 1.0)
==========================  ========  ============================================

Scores lie in [0, 1]. A toolkit is built once (at start-up) and then read from many threads;
reads are safe, concurrent writes are not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from tandem.toolkit.action import Action
from tandem.toolkit.digraph import DiGraph, ReadOnlyAdjacency
from tandem.toolkit.errors import ToolDefinitionError, UnknownVertexError
from tandem.toolkit.group import ToolGroup
from tandem.toolkit.policy import ToolPolicy
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    import networkx as nx

VertexData = Action | Tool | ToolGroup
"""What a vertex holds."""

VertexKind = Literal["action", "tool", "group"]
EdgeKind = Literal["next", "call", "has"]

_ARTICLE = {"action": "an action", "tool": "a tool", "group": "a group"}
_EDGE_KINDS: dict[tuple[str, str], EdgeKind] = {
    ("action", "action"): "next",
    ("action", "tool"): "call",
    ("group", "tool"): "has",
}


def vertex_kind(data: object) -> VertexKind:
    """``"action"``, ``"tool"`` or ``"group"`` for a vertex's data; ``ToolkitError`` otherwise."""
    if isinstance(data, Action):
        return "action"
    if isinstance(data, Tool):
        return "tool"
    if isinstance(data, ToolGroup):
        return "group"
    raise ToolDefinitionError(f"a toolkit vertex holds an Action, a Tool or a ToolGroup, got {data!r}")


def check_score(score: object, what: str = "score") -> float:
    """``score`` as a float in [0, 1]; ``ToolDefinitionError`` naming ``what`` otherwise."""
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise ToolDefinitionError(f"{what} must be a number in [0, 1], got {score!r}")
    value = float(score)
    if not 0.0 <= value <= 1.0:
        raise ToolDefinitionError(f"{what} must be in [0, 1], got {score!r}")
    return value


class Toolkit:
    """Actions, tools and tool groups with scored edges between them (see the module docstring)."""

    def __init__(self) -> None:
        self._graph = DiGraph()
        self.policy: ToolPolicy | None = None
        """The toolkit's own tool policy (the YAML ``policy:`` section), if it declares one."""

    # -- vertices -------------------------------------------------------------------------

    def add_vertex(self, id: str, **properties: Any) -> None:
        """Add or replace the vertex ``id``; ``properties["data"]`` is its Action, Tool or ToolGroup.

        ``id`` must equal the data's ``id``. Re-adding an id with data of the same kind
        replaces the data and keeps the edges; a different kind is a ``ToolkitError``.
        """
        if "data" not in properties:
            raise ToolDefinitionError(f"add_vertex({id!r}): pass data=<Action | Tool | ToolGroup>")
        data = properties["data"]
        kind = vertex_kind(data)
        if data.id != id:
            raise ToolDefinitionError(f"add_vertex({id!r}): the {kind}'s own id is {data.id!r}; use that id")
        existing = self._graph.nodes.get(id)
        if existing is not None:
            old_kind = vertex_kind(existing["data"])
            if old_kind != kind:
                raise ToolDefinitionError(
                    f"the id {id!r} already names {_ARTICLE[old_kind]}; {_ARTICLE[kind]} cannot use it too "
                    "(actions, tools and groups share one namespace)"
                )
        self._graph.add_node(id, **properties)

    def remove_vertex(self, id: str) -> None:
        """Remove ``id`` and its edges, with a cascade.

        Removing an action also removes each tool it called that no other action calls and
        no group holds; removing a group also removes its tools. ``UnknownVertexError`` if
        ``id`` is not a vertex.
        """
        data = self.get(id)
        if data is None:
            raise UnknownVertexError("vertex", id, self._graph.nodes)
        doomed = [id]
        succ, pred = self._graph.succ, self._graph.pred
        if isinstance(data, Action):
            for tool_id, edge in succ[id].items():
                if edge["kind"] == "call" and all(p == id for p in pred[tool_id]):
                    doomed.append(tool_id)
        elif isinstance(data, ToolGroup):
            doomed.extend(t for t, edge in succ[id].items() if edge["kind"] == "has")
        self._graph.remove_nodes_from(doomed)

    def get(self, id: str) -> VertexData | None:
        """The data of vertex ``id``, of any kind; ``None`` if there is none."""
        attrs = self._graph.nodes.get(id)
        return None if attrs is None else attrs["data"]

    def get_action(self, id: str) -> Action | None:
        """The action with this id; ``None`` if the id is unknown or names a tool or group."""
        data = self.get(id)
        return data if isinstance(data, Action) else None

    def get_tool(self, id: str) -> Tool | None:
        """The tool with this id (its name); ``None`` if unknown or not a tool."""
        data = self.get(id)
        return data if isinstance(data, Tool) else None

    def get_group(self, id: str) -> ToolGroup | None:
        """The tool group with this id (its name); ``None`` if unknown or not a group."""
        data = self.get(id)
        return data if isinstance(data, ToolGroup) else None

    def vertices(self) -> list[str]:
        """Every vertex id, in insertion order."""
        return list(self._graph.nodes)

    def vertices_data(self) -> list[tuple[str, dict[str, Any]]]:
        """``(id, {"data": obj, ...})`` for every vertex, in insertion order (copies of the dicts)."""
        return [(vid, dict(attrs)) for vid, attrs in self._graph.nodes.items()]

    def actions(self) -> list[Action]:
        """Every action, in insertion order."""
        return [a["data"] for a in self._graph.nodes.values() if isinstance(a["data"], Action)]

    def tools(self) -> list[Tool]:
        """Every tool, in insertion order."""
        return [a["data"] for a in self._graph.nodes.values() if isinstance(a["data"], Tool)]

    def groups(self) -> list[ToolGroup]:
        """Every tool group, in insertion order."""
        return [a["data"] for a in self._graph.nodes.values() if isinstance(a["data"], ToolGroup)]

    # -- edges ----------------------------------------------------------------------------

    def add_edge(self, u: str, v: str, score: float = 1.0) -> None:
        """Add or re-score the edge ``u -> v``; its kind follows from the ends' kinds.

        ``ToolkitError`` for an unknown end, a pair of kinds with no edge kind (e.g. a tool
        pointing anywhere), or a score outside [0, 1].
        """
        kinds = []
        for end in (u, v):
            data = self.get(end)
            if data is None:
                raise UnknownVertexError("vertex", end, self._graph.nodes)
            kinds.append(vertex_kind(data))
        kind = _EDGE_KINDS.get((kinds[0], kinds[1]))
        if kind is None:
            raise ToolDefinitionError(
                f"no edge may go from {kinds[0]} {u!r} to {kinds[1]} {v!r}; edges are "
                "action->action (next), action->tool (call) and group->tool (has)"
            )
        self._graph.add_edge(u, v, kind=kind, score=check_score(score, f"the score of {u!r} -> {v!r}"))

    def edges(self) -> list[tuple[str, str]]:
        """Every edge as ``(u, v)``."""
        return [(u, v) for u, v, _ in self._graph.edges()]

    def edges_data(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every edge as ``(u, v, {"kind": ..., "score": ...})`` (copies of the dicts)."""
        return [(u, v, dict(d)) for u, v, d in self._graph.edges()]

    def edge_kind(self, u: str, v: str) -> EdgeKind | None:
        """``"next"``, ``"call"`` or ``"has"`` for the edge ``u -> v``; ``None`` if there is none."""
        data = self._graph.get_edge_data(u, v)
        return None if data is None else data["kind"]

    def get_score(self, u: str, v: str) -> float:
        """The score of ``u -> v``; 1.0 when the edge has none or does not exist."""
        data = self._graph.get_edge_data(u, v)
        return 1.0 if data is None else float(data.get("score", 1.0))

    def set_score(self, u: str, v: str, score: float) -> None:
        """Set the score of the existing edge ``u -> v``; ``ToolkitError`` if there is no such edge."""
        data = self._graph.get_edge_data(u, v)
        if data is None:
            raise ToolDefinitionError(f"there is no edge {u!r} -> {v!r} to score; add it with add_edge")
        data["score"] = check_score(score, f"the score of {u!r} -> {v!r}")

    def next_actions(self, action_id: str) -> list[tuple[Action, float]]:
        """The actions that may follow ``action_id``, with scores, in insertion order."""
        return [
            (self._graph.nodes[v]["data"], edge["score"])
            for v, edge in self._succ_of(action_id).items()
            if edge["kind"] == "next"
        ]

    def tools_of(self, vertex_id: str) -> list[tuple[Tool, float]]:
        """The tools an action calls (or a group holds), with scores, in insertion order."""
        return [
            (self._graph.nodes[v]["data"], edge["score"])
            for v, edge in self._succ_of(vertex_id).items()
            if edge["kind"] in ("call", "has")
        ]

    def callers(self, tool_id: str) -> list[tuple[Action, float]]:
        """The actions that call ``tool_id``, with scores."""
        if tool_id not in self._graph:
            raise UnknownVertexError("tool", tool_id, (t.id for t in self.tools()))
        return [
            (self._graph.nodes[u]["data"], edge["score"])
            for u, edge in self._graph.pred[tool_id].items()
            if edge["kind"] == "call"
        ]

    def _succ_of(self, vertex_id: str) -> Mapping[str, Mapping[str, Any]]:
        if vertex_id not in self._graph:
            raise UnknownVertexError("vertex", vertex_id, self._graph.nodes)
        return self._graph.succ[vertex_id]

    # -- whole graphs ---------------------------------------------------------------------

    def update(self, other: Toolkit) -> None:
        """Merge ``other`` into this toolkit, like ``dict.update``.

        New vertices and edges are added; a vertex present in both takes ``other``'s data
        (same kind required) and an edge present in both takes ``other``'s score.
        """
        for vid, attrs in other._graph.nodes.items():
            self.add_vertex(vid, **attrs)
        for u, v, data in other._graph.edges():
            self._graph.add_edge(u, v, **data)

    def subgraph(self, ids: Iterable[str]) -> Toolkit:
        """A new toolkit with the vertices ``ids`` (in that order) and every edge among them.

        The vertex data objects are shared, not copied. ``UnknownVertexError`` for an unknown id.
        """
        wanted = list(dict.fromkeys(ids))
        nodes = self._graph.nodes
        for vid in wanted:
            if vid not in nodes:
                raise UnknownVertexError("vertex", vid, nodes)
        keep = set(wanted)
        succ = self._graph.succ
        edges = [(u, v, d) for u in wanted for v, d in succ[u].items() if v in keep]
        return Toolkit.from_parts(((vid, nodes[vid]) for vid in wanted), edges)

    @classmethod
    def from_parts(
        cls,
        vertices: Iterable[tuple[str, Mapping[str, Any]]],
        edges: Iterable[tuple[str, str, Mapping[str, Any]]],
    ) -> Toolkit:
        """A toolkit from vertices and edges already known to be valid (no checks: fast).

        For building results out of another toolkit's parts; attribute dicts are copied.
        """
        made = cls()
        made._graph.add_nodes_from((vid, dict(attrs)) for vid, attrs in vertices)
        made._graph.add_edges_from((u, v, dict(d)) for u, v, d in edges)
        return made

    @property
    def adjacency(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]:
        """Read-only ``{u: {v: {"kind", "score"}}}`` for fast traversals."""
        return ReadOnlyAdjacency(self._graph.succ)

    @property
    def nx_graph(self) -> nx.DiGraph:
        """A read-only networkx copy of the graph (for drawing and analysis; imports networkx)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self._graph.nodes.items())
        g.add_edges_from(self._graph.edges())
        return nx.freeze(g)

    def __contains__(self, id: object) -> bool:
        return id in self._graph

    def __len__(self) -> int:
        return len(self._graph)

    def __iter__(self) -> Iterator[str]:
        return iter(self._graph)

    def __repr__(self) -> str:
        counts = {"action": 0, "tool": 0, "group": 0}
        for attrs in self._graph.nodes.values():
            counts[vertex_kind(attrs["data"])] += 1
        return (
            f"Toolkit(actions={counts['action']}, tools={counts['tool']}, "
            f"groups={counts['group']}, edges={self._graph.number_of_edges()})"
        )
