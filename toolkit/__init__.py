"""Tools, actions, tool groups and the toolkit graph that recommends tools per step."""

if __name__ != "tandem.toolkit":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder toolkit/, installed as the package 'tandem.toolkit': "
        "import tandem.toolkit instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

from tandem.toolkit.action import Action
from tandem.toolkit.context import InjectionMapping, Question, ToolCallContext, injection_mapping
from tandem.toolkit.describe import describe_actions, describe_tools
from tandem.toolkit.errors import (
    McpCallError,
    McpToolError,
    NoAnswer,
    QuestionError,
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
from tandem.toolkit.tool import Tool, tool
from tandem.toolkit.visualize import to_mermaid

__all__ = [
    "Action",
    "InjectionMapping",
    "McpCallError",
    "McpToolError",
    "McpToolGroup",
    "NoAnswer",
    "Question",
    "QuestionError",
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
