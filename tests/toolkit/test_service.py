from __future__ import annotations

import logging

import pytest

from tandem.toolkit import Action, StaticToolGroup, Tool, ToolGroup, ToolkitService, UnknownVertexError
from tests.toolkit.conftest import make_tool


def test_add_action_links_both_ways_and_adds_neighbours() -> None:
    svc = ToolkitService()
    a, b, c = Action("a"), Action("b"), Action("c")
    svc.add_action(b, next_actions=[(c, 0.7)], prev_actions=[(a, 0.6)])
    graph = svc.get_toolkit()
    assert graph.vertices() == ["b", "c", "a"]
    assert graph.get_score("a", "b") == 0.6 and graph.get_score("b", "c") == 0.7


def test_add_tool_warns_about_unknown_actions(
    service: ToolkitService, actions: dict[str, Action], caplog: pytest.LogCaptureFixture
) -> None:
    tool = make_tool("T9")
    with caplog.at_level(logging.WARNING, logger="tandem.toolkit.service"):
        service.add_tool(tool, [(Action("ghost"), 0.9), (actions["A1"], 0.8)])
    assert "'ghost' is not in the toolkit" in caplog.text
    assert service.get_toolkit().get_score("A1", "T9") == 0.8
    assert "ghost" not in service.get_toolkit()


def test_add_tool_without_connections_is_not_added(
    service: ToolkitService, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tandem.toolkit.service"):
        service.add_tool(make_tool("lonely"), [])
        service.add_tool(make_tool("lost"), [(Action("ghost"), 1.0)])
    assert "'lonely' is connected to no known action" in caplog.text
    assert "lonely" not in service.get_toolkit() and "lost" not in service.get_toolkit()


def test_add_tool_group_connects_every_tool(service: ToolkitService, actions: dict[str, Action]) -> None:
    group = StaticToolGroup("pack", [make_tool("p1"), make_tool("p2")])
    service.add_tool_group(group, [(actions["A3"], 0.75)])
    graph = service.get_toolkit()
    assert graph.get_group("pack") is group
    assert graph.edge_kind("pack", "p1") == "has"
    assert graph.get_score("A3", "p2") == 0.75
    assert [t.id for t, _ in graph.tools_of("pack")] == ["p1", "p2"]


def test_a_failing_group_listing_leaves_the_toolkit_untouched(
    service: ToolkitService, actions: dict[str, Action]
) -> None:
    class Broken(ToolGroup):
        def tools(self) -> list[Tool]:
            raise RuntimeError("server down")

    before = service.get_toolkit().vertices()
    with pytest.raises(RuntimeError):
        service.add_tool_group(Broken("broken"), [(actions["A1"], 1.0)])
    assert service.get_toolkit().vertices() == before


def test_get_action_names_the_id_and_the_known_ones(service: ToolkitService) -> None:
    assert service.get_action("A2").id == "A2"
    with pytest.raises(UnknownVertexError) as info:
        service.get_action("A22")
    message = str(info.value)
    assert "unknown action 'A22'" in message
    assert "known actions: 'A1', 'A2', 'A3', 'A4'" in message
    assert "did you mean 'A2'" in message
    assert isinstance(info.value, LookupError)


def test_known_ids_are_cut_when_there_are_many() -> None:
    svc = ToolkitService()
    for i in range(30):
        svc.add_action(Action(f"step{i:02d}"))
    with pytest.raises(UnknownVertexError, match=r"\(10 more\)"):
        svc.get_action("nope")


def test_remove_tool_and_action(service: ToolkitService) -> None:
    service.remove_tool("T1")
    assert "T1" not in service.get_toolkit()
    service.remove_action("A3")
    assert "A3" not in service.get_toolkit() and "T3" not in service.get_toolkit()
    with pytest.raises(UnknownVertexError, match="unknown tool 'A1'"):
        service.remove_tool("A1")
    with pytest.raises(UnknownVertexError, match="unknown action 'T2'"):
        service.remove_action("T2")
