"""An MCP server whose tools answer with very long texts, for ``test_mcp_outputs`` (stdio)."""

from __future__ import annotations

import logging

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

logging.disable(logging.CRITICAL)  # the server would log each 3 MB error to the test's stderr
server = MCPServer("tandem-big")


@server.tool()
def big(chars: int) -> str:
    """Return ``chars`` characters."""
    return "x" * chars


@server.tool()
def fail_big(chars: int) -> str:
    """Fail with a message of ``chars`` characters."""
    raise ToolError("E" * chars)


if __name__ == "__main__":
    server.run()
