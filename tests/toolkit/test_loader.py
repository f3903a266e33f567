from __future__ import annotations

import logging
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tandem.toolkit import McpToolGroup, Tool, Toolkit, ToolkitError, ToolkitService, load_toolkit

SERVER = str(Path(__file__).with_name("mcp_server.py"))

TOOLS_MODULE = '''
from tandem.toolkit import Action, Tool, Toolkit, ToolkitService, tool


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def search(query: str) -> str:
    """Search the docs."""
    return query


@tool(timeout=5)
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


NOT_CALLABLE = 42


def _build() -> Toolkit:
    svc = ToolkitService()
    svc.add_action(Action("only", "only", "the only step"))
    svc.add_tool(Tool.from_function(add), [(Action("only"), 0.9)])
    return svc.get_toolkit()


TOOLKIT = _build()
SERVICE = ToolkitService(TOOLKIT)
make_toolkit = _build


def not_a_toolkit() -> int:
    return 1
'''


@pytest.fixture
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The name of a fresh tools module importable from ``tmp_path``."""
    name = f"tandem_test_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TOOLS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.fixture
def write(tmp_path: Path, mod: str) -> Callable[[str], Path]:
    def write_yaml(text: str) -> Path:
        path = tmp_path / "toolkit.yaml"
        path.write_text(textwrap.dedent(text).replace("MOD", mod))
        return path

    return write_yaml


def test_happy_path(write: Callable[[str], Path], caplog: pytest.LogCaptureFixture) -> None:
    path = write(
        f"""
        tools:
          - function: MOD:add
          - name: search_docs
            function: MOD:search
            description: Find pages in the docs
            timeout: 7
            return_direct: true
          - function: MOD:shout
          - {{name: yell, function: MOD:shout}}
          - function: MOD:search
            name: unused
        groups:
          - name: files
            mcp:
              {{transport: stdio, command: {sys.executable!r}, args: [{SERVER!r}], timeout: 20, prefix: f_}}
        actions:
          - name: compute
            description: Do the arithmetic the task needs
            tools: [add, {{tool: search_docs, score: 0.7}}, {{group: files, score: 0.9}}]
            next: [{{action: report, score: 0.8}}]
          - name: report
            description: Write the answer
            tools: [add, shout, yell]
            next: [compute]
        """
    )
    with caplog.at_level(logging.WARNING, logger="tandem.toolkit.loader"):
        graph = load_toolkit(path)
    assert "'unused' is called by no action" in caplog.text
    assert [a.id for a in graph.actions()] == ["compute", "report"]
    assert graph.get_action("compute").description == "Do the arithmetic the task needs"  # type: ignore[union-attr]
    search = graph.get_tool("search_docs")
    assert search is not None and search.timeout == 7 and search.return_direct
    assert search.description == "Find pages in the docs"
    assert graph.get_tool("shout").timeout == 5  # type: ignore[union-attr]
    assert graph.get_tool("yell").name == "yell"  # type: ignore[union-attr]
    assert graph.get_tool("yell").invoke({"text": "hi"}) == "HI"  # type: ignore[union-attr]
    # one vertex for a tool named by two actions
    assert sorted(a.id for a, _ in graph.callers("add")) == ["compute", "report"]
    # the group and all its tools, each called by 'compute' at the group's score
    group = graph.get_group("files")
    assert isinstance(group, McpToolGroup)
    assert [t.id for t, _ in graph.tools_of("files")] == ["f_add", "f_fail", "f_slow", "f_stats"]
    assert graph.get_score("compute", "f_stats") == 0.9
    assert graph.get_score("compute", "search_docs") == 0.7
    assert graph.get_score("compute", "add") == 1.0
    assert graph.get_score("compute", "report") == 0.8
    assert graph.edge_kind("report", "compute") == "next"
    assert graph.get_tool("f_add").invoke({"a": 1, "b": 2}) == "3"  # type: ignore[union-attr]


def test_rows_are_not_chained_implicitly(write: Callable[[str], Path]) -> None:
    graph = load_toolkit(write("actions: [{name: a}, {name: b}, {name: c}]"))
    assert graph.edges() == []
    assert load_toolkit(write("")).vertices() == []


def test_requires_approval_from_yaml(write: Callable[[str], Path]) -> None:
    graph = load_toolkit(
        write(
            """
            tools:
              - {function: MOD:add, requires_approval: true}
              - {name: yell, function: MOD:shout, requires_approval: true}
              - function: MOD:search
            """
        )
    )
    assert graph.get_tool("add").requires_approval  # type: ignore[union-attr]
    assert graph.get_tool("yell").requires_approval  # type: ignore[union-attr]
    assert not graph.get_tool("search").requires_approval  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("yaml_text", "fragments"),
    [
        pytest.param(
            "actions: [{name: a, tools: [nope]}]",
            ["action 'a'", "tools[0]", "unknown tool 'nope'", "no tools are declared"],
            id="unknown-tool",
        ),
        pytest.param(
            "tools: [{function: 'MOD:add'}]\nactions: [{name: a, tools: [{tool: ad}]}]",
            ["unknown tool 'ad'", "known tools: 'add'"],
            id="unknown-tool-lists-known",
        ),
        pytest.param(
            "actions: [{name: a, tools: [{group: g}]}]",
            ["action 'a'", "unknown group 'g'"],
            id="unknown-group",
        ),
        pytest.param(
            "actions: [{name: a, next: [{action: b, score: 0.5}]}]",
            ["action 'a'", "next[0]", "unknown action 'b'", "known actions: 'a'"],
            id="unknown-next-action",
        ),
        pytest.param(
            "tools: [{function: 'no_such_module_xyz:f'}]",
            ["tools[0]", "no module named 'no_such_module_xyz'"],
            id="module-missing",
        ),
        pytest.param(
            "tools: [{function: 'MOD:add', requires_approval: 'yes'}]",
            ["tools[0]", "'requires_approval' must be true or false, got 'yes'"],
            id="requires-approval-not-bool",
        ),
        pytest.param(
            "tools: [{function: 'MOD:missing'}]",
            ["tools[0]", "has no attribute 'missing'"],
            id="attribute-missing",
        ),
        pytest.param(
            "tools: [{function: 'MOD:NOT_CALLABLE'}]",
            ["tools[0]", "is a int, not a function or a Tool"],
            id="not-callable",
        ),
        pytest.param(
            "tools: [{function: 'MOD'}]",
            ["tools[0]", "not an import path"],
            id="import-path-without-colon",
        ),
        pytest.param(
            "tools: [{function: 'MOD:add'}, {function: 'MOD:add'}]",
            ["tools[1]", "'add' is already used by a tool"],
            id="duplicate-tool",
        ),
        pytest.param(
            "actions: [{name: a}, {name: a}]",
            ["actions[1]", "'a' is already used by an action"],
            id="duplicate-action",
        ),
        pytest.param(
            "tools: [{function: 'MOD:add'}]\nactions: [{name: add}]",
            ["action 'add'", "already used by a tool"],
            id="action-named-like-a-tool",
        ),
        pytest.param(
            "actions: [{name: a}, {name: b, next: [{action: a, score: 1.5}]}]",
            ["action 'b'", "next[0]", "must be in [0, 1], got 1.5"],
            id="score-above-1",
        ),
        pytest.param(
            "tools: [{function: 'MOD:add'}]\nactions: [{name: a, tools: [{tool: add, score: high}]}]",
            ["action 'a'", "tools[0]", "must be a number in [0, 1], got 'high'"],
            id="score-not-a-number",
        ),
        pytest.param("actions: [{name: a, next: [b]", ["not valid YAML"], id="malformed-yaml"),
        pytest.param("- just a list", ["top level", "expected a mapping"], id="top-level-list"),
        pytest.param("actions: {a: 1}", ["actions", "expected a list"], id="actions-not-a-list"),
        pytest.param("tools: [add]", ["tools[0]", "expected a mapping"], id="tool-row-not-a-mapping"),
        pytest.param("actoins: []", ["unknown keys ['actoins']"], id="unknown-top-key"),
        pytest.param(
            "actions: [{name: a, descripton: x}]",
            ["actions[0]", "unknown keys ['descripton']"],
            id="typo-key",
        ),
        pytest.param("actions: [{description: x}]", ["actions[0]", "'name' must be"], id="action-no-name"),
        pytest.param(
            "tools: [{function: 'MOD:add', timeout: -1}]", ["tools[0]", "'timeout' must be"], id="bad-timeout"
        ),
        pytest.param(
            "tools: [{function: 'MOD:add', name: 'bad name!'}]",
            ["tools[0]", "is not usable"],
            id="bad-tool-name",
        ),
        pytest.param(
            "groups: [{name: g, mcp: {transport: stdio}}]",
            ["groups[0] 'g'", "needs a command"],
            id="group-without-command",
        ),
        pytest.param(
            "groups: [{name: g, mcp: {command: x, bogus: 1}}]",
            ["groups[0] 'g' mcp", "unknown keys ['bogus']"],
            id="group-unknown-mcp-key",
        ),
        pytest.param(
            "groups: [{name: g, mcp: {command: 5}}]",
            ["groups[0] 'g' mcp", "'command' must be a non-empty string"],
            id="group-command-not-a-string",
        ),
        pytest.param(
            "groups: [{name: g, mcp: {command: /nonexistent/server, timeout: 5}}]",
            ["group 'g'", "listing its tools failed"],
            id="group-server-broken",
        ),
    ],
)
def test_errors_name_the_item_and_the_file(
    write: Callable[[str], Path], mod: str, yaml_text: str, fragments: list[str]
) -> None:
    path = write(yaml_text)
    with pytest.raises(ToolkitError) as info:
        load_toolkit(path)
    message = str(info.value)
    assert "toolkit.yaml" in message
    for fragment in fragments:
        assert fragment.replace("MOD", mod) in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match="does not exist"):
        load_toolkit(tmp_path / "nope.yaml")


@pytest.mark.parametrize("attr", ["TOOLKIT", "SERVICE", "make_toolkit"])
def test_module_attr_reference(mod: str, attr: str) -> None:
    graph = load_toolkit(f"{mod}:{attr}")
    assert isinstance(graph, Toolkit)
    assert [t.name for t in graph.tools()] == ["add"]


def test_module_attr_reference_errors(mod: str) -> None:
    with pytest.raises(ToolkitError, match="gave int, not a Toolkit"):
        load_toolkit(f"{mod}:not_a_toolkit")
    with pytest.raises(ToolkitError, match="has no attribute 'nothing'"):
        load_toolkit(f"{mod}:nothing")
    with pytest.raises(ToolkitError, match="no module named"):
        load_toolkit("no_such_pkg_xyz.mod:tk")


def test_a_decorated_tool_is_used_as_it_is(write: Callable[[str], Path], mod: str) -> None:
    graph = load_toolkit(write("tools: [{function: 'MOD:shout'}]\nactions: [{name: a, tools: [shout]}]"))
    assert graph.get_tool("shout") is sys.modules[mod].shout
    assert isinstance(graph.get_tool("shout"), Tool)


def test_service_round_trip(write: Callable[[str], Path]) -> None:
    graph = load_toolkit(
        write(
            """
            tools: [{function: 'MOD:add'}]
            actions:
              - {name: a, tools: [add], next: [{action: b, score: 0.4}]}
              - {name: b}
            """
        )
    )
    tools, actions = ToolkitService(graph).recommend_tools_actions(["a"], threshold=0.5, hops=1)
    assert [t.name for t in tools] == ["add"] and [a.id for a in actions] == ["a"]


def test_at_most_once_from_yaml(write: Callable[[str], Path]) -> None:
    path = write(
        """
        tools:
          - {function: MOD:add, at_most_once: true}
          - {function: MOD:shout, at_most_once: true}
          - function: MOD:search
        """
    )
    tools = {t.name: t for t in load_toolkit(path).tools()}
    assert tools["add"].at_most_once and tools["shout"].at_most_once
    assert not tools["search"].at_most_once


def test_at_most_once_must_be_a_boolean(write: Callable[[str], Path]) -> None:
    path = write(
        """
        tools:
          - {function: MOD:add, at_most_once: "yes"}
        """
    )
    with pytest.raises(ToolkitError, match=r"'at_most_once' must be true or false, got 'yes'"):
        load_toolkit(path)
