"""Shared toolkit fixtures: a small hand-built graph with a cycle, a shared tool and a cut edge.

::

    A1 --0.8--> A2 --0.9--> A4 --0.9--> A1        (a cycle)
    A1 --0.5--> A3
    A1 -0.9-> T1    A2 -0.7-> T2    A2 -0.3-> T4    A3 -0.9-> T3    A4 -0.6-> T2 (shared)
"""

from __future__ import annotations

import pytest

from tandem.toolkit import Action, Tool, Toolkit, ToolkitService


def make_tool(name: str) -> Tool:
    def fn(x: int = 0) -> int:
        return x

    return Tool.from_function(fn, name=name, description=f"tool {name}")


@pytest.fixture
def actions() -> dict[str, Action]:
    return {n: Action(n, n, f"step {n}") for n in ("A1", "A2", "A3", "A4")}


@pytest.fixture
def tools() -> dict[str, Tool]:
    return {n: make_tool(n) for n in ("T1", "T2", "T3", "T4")}


@pytest.fixture
def service(actions: dict[str, Action], tools: dict[str, Tool]) -> ToolkitService:
    svc = ToolkitService()
    a = actions
    svc.add_action(a["A1"], next_actions=[(a["A2"], 0.8), (a["A3"], 0.5)], prev_actions=[])
    svc.add_action(a["A2"], next_actions=[(a["A4"], 0.9)], prev_actions=[])
    svc.add_action(a["A4"], next_actions=[(a["A1"], 0.9)], prev_actions=[])
    svc.add_tool(tools["T1"], [(a["A1"], 0.9)])
    svc.add_tool(tools["T2"], [(a["A2"], 0.7), (a["A4"], 0.6)])
    svc.add_tool(tools["T3"], [(a["A3"], 0.9)])
    svc.add_tool(tools["T4"], [(a["A2"], 0.3)])
    return svc


@pytest.fixture
def graph(service: ToolkitService) -> Toolkit:
    return service.get_toolkit()
