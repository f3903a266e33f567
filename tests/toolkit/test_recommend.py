from __future__ import annotations

import pytest

from tandem.toolkit import Action, ToolkitError, ToolkitService, UnknownVertexError


def ids(items: list) -> list[str]:
    return [i.id for i in items]


@pytest.mark.parametrize(
    ("starts", "threshold", "hops", "want_actions", "want_tools"),
    [
        pytest.param(["A1"], 0.6, 0, ["A1"], ["T1"], id="hops-0"),
        pytest.param(["A1"], 0.6, 1, ["A1", "A2"], ["T1", "T2"], id="hops-1-cuts-A3-and-T4"),
        pytest.param(["A1"], 0.6, 2, ["A1", "A2", "A4"], ["T1", "T2"], id="hops-2-shared-tool-once"),
        pytest.param(["A1"], 0.5, 1, ["A1", "A2", "A3"], ["T1", "T2", "T3"], id="threshold-is-inclusive"),
        pytest.param(["A1"], 0.95, 3, ["A1"], [], id="threshold-cuts-everything"),
        pytest.param(["A3", "A1"], 0.6, 0, ["A3", "A1"], ["T3", "T1"], id="two-starts-in-given-order"),
        pytest.param(["A2", "A1"], 0.6, 1, ["A2", "A1", "A4"], ["T2", "T1"], id="two-starts-hop"),
        pytest.param(["A1"], 0.0, 0, ["A1"], ["T1"], id="threshold-0-hops-0"),
        pytest.param(["A2"], 0.2, 0, ["A2"], ["T2", "T4"], id="low-threshold-keeps-weak-call"),
        pytest.param(["A1"], 0.6, 50, ["A1", "A2", "A4"], ["T1", "T2"], id="cycle-terminates"),
    ],
)
def test_recommend_tools_actions(
    service: ToolkitService,
    starts: list[str],
    threshold: float,
    hops: int,
    want_actions: list[str],
    want_tools: list[str],
) -> None:
    tools, actions = service.recommend_tools_actions(starts, threshold=threshold, hops=hops)
    assert ids(actions) == want_actions
    assert ids(tools) == want_tools


def test_subgraph_holds_only_edges_at_or_above_threshold(service: ToolkitService) -> None:
    sub = service.recommend_subgraph(["A1"], threshold=0.6, hops=2)
    assert sorted(sub.edges()) == sorted(
        [("A1", "A2"), ("A1", "T1"), ("A2", "A4"), ("A2", "T2"), ("A4", "A1"), ("A4", "T2")]
    )
    assert sub.get_score("A2", "A4") == 0.9
    assert sub.edge_kind("A4", "A1") == "next"
    assert sub.edge_kind("A2", "T2") == "call"


def test_edge_back_to_an_earlier_action_is_kept_even_if_not_walked(service: ToolkitService) -> None:
    sub = service.recommend_subgraph(["A4", "A1"], threshold=0.6, hops=0)
    assert ("A4", "A1") in sub.edges()


def test_start_actions_accept_objects_and_ids_and_deduplicate(
    service: ToolkitService, actions: dict[str, Action]
) -> None:
    _, got = service.recommend_tools_actions([actions["A1"], "A1", "A3"], threshold=0.6)
    assert ids(got) == ["A1", "A3"]


def test_result_is_independent_of_the_source(service: ToolkitService) -> None:
    sub = service.recommend_subgraph(["A1"], threshold=0.6, hops=1)
    sub.set_score("A1", "A2", 0.1)
    sub.remove_vertex("A2")
    assert service.get_toolkit().get_score("A1", "A2") == 0.8
    assert "A2" in service.get_toolkit()


def test_unknown_start_action_names_it_and_the_known_ones(service: ToolkitService) -> None:
    with pytest.raises(UnknownVertexError) as info:
        service.recommend_subgraph(["A9"])
    message = str(info.value)
    assert "'A9'" in message and "'A1'" in message and "'A4'" in message


def test_a_tool_id_is_not_a_start_action(service: ToolkitService) -> None:
    with pytest.raises(UnknownVertexError, match="unknown action 'T1'"):
        service.recommend_subgraph(["T1"])


@pytest.mark.parametrize(
    ("threshold", "hops"),
    [pytest.param(1.5, 0, id="threshold-above-1"), pytest.param(0.5, -1, id="negative-hops")],
)
def test_bad_parameters_are_refused(service: ToolkitService, threshold: float, hops: int) -> None:
    with pytest.raises(ToolkitError):
        service.recommend_subgraph(["A1"], threshold=threshold, hops=hops)


def test_groups_are_not_recommended_but_their_tools_are(actions: dict[str, Action]) -> None:
    from tandem.toolkit import StaticToolGroup
    from tests.toolkit.conftest import make_tool

    svc = ToolkitService()
    svc.add_action(actions["A1"])
    svc.add_tool_group(StaticToolGroup("g", [make_tool("x"), make_tool("y")]), [(actions["A1"], 0.8)])
    tools, acts = svc.recommend_tools_actions(["A1"])
    assert ids(tools) == ["x", "y"] and ids(acts) == ["A1"]
    assert "g" not in svc.recommend_subgraph(["A1"])


def test_recommendation_on_a_large_graph_is_fast() -> None:
    import statistics
    import time

    from bench.toolkit import build

    svc = ToolkitService(build())
    timings = []
    for start in ("a1", "a42", "a4242", "a9999", "a7"):
        t0 = time.perf_counter()
        sub = svc.recommend_subgraph([start], threshold=0.5, hops=3)
        timings.append(time.perf_counter() - t0)
        assert start in sub
    assert statistics.median(timings) < 0.05
