from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel

from tandem.toolkit import Tool, ToolCallContext, Toolkit, ToolkitService, describe_actions, describe_tools
from tandem.toolkit.describe import schema_type


class Point(BaseModel):
    x: int
    y: int = 0


def plot(
    points: list[Point],
    mode: Literal["line", "dots"] = "line",
    title: str | None = None,
    ctx: ToolCallContext | None = None,
) -> str:
    """Draw points
    on a chart.

    Args:
        points: the points to draw
        mode: how to draw
    """
    return ""


def test_describe_tools() -> None:
    mcp_like = Tool(
        "lookup",
        "Look a word up.",
        lambda **kw: "",
        schema={"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        return_direct=True,
    )
    bare = Tool("ping", "", lambda: "pong", schema={"type": "object", "properties": {}})
    assert describe_tools([Tool.from_function(plot), mcp_like, bare]) == "\n".join(
        [
            "- plot: Draw points on a chart.",
            "    points (array of {x: integer, y?: integer}, required): the points to draw",
            '    mode ("line" | "dots", optional, default "line"): how to draw',
            "    title (string | null, optional, default null)",
            "- lookup: Look a word up. (its result is the final answer)",
            "    word (string, required)",
            "- ping: (no description)",
            "    (no parameters)",
        ]
    )
    assert describe_tools([]) == ""


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "integer"}, "integer", id="scalar"),
        pytest.param({"type": ["string", "null"]}, "string | null", id="type-list"),
        pytest.param({"type": "array", "items": {"type": "number"}}, "array of number", id="array"),
        pytest.param({"type": "array"}, "array", id="bare-array"),
        pytest.param({"const": 3}, "3", id="const"),
        pytest.param({"type": "object"}, "object", id="bare-object"),
        pytest.param(
            {"type": "object", "additionalProperties": {"type": "string"}}, "object of string", id="map"
        ),
        pytest.param({}, "any", id="no-type"),
        pytest.param({"$ref": "#/$defs/Missing"}, "Missing", id="dangling-ref"),
    ],
)
def test_schema_type(schema: dict, expected: str) -> None:
    assert schema_type(schema) == expected


def test_describe_actions_on_a_recommendation(service: ToolkitService) -> None:
    sub = service.recommend_subgraph(["A1"], threshold=0.6, hops=2)
    assert describe_actions(sub, sub.actions()) == "\n".join(
        [
            "Steps:",
            "- A1: step A1",
            "    tools: T1",
            "- A2: step A2",
            "    tools: T2",
            "- A4: step A4",
            "    tools: T2",
            "Possible next steps:",
            "- A1 -> A2 (score 0.8)",
            "- A2 -> A4 (score 0.9)",
            "- A4 -> A1 (score 0.9)",
        ]
    )


def test_describe_actions_keeps_only_edges_among_the_given_actions(graph: Toolkit) -> None:
    text = describe_actions(graph, ["A1", "A3"])
    assert "- A1 -> A3 (score 0.5)" in text and "A2" not in text
    assert describe_actions(graph, []) == ""
