from __future__ import annotations

import subprocess
import sys

import pytest

from tandem.toolkit import Action, StaticToolGroup, Tool, Toolkit, ToolkitError, UnknownVertexError
from tests.toolkit.conftest import make_tool


def test_vertices_data_and_kinds(graph: Toolkit, actions: dict[str, Action], tools: dict[str, Tool]) -> None:
    data = dict(graph.vertices_data())
    assert data["A1"] == {"data": actions["A1"]}
    assert data["T2"]["data"] is tools["T2"]
    assert graph.vertices()[:4] == ["A1", "A2", "A3", "A4"]
    assert [a.id for a in graph.actions()] == ["A1", "A2", "A3", "A4"]
    assert [t.id for t in graph.tools()] == ["T1", "T2", "T3", "T4"]
    assert graph.get_action("T1") is None and graph.get_tool("A1") is None
    assert graph.get_tool("T1") is tools["T1"] and graph.get_action("nope") is None


def test_edge_kinds_and_scores(graph: Toolkit) -> None:
    assert graph.edge_kind("A1", "A2") == "next"
    assert graph.edge_kind("A1", "T1") == "call"
    assert graph.get_score("A1", "A3") == 0.5
    assert graph.get_score("A3", "A1") == 1.0  # no such edge
    graph.set_score("A1", "A3", 0.25)
    assert graph.get_score("A1", "A3") == 0.25
    assert graph.edges_data()[0][2].keys() == {"kind", "score"}


@pytest.mark.parametrize(
    ("u", "v", "score", "message"),
    [
        pytest.param("T1", "A1", 1.0, "no edge may go from tool", id="tool-to-action"),
        pytest.param("T1", "T2", 1.0, "no edge may go from tool", id="tool-to-tool"),
        pytest.param("A1", "A9", 1.0, "unknown vertex 'A9'", id="unknown-end"),
        pytest.param("A1", "A2", 1.5, "must be in", id="score-above-1"),
        pytest.param("A1", "A2", -0.1, "must be in", id="negative-score"),
        pytest.param("A1", "A2", True, "must be a number", id="bool-score"),
    ],
)
def test_add_edge_refuses(graph: Toolkit, u: str, v: str, score: float, message: str) -> None:
    with pytest.raises(ToolkitError, match=message):
        graph.add_edge(u, v, score)


def test_set_score_needs_an_edge(graph: Toolkit) -> None:
    with pytest.raises(ToolkitError, match="no edge 'A3' -> 'A1'"):
        graph.set_score("A3", "A1", 0.5)


def test_add_vertex_checks(graph: Toolkit) -> None:
    with pytest.raises(ToolkitError, match="pass data="):
        graph.add_vertex("x")
    with pytest.raises(ToolkitError, match="own id is 'A1'"):
        graph.add_vertex("other", data=Action("A1", "A1", ""))
    with pytest.raises(ToolkitError, match="already names an action"):
        graph.add_vertex("A1", data=make_tool("A1"))
    with pytest.raises(ToolkitError, match="holds an Action"):
        graph.add_vertex("s", data="s")


def test_readding_an_action_replaces_data_and_keeps_edges(graph: Toolkit) -> None:
    graph.add_vertex("A1", data=Action("A1", "A1", "new text"))
    assert graph.get_action("A1").description == "new text"  # type: ignore[union-attr]
    assert graph.edge_kind("A1", "A2") == "next"


def test_removing_an_action_removes_tools_only_it_called(graph: Toolkit) -> None:
    graph.remove_vertex("A3")
    assert "A3" not in graph and "T3" not in graph
    assert graph.get_score("A1", "A3") == 1.0


def test_tool_shared_by_two_actions_survives_removing_one(graph: Toolkit) -> None:
    graph.remove_vertex("A2")
    assert "T2" in graph  # A4 still calls it
    assert "T4" not in graph  # only A2 called it
    assert [a.id for a, _ in graph.callers("T2")] == ["A4"]
    graph.remove_vertex("A4")
    assert "T2" not in graph


def test_tool_held_by_a_group_survives_its_only_caller(graph: Toolkit) -> None:
    group = StaticToolGroup("g", [make_tool("G1")])
    graph.add_vertex("g", data=group)
    graph.add_vertex("G1", data=group.tools()[0])
    graph.add_edge("g", "G1")
    graph.add_edge("A3", "G1", 0.7)
    graph.remove_vertex("A3")
    assert "G1" in graph


def test_removing_a_group_removes_its_tools(graph: Toolkit) -> None:
    group = StaticToolGroup("g", [make_tool("G1"), make_tool("G2")])
    graph.add_vertex("g", data=group)
    for t in group.tools():
        graph.add_vertex(t.id, data=t)
        graph.add_edge("g", t.id)
        graph.add_edge("A1", t.id, 0.9)
    graph.remove_vertex("g")
    assert "G1" not in graph and "G2" not in graph and "T1" in graph


def test_removing_a_tool_removes_only_it(graph: Toolkit) -> None:
    graph.remove_vertex("T2")
    assert "T2" not in graph and "A2" in graph and "A4" in graph


def test_remove_unknown_vertex(graph: Toolkit) -> None:
    with pytest.raises(UnknownVertexError, match="unknown vertex 'Z'"):
        graph.remove_vertex("Z")


def test_update_merges_and_takes_other_scores(graph: Toolkit) -> None:
    other = Toolkit()
    a1, a5 = Action("A1", "A1", "replaced"), Action("A5", "A5", "")
    other.add_vertex("A1", data=a1)
    other.add_vertex("A5", data=a5)
    other.add_vertex("A2", data=graph.get_action("A2"))
    other.add_edge("A1", "A5", 0.4)
    other.add_edge("A1", "A2", 0.1)
    before = len(graph)
    graph.update(other)
    assert len(graph) == before + 1
    assert graph.get_action("A1") is a1
    assert graph.get_score("A1", "A5") == 0.4
    assert graph.get_score("A1", "A2") == 0.1
    assert graph.get_score("A1", "A3") == 0.5  # untouched


def test_update_refuses_a_kind_clash(graph: Toolkit) -> None:
    other = Toolkit()
    other.add_vertex("A1", data=make_tool("A1"))
    with pytest.raises(ToolkitError, match="already names an action"):
        graph.update(other)


def test_subgraph_keeps_given_vertices_and_edges_among_them(graph: Toolkit) -> None:
    sub = graph.subgraph(["A2", "A1", "T2", "T4"])
    assert sub.vertices() == ["A2", "A1", "T2", "T4"]
    assert sorted(sub.edges()) == [("A1", "A2"), ("A2", "T2"), ("A2", "T4")]
    assert sub.get_score("A2", "T4") == 0.3
    with pytest.raises(UnknownVertexError):
        graph.subgraph(["A1", "nope"])


def test_nx_graph_is_read_only(graph: Toolkit) -> None:
    view = graph.nx_graph
    assert view.number_of_nodes() == len(graph)
    with pytest.raises(Exception, match="Frozen"):
        view.add_node("x")


def test_repr_counts(graph: Toolkit) -> None:
    assert repr(graph) == "Toolkit(actions=4, tools=4, groups=0, edges=9)"


def test_action_forms() -> None:
    assert Action("a", "b", "c") == Action(id="a", name="b", description="c")
    assert Action(name="x").id == "x"
    assert Action("y").name == "y"
    with pytest.raises(ToolkitError):
        Action()


def test_adjacency_is_read_only_at_both_levels(graph: Toolkit) -> None:
    adjacency = graph.adjacency
    assert dict(adjacency["A1"]) == {v: graph.adjacency["A1"][v] for v in adjacency["A1"]}
    with pytest.raises(TypeError):
        adjacency["A1"]["A9"] = {"kind": "next", "score": 1.0}  # type: ignore[index]
    with pytest.raises(TypeError):
        adjacency["A9"] = {}  # type: ignore[index]


def test_removing_a_vertex_removes_its_edges_both_ways(graph: Toolkit) -> None:
    before = graph.edges()
    graph.remove_vertex("A2")
    assert "A2" not in graph
    assert graph.edges() == [(u, v) for u, v in before if "A2" not in (u, v) and v in graph and u in graph]
    assert all("A2" not in targets for targets in graph.adjacency.values())
    assert repr(graph).endswith(f"edges={len(graph.edges())})")


def test_loading_a_toolkit_does_not_import_networkx() -> None:
    """A worker builds its toolkit as it starts; networkx (all its algorithms, ~0.2 s of CPU) is
    imported only for ``nx_graph`` (drawing)."""
    code = (
        "import sys\n"
        "import tandem.toolkit.loader\n"
        "from tests.integration.tools import toolkit\n"
        "assert len(toolkit.vertices()) > 0 and toolkit.adjacency\n"
        "print('networkx' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
