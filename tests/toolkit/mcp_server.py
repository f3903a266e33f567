"""A small real MCP server for the toolkit tests, built on the installed ``mcp`` SDK.

Run over stdio (the default) or streamable HTTP::

    python tests/toolkit/mcp_server.py                 # stdio
    python tests/toolkit/mcp_server.py --http 8765     # http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tandem-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str = "boom") -> str:
    """Always fails with the given reason."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def slow(seconds: float) -> str:
    """Sleep for ``seconds`` and say so."""
    time.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def stats(values: list[float]) -> dict[str, float]:
    """The count and sum of ``values`` (a structured result)."""
    return {"count": float(len(values)), "total": float(sum(values))}


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
