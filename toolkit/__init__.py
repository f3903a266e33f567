"""Tools, actions, tool groups and the toolkit graph that recommends tools per step.

Names load on first use, so a module that needs one piece (``redaction``, ``errors``) does not
import the graph, YAML loading or MCP: the client side imports it without them.
"""

from __future__ import annotations

if __name__ != "tandem.toolkit":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder toolkit/, installed as the package 'tandem.toolkit': "
        "import tandem.toolkit instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

from typing import TYPE_CHECKING

from tandem._lazy import lazy_exports

# Loaded now, not on first use: importing the submodule ``tandem.toolkit.tool`` binds the package's
# attribute ``tool`` to that module, and only an import here rebinds it to the decorator after that.
from tandem.toolkit.tool import Tool, tool

_EXPORTS: dict[str, str] = {
    "Action": "tandem.toolkit.action",
    "InjectionMapping": "tandem.toolkit.context",
    "McpCallError": "tandem.toolkit.errors",
    "McpToolError": "tandem.toolkit.errors",
    "McpToolGroup": "tandem.toolkit.mcp_group",
    "NoAnswer": "tandem.toolkit.errors",
    "Question": "tandem.toolkit.context",
    "QuestionError": "tandem.toolkit.errors",
    "StaticToolGroup": "tandem.toolkit.group",
    "ToolArgumentsError": "tandem.toolkit.errors",
    "ToolCallContext": "tandem.toolkit.context",
    "ToolDefinitionError": "tandem.toolkit.errors",
    "ToolGroup": "tandem.toolkit.group",
    "Toolkit": "tandem.toolkit.graph",
    "ToolkitError": "tandem.toolkit.errors",
    "ToolkitService": "tandem.toolkit.service",
    "UnknownVertexError": "tandem.toolkit.errors",
    "ChildOutcome": "tandem.toolkit.children",
    "ChildSpec": "tandem.toolkit.children",
    "SpawnError": "tandem.toolkit.errors",
    "describe_actions": "tandem.toolkit.describe",
    "describe_tools": "tandem.toolkit.describe",
    "injection_mapping": "tandem.toolkit.context",
    "load_toolkit": "tandem.toolkit.loader",
    "to_mermaid": "tandem.toolkit.visualize",
}

__all__ = [
    "Action",
    "ChildOutcome",
    "ChildSpec",
    "InjectionMapping",
    "McpCallError",
    "McpToolError",
    "McpToolGroup",
    "NoAnswer",
    "Question",
    "QuestionError",
    "SpawnError",
    "StaticToolGroup",
    "Tool",
    "ToolArgumentsError",
    "ToolCallContext",
    "ToolDefinitionError",
    "ToolGroup",
    "Toolkit",
    "ToolkitError",
    "ToolkitService",
    "UnknownVertexError",
    "describe_actions",
    "describe_tools",
    "injection_mapping",
    "load_toolkit",
    "to_mermaid",
    "tool",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors only
    from tandem.toolkit.action import Action
    from tandem.toolkit.children import ChildOutcome, ChildSpec
    from tandem.toolkit.context import InjectionMapping, Question, ToolCallContext, injection_mapping
    from tandem.toolkit.describe import describe_actions, describe_tools
    from tandem.toolkit.errors import (
        McpCallError,
        McpToolError,
        NoAnswer,
        QuestionError,
        SpawnError,
        ToolArgumentsError,
        ToolDefinitionError,
        ToolkitError,
        UnknownVertexError,
    )
    from tandem.toolkit.graph import Toolkit
    from tandem.toolkit.group import StaticToolGroup, ToolGroup
    from tandem.toolkit.loader import load_toolkit
    from tandem.toolkit.mcp_group import McpToolGroup
    from tandem.toolkit.service import ToolkitService
    from tandem.toolkit.visualize import to_mermaid


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
