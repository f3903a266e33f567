"""The built-in ``spawn_jobs`` tool: a model starts child jobs and waits for their results.

Offered to the models of the tenants the operator names (``TANDEM_SPAWN_TENANTS``; ``Task.spawn_jobs``)
and run on workers only (``ToolCallContext.spawn``, docs/children.md).
"""

from __future__ import annotations

import json
from typing import Any

from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

__all__ = ["SPAWN_JOBS", "spawn_jobs", "spawn_jobs_tool"]

SPAWN_JOBS = "spawn_jobs"
"""The name of the built-in tool that lets a model start child jobs."""


def spawn_jobs(jobs: list[dict[str, Any]], wait: str = "all", *, context: ToolCallContext) -> str:
    """Start child jobs that each work on a goal of their own, and wait for their results. Use it
    to split a large task into independent parts. jobs: a list of objects, each with "goal" (what
    the child must achieve) and optionally "tools" (names of tools it may use), "reasoner" ("dual",
    "mono" or "react"), "context". wait: "all" (default), "any", or how many must end first."""
    how: Any = int(wait) if isinstance(wait, str) and wait.isdigit() else wait
    outcomes = context.spawn(jobs, wait=how)
    shown = [o.model_dump(mode="json", exclude={"usage"}) for o in outcomes]  # the spend is counted apart
    return json.dumps(shown, ensure_ascii=False)


def spawn_jobs_tool() -> Tool:
    """The built-in ``spawn_jobs`` tool (offered when the operator lets the job's tenant spawn:
    ``TANDEM_SPAWN_TENANTS``). Its wait is bounded by the job's deadline, not a tool timeout."""
    tool = Tool.from_function(spawn_jobs, name=SPAWN_JOBS)
    tool.timeout = None
    return tool
