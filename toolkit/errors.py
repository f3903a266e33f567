"""Errors raised by ``toolkit``.

The tree::

    reasoner.errors.ConfigurationError
    └── ToolkitError              a toolkit definition is wrong: a graph edit, a YAML file, an import path
        └── UnknownVertexError    no action/tool/group has that id; the message lists the known ids
    McpCallError                  an MCP tool call failed at run time: server unreachable, protocol error
    └── McpToolError              the server ran the tool and reported ``isError``; the message is its text

Definition mistakes are the developer's to fix and surface at load or registration time.
MCP call failures happen inside a tool call: the tool runner turns them into FAILED results
that the model reads, so their messages are written for the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches

from tandem.reasoner.errors import ConfigurationError

_MAX_LISTED = 20


class ToolkitError(ConfigurationError):
    """A toolkit definition is wrong (bad edge, bad score, bad YAML, bad import path)."""


class UnknownVertexError(ToolkitError, LookupError):
    """No vertex of the expected kind has this id; ``vertex_id`` and ``kind`` say which."""

    def __init__(self, kind: str, vertex_id: str, known: Iterable[str]) -> None:
        names = list(known)
        super().__init__(f"unknown {kind} {vertex_id!r}; {describe_known(kind, vertex_id, names)}")
        self.kind = kind
        self.vertex_id = vertex_id


class McpCallError(RuntimeError):
    """A call to an MCP server failed: it could not be started or reached, or broke the protocol."""


class McpToolError(McpCallError):
    """The MCP server ran the tool and answered with ``isError``; the message is the server's text."""

    def __init__(self, tool: str, text: str) -> None:
        super().__init__(text or f"the MCP tool {tool!r} reported an error without a message")
        self.tool = tool
        self.text = text


def describe_known(kind: str, wanted: str, known: list[str]) -> str:
    """``"known actions: a, b (did you mean 'ab'?)"``, cut to a readable length."""
    if not known:
        return f"there are no {kind}s"
    shown = ", ".join(repr(k) for k in sorted(known)[:_MAX_LISTED])
    if len(known) > _MAX_LISTED:
        shown += f", … ({len(known) - _MAX_LISTED} more)"
    close = get_close_matches(wanted, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"known {kind}s: {shown}{hint}"
