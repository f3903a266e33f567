from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import pytest

from tandem.toolkit import Action, StaticToolGroup, Toolkit, ToolkitService, to_mermaid
from tandem.toolkit.errors import ToolDefinitionError
from tests.toolkit.conftest import make_tool

matplotlib.use("Agg")


def small() -> Toolkit:
    svc = ToolkitService()
    plan, act = Action("plan", "plan", ""), Action("act", 'act "now"', "")
    svc.add_action(plan, next_actions=[(act, 0.8)])
    svc.add_tool(make_tool("search"), [(plan, 0.75)])
    svc.add_tool_group(StaticToolGroup("files", [make_tool("read")]), [(act, 1.0)])
    return svc.get_toolkit()


def test_mermaid() -> None:
    assert to_mermaid(small(), title="demo") == "\n".join(
        [
            "---",
            "title: demo",
            "---",
            "flowchart LR",
            '    a0(["plan"])',
            '    a1(["act #quot;now#quot;"])',
            '    t2[["search"]]',
            '    g3{{"files"}}',
            '    t4[["read"]]',
            "    a0 -->|0.8| a1",
            "    a0 -.->|0.75| t2",
            "    a1 -.->|1| t4",
            "    g3 --- t4",
            "    classDef action fill:#9cc3f5,stroke:#444444",
            "    class a0,a1 action",
            "    classDef tool fill:#a8e0a0,stroke:#444444",
            "    class t2,t4 tool",
            "    classDef group fill:#f7c98b,stroke:#444444",
            "    class g3 group",
            "",
        ]
    )
    assert to_mermaid(Toolkit()) == "flowchart LR\n"


def test_visualize_returns_a_figure(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    fig = ToolkitService().visualize(small(), "demo")
    assert isinstance(fig, Figure)
    assert fig.axes[0].get_title() == "demo"
    fig.savefig(tmp_path / "toolkit.png")
    assert (tmp_path / "toolkit.png").stat().st_size > 1000
    assert isinstance(ToolkitService().visualize(Toolkit(), "empty"), Figure)


def test_visualize_without_matplotlib_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ToolDefinitionError, match=r"pip install 'tandem-llm\[viz\]'"):
        ToolkitService().visualize(small(), "demo")
