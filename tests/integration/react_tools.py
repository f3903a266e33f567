"""The toolkit of the react integration tests: ``TANDEM_TOOLKIT=tests.integration.react_tools:toolkit``.

The tools of ``tests.integration.tools`` (each records its call, with the worker's pid, in Redis)
plus ``finish``, a ``return_direct`` tool whose output ends a ReAct job.
"""

from __future__ import annotations

import time

from tandem.toolkit import Action, Tool, ToolCallContext, ToolkitService
from tests.integration.tools import _record, add, boom, sleep_tool


def finish(answer: str, ctx: ToolCallContext) -> str:
    """Give the final answer to the user.

    Args:
        answer: the answer.
    """
    _record(ctx, "finish", time.time())
    return f"FINAL: {answer}"


def _build() -> ToolkitService:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    for tool in (
        Tool.from_function(sleep_tool),
        Tool.from_function(add),
        Tool.from_function(boom),
        Tool.from_function(finish, return_direct=True),
    ):
        service.add_tool(tool, [(work, 1.0)])
    return service


toolkit = _build().get_toolkit()
