"""The benchmarks' toolkit: ``noop`` and ``sleep_tool``, loaded by workers with
``TANDEM_TOOLKIT=bench.tools:toolkit``.

Unlike the integration tests' tools these record nothing, so a tool call costs only what the
tool does (nothing, or the sleep) plus tandem's own work around it.
"""

from __future__ import annotations

import time

from tandem.toolkit import Action, Tool, ToolkitService
from tandem.toolkit.graph import Toolkit


def noop() -> str:
    """Do nothing and say so."""
    return "ok"


def sleep_tool(seconds: float) -> str:
    """Sleep, then say how long.

    Args:
        seconds: how long to sleep.
    """
    time.sleep(seconds)
    return f"slept {seconds} s"


TOOLS = (noop, sleep_tool)


def tools() -> list[Tool]:
    """The tools as ``Tool`` objects (for in-process runs)."""
    return [Tool.from_function(fn) for fn in TOOLS]


def _build() -> Toolkit:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    for tool in tools():
        service.add_tool(tool, [(work, 1.0)])
    return service.get_toolkit()


toolkit = _build()
