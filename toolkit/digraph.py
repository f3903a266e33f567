"""``DiGraph``: the few directed-graph operations ``Toolkit`` needs, on plain dicts.

The toolkit's graph is small and built once per process; every worker builds one as it starts.
networkx's ``DiGraph`` did the job, but ``import networkx`` loads all of its algorithms and readers
(a fifth of a second of CPU in every worker process, more than the rest of the toolkit). This one
keeps networkx's layout and semantics for what the toolkit uses: ``nodes`` maps a vertex to its
attribute dict, ``succ[u][v]`` and ``pred[v][u]`` are the same edge attribute dict, everything in
insertion order; adding an existing vertex or edge updates its attributes. ``Toolkit.nx_graph``
still gives a networkx graph, imported only then.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

Attrs = dict[str, Any]


class ReadOnlyAdjacency(Mapping[str, Mapping[str, Attrs]]):
    """``{u: {v: attrs}}`` that its readers cannot change (the inner mappings are read-only too)."""

    def __init__(self, succ: dict[str, dict[str, Attrs]]) -> None:
        self._succ = succ

    def __getitem__(self, u: str) -> Mapping[str, Attrs]:
        return MappingProxyType(self._succ[u])

    def __iter__(self) -> Iterator[str]:
        return iter(self._succ)

    def __len__(self) -> int:
        return len(self._succ)


class DiGraph:
    """A directed graph: vertices with attribute dicts, at most one edge per ordered pair."""

    def __init__(self) -> None:
        self.nodes: dict[str, Attrs] = {}
        self.succ: dict[str, dict[str, Attrs]] = {}
        self.pred: dict[str, dict[str, Attrs]] = {}

    def add_node(self, n: str, **attrs: Any) -> None:
        if n in self.nodes:
            self.nodes[n].update(attrs)
            return
        self.nodes[n] = attrs
        self.succ[n] = {}
        self.pred[n] = {}

    def add_nodes_from(self, nodes: Iterable[tuple[str, Attrs]]) -> None:
        for n, attrs in nodes:
            self.add_node(n, **attrs)

    def remove_nodes_from(self, nodes: Iterable[str]) -> None:
        for n in list(nodes):
            if n not in self.nodes:
                continue
            for v in self.succ.pop(n):
                del self.pred[v][n]
            for u in self.pred.pop(n):
                del self.succ[u][n]
            del self.nodes[n]

    def add_edge(self, u: str, v: str, **attrs: Any) -> None:
        for end in (u, v):
            if end not in self.nodes:
                self.add_node(end)
        data = self.succ[u].get(v, {})
        data.update(attrs)
        self.succ[u][v] = data
        self.pred[v][u] = data

    def add_edges_from(self, edges: Iterable[tuple[str, str, Attrs]]) -> None:
        for u, v, attrs in edges:
            self.add_edge(u, v, **attrs)

    def edges(self) -> Iterator[tuple[str, str, Attrs]]:
        """Every edge with its attribute dict, by source then target in insertion order."""
        return ((u, v, data) for u, targets in self.succ.items() for v, data in targets.items())

    def get_edge_data(self, u: str, v: str) -> Attrs | None:
        targets = self.succ.get(u)
        return None if targets is None else targets.get(v)

    def number_of_edges(self) -> int:
        return sum(len(targets) for targets in self.succ.values())

    def __contains__(self, n: object) -> bool:
        return n in self.nodes

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)
