"""Tools, actions, tool groups and the toolkit graph that recommends tools per step."""

from toolkit.action import Action
from toolkit.context import InjectionMapping, ToolCallContext, injection_mapping
from toolkit.describe import describe_actions, describe_tools
from toolkit.errors import McpCallError, McpToolError, ToolkitError, UnknownVertexError
from toolkit.graph import Toolkit
from toolkit.group import StaticToolGroup, ToolGroup
from toolkit.loader import load_toolkit
from toolkit.mcp_group import McpToolGroup
from toolkit.service import ToolkitService
from toolkit.tool import Tool, tool
from toolkit.visualize import to_mermaid

__all__ = [
    "Action",
    "InjectionMapping",
    "McpCallError",
    "McpToolError",
    "McpToolGroup",
    "StaticToolGroup",
    "Tool",
    "ToolCallContext",
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
