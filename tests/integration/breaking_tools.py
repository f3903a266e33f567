"""Tools returning huge values that are not strings, for ``test_breaking_outputs``.

Workers load them with ``TANDEM_TOOLKIT=tests.integration.breaking_tools:toolkit``: the durable
test tools (``tests.integration.tools``) plus these. Every call records itself in ``test:calls``
like the other test tools, before it builds its value.
"""

from __future__ import annotations

import time
from typing import Any

from tandem.toolkit import Tool, ToolCallContext, ToolkitService
from tests.integration import tools


def huge_dict(megabytes: int, ctx: ToolCallContext) -> dict[str, Any]:
    """Return a dict holding a string of ``megabytes`` million characters.

    Args:
        megabytes: how many million characters the value holds.
    """
    tools._record(ctx, "huge_dict", time.time())
    return {"log": "L" * (megabytes * 1_000_000), "lines": megabytes}


def huge_list(count: int, ctx: ToolCallContext) -> list[int]:
    """Return the integers from 0 to ``count`` - 1.

    Args:
        count: how many integers.
    """
    tools._record(ctx, "huge_list", time.time())
    # Built a slice at a time: ``list(range(3_000_000))`` is one C call that holds the GIL for
    # 0.1 s on a quiet machine and over 1.3 s on a loaded one (longer than a 2 s lease tolerates:
    # the lease keeper renews every third of it), and the test is about tandem's handling of the
    # value, not about a tool's own long C call (docs/durability.md: keep those short).
    value: list[int] = []
    for start in range(0, count, 50_000):
        value.extend(range(start, min(start + 50_000, count)))
    return value


def deep_nest(depth: int, ctx: ToolCallContext) -> list[Any]:
    """Return lists nested ``depth`` deep (deeper than the JSON encoder's recursion allows).

    Args:
        depth: how deep.
    """
    tools._record(ctx, "deep_nest", time.time())
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def huge_bytes(megabytes: int, ctx: ToolCallContext) -> bytes:
    """Return ``megabytes`` million bytes.

    Args:
        megabytes: how many million bytes.
    """
    tools._record(ctx, "huge_bytes", time.time())
    return b"B" * (megabytes * 1_000_000)


class _Opaque:
    """Not JSON: only its ``str`` (huge) says what it is."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __str__(self) -> str:
        return "O" * self.size

    __repr__ = __str__


def huge_object(megabytes: int, ctx: ToolCallContext) -> object:
    """Return an object that is not JSON and whose text is ``megabytes`` million characters.

    Args:
        megabytes: how many million characters its text has.
    """
    tools._record(ctx, "huge_object", time.time())
    return _Opaque(megabytes * 1_000_000)


def _build() -> ToolkitService:
    service = tools._build(durable=True)
    work = service.get_action("work")
    for fn in (huge_dict, huge_list, deep_nest, huge_bytes, huge_object):
        service.add_tool(Tool.from_function(fn), [(work, 1.0)])
    return service


toolkit = _build().get_toolkit()
