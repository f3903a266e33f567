"""Pictures of a toolkit: a matplotlib figure (optional extra ``viz``) and Mermaid text (no extras).

Both use the same vocabulary: actions are rounded/blue, tools square/green, groups
hexagonal/orange; ``next`` edges are solid, ``call`` edges dashed, ``has`` edges dotted;
``next`` and ``call`` edges are labelled with their scores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import networkx as nx

from tandem.toolkit.errors import ToolDefinitionError
from tandem.toolkit.graph import Toolkit, vertex_kind

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_COLOURS = {"action": "#9cc3f5", "tool": "#a8e0a0", "group": "#f7c98b"}
_SHAPES = {"action": "o", "tool": "s", "group": "h"}
_STYLES = {"next": "solid", "call": "dashed", "has": "dotted"}
_MERMAID_SHAPES = {"action": ('(["', '"])'), "tool": ('[["', '"]]'), "group": ('{{"', '"}}')}
_MERMAID_ARROWS = {"next": "-->", "call": "-.->", "has": "---"}


def draw_toolkit(graph: Toolkit, title: str, *, show: bool = False) -> Figure:
    """A matplotlib ``Figure`` of ``graph`` with ``title``; ``show=True`` also opens a window.

    The layout is seeded, so the same graph draws the same way. Without ``show`` the figure
    is made without pyplot (no global state, any backend). ``ToolDefinitionError`` when
    matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ToolDefinitionError(
            "drawing a toolkit needs matplotlib, an optional extra: pip install 'tandem-llm[viz]' "
            "(or use to_mermaid, which needs nothing)"
        ) from exc

    g = graph.nx_graph
    size = max(6.0, min(20.0, 2.0 + 0.6 * len(g)))
    if show:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(size, size * 0.75))
    else:
        fig = Figure(figsize=(size, size * 0.75))
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_axis_off()
    if len(g) == 0:
        ax.text(0.5, 0.5, "(empty toolkit)", ha="center", va="center")
        return _finish(fig, show)

    pos: dict[Any, Any] = nx.spring_layout(g, seed=7, k=1.5 / max(1, len(g)) ** 0.5)
    kinds = {vid: vertex_kind(attrs["data"]) for vid, attrs in g.nodes.items()}
    for kind, colour in _COLOURS.items():
        nodes = [v for v, k in kinds.items() if k == kind]
        if nodes:
            nx.draw_networkx_nodes(
                g,
                pos,
                nodelist=nodes,
                node_color=colour,
                node_shape=_SHAPES[kind],
                node_size=1400,
                edgecolors="#444444",
                ax=ax,
                label=f"{kind}s",
            )
    labels = {vid: getattr(attrs["data"], "name", vid) for vid, attrs in g.nodes.items()}
    nx.draw_networkx_labels(g, pos, labels=labels, font_size=8, ax=ax)
    for kind, style in _STYLES.items():
        edges = [(u, v) for u, v, d in g.edges(data=True) if d["kind"] == kind]
        if edges:
            nx.draw_networkx_edges(
                g,
                pos,
                edgelist=edges,
                style=style,
                arrows=True,
                arrowsize=14,
                node_size=1400,
                ax=ax,
            )
    scores = {(u, v): f"{d['score']:g}" for u, v, d in g.edges(data=True) if d["kind"] != "has"}
    if scores:
        nx.draw_networkx_edge_labels(g, pos, edge_labels=scores, font_size=7, ax=ax)
    ax.legend(loc="upper left", fontsize=8, markerscale=0.4, frameon=False)
    return _finish(fig, show)


def _finish(fig: Figure, show: bool) -> Figure:
    if show:
        import matplotlib.pyplot as plt

        plt.show()
    return fig


def _mermaid_text(text: str) -> str:
    """``text`` made safe inside a quoted Mermaid label."""
    return " ".join(text.split()).replace('"', "#quot;")


def to_mermaid(graph: Toolkit, title: str | None = None) -> str:
    """``graph`` as a Mermaid ``flowchart LR``; vertex ids become ``a0``, ``t1``, ``g2``…

    Labels are the vertices' names (quoted, so any text is safe); scores label the
    ``next`` and ``call`` edges. Deterministic: the same graph gives the same text.
    """
    lines: list[str] = []
    if title:
        lines += ["---", f"title: {_mermaid_text(title)}", "---"]
    lines.append("flowchart LR")
    ids: dict[str, str] = {}
    by_kind: dict[str, list[str]] = {"action": [], "tool": [], "group": []}
    for index, (vid, attrs) in enumerate(graph.vertices_data()):
        kind = vertex_kind(attrs["data"])
        mid = f"{kind[0]}{index}"
        ids[vid] = mid
        by_kind[kind].append(mid)
        left, right = _MERMAID_SHAPES[kind]
        name = getattr(attrs["data"], "name", vid)
        lines.append(f"    {mid}{left}{_mermaid_text(name)}{right}")
    for u, v, data in graph.edges_data():
        arrow = _MERMAID_ARROWS[data["kind"]]
        label = "" if data["kind"] == "has" else f"|{data['score']:g}|"
        lines.append(f"    {ids[u]} {arrow}{label} {ids[v]}")
    for group_kind, members in by_kind.items():
        if members:
            lines.append(f"    classDef {group_kind} fill:{_COLOURS[group_kind]},stroke:#444444")
            lines.append(f"    class {','.join(members)} {group_kind}")
    return "\n".join(lines) + "\n"
