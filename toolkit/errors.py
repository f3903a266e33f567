"""Errors raised by ``toolkit``.

The tree::

    ToolkitError                  root of everything raised by ``tandem.toolkit``
    ├── ToolDefinitionError       a definition is wrong: a tool function, a graph edit, a YAML file,
    │   │                         an import path, a missing optional extra
    │   └── UnknownVertexError    no action/tool/group has that id; the message lists the known ids
    ├── ToolArgumentsError        arguments a model sent do not fit a tool's schema
    ├── McpCallError              an MCP tool call failed at run time: server unreachable, protocol error
    │   └── McpToolError          the server ran the tool and reported ``isError``; the message is its text
    ├── QuestionError             ``ToolCallContext.ask`` got no answer: no person can be asked here, the
    │   │                         question or its schema is malformed, the answer does not fit
    │   └── NoAnswer              no person answered within the job's ``answer_timeout_s``
    ├── SpawnError                ``ToolCallContext.spawn`` started nothing: no child jobs here, a bad
    │                             spec, or a limit (depth, fan-out) named with its setting
    └── ArtifactError             ``read_artifact`` cannot read what was asked: an unknown handle, an
                                  offset past the end, a run that keeps no artifacts

Definition mistakes are the developer's to fix and surface at load or registration time.
Argument and MCP call failures happen inside a tool call: the tool runner turns them into FAILED
results that the model reads, so their messages are written for the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches

_MAX_LISTED = 20


class ToolkitError(Exception):
    """Root of every error raised by ``tandem.toolkit``."""


class ToolDefinitionError(ToolkitError):
    """A toolkit definition is wrong (bad tool function, edge, score, YAML, import path)."""


class ToolArgumentsError(ToolkitError):
    """Arguments do not fit a tool's parameters; ``field`` and ``reason`` say where and why."""

    def __init__(self, tool: str, field: str, reason: str) -> None:
        super().__init__(f"invalid arguments for tool {tool!r}: field {field!r}: {reason}")
        self.tool = tool
        self.field = field
        self.reason = reason


class UnknownVertexError(ToolDefinitionError, LookupError):
    """No vertex of the expected kind has this id; ``vertex_id`` and ``kind`` say which."""

    def __init__(self, kind: str, vertex_id: str, known: Iterable[str]) -> None:
        names = list(known)
        super().__init__(f"unknown {kind} {vertex_id!r}; {describe_known(kind, vertex_id, names)}")
        self.kind = kind
        self.vertex_id = vertex_id


class McpCallError(ToolkitError):
    """A call to an MCP server failed: it could not be started or reached, or broke the protocol."""


class McpToolError(McpCallError):
    """The MCP server ran the tool and answered with ``isError``; the message is the server's text."""

    def __init__(self, tool: str, text: str) -> None:
        super().__init__(text or f"the MCP tool {tool!r} reported an error without a message")
        self.tool = tool
        self.text = text


class QuestionError(ToolkitError):
    """A question to a person (``ToolCallContext.ask``) got no usable answer; the message, written
    for the model, says why. A tool may catch it and go on without the answer."""


class SpawnError(ToolkitError):
    """``ToolCallContext.spawn`` started no child job; the message, written for the tool and the
    model, says why (children cannot run here, a spec is malformed, or a limit and its setting)."""


class NoAnswer(QuestionError):
    """No person answered the question within its timeout (``timeout_s`` seconds)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            f"no answer within {timeout_s:g} s: nobody answered the question in time; "
            "go on without the answer, or say what you need in the deliverable"
        )
        self.timeout_s = timeout_s


class ArtifactError(ToolkitError):
    """An artifact cannot be read as asked (the built-in ``read_artifact`` tool); the
    message, written for the model, says what was wrong and what to ask instead."""


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
