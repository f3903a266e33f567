"""Recommendation: the actions near the current ones and the tools they call, as a small toolkit.

A breadth-first walk over ``next`` edges, straight over the adjacency dicts: no networkx
views or subgraph copies per step, so a walk costs what it visits, not the size of the graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tandem.toolkit.action import Action
from tandem.toolkit.errors import ToolDefinitionError, UnknownVertexError
from tandem.toolkit.graph import Toolkit, check_score


def resolve_actions(graph: Toolkit, actions: Iterable[Action | str]) -> list[str]:
    """The vertex ids of ``actions`` (Action objects or ids), de-duplicated, in the given order.

    ``UnknownVertexError`` (listing the known action ids) for one not in ``graph``.
    """
    if isinstance(actions, str | Action):
        actions = [actions]
    ids: list[str] = []
    for item in actions:
        action_id = item.id if isinstance(item, Action) else item
        if not isinstance(action_id, str):
            raise ToolDefinitionError(f"actions are Action objects or action ids, got {item!r}")
        if graph.get_action(action_id) is None:
            raise UnknownVertexError("action", action_id, (a.id for a in graph.actions()))
        ids.append(action_id)
    return list(dict.fromkeys(ids))


def recommend_subgraph(
    graph: Toolkit,
    actions: Iterable[Action | str],
    threshold: float = 0.5,
    hops: int = 0,
) -> Toolkit:
    """The actions within ``hops`` of ``actions`` and the tools they call, as a new toolkit.

    From the start actions, follow ``next`` edges scoring at least ``threshold`` for up to
    ``hops`` steps (breadth first); then take each reached action's tools whose ``call`` edge
    scores at least ``threshold``. The result holds those vertices (start actions first, then
    actions in the order the walk reached them, then tools in the order they were found) and
    every ``next``/``call`` edge among them scoring at least ``threshold``. Groups are left out.
    """
    threshold = check_score(threshold, "threshold")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise ToolDefinitionError(f"hops must be an integer >= 0, got {hops!r}")
    start = resolve_actions(graph, actions)
    adjacency = graph.adjacency

    reached = list(start)
    seen = set(start)
    frontier = start
    for _ in range(hops):
        found: list[str] = []
        for u in frontier:
            for v, edge in adjacency[u].items():
                if edge["kind"] == "next" and v not in seen and edge["score"] >= threshold:
                    seen.add(v)
                    found.append(v)
        if not found:
            break
        reached.extend(found)
        frontier = found

    tools: list[str] = []
    tool_seen: set[str] = set()
    edges: list[tuple[str, str, Mapping[str, Any]]] = []
    for u in reached:
        for v, edge in adjacency[u].items():
            if edge["score"] < threshold:
                continue
            kind = edge["kind"]
            if kind == "call":
                if v not in tool_seen:
                    tool_seen.add(v)
                    tools.append(v)
                edges.append((u, v, edge))
            elif kind == "next" and v in seen:
                edges.append((u, v, edge))

    vertices = _vertex_attrs(graph, reached + tools)
    return Toolkit.from_parts(vertices, edges)


def _vertex_attrs(graph: Toolkit, ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
    result: list[tuple[str, dict[str, Any]]] = []
    for vid in ids:
        data = graph.get(vid)
        result.append((vid, {"data": data}))
    return result
