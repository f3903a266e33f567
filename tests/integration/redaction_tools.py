"""Tools for the per-job redaction tests: ``echo`` returns its text (another job's output),
``leak`` returns and logs the job's own token (a careless tool)."""

from __future__ import annotations

import logging

from tandem.toolkit import Action, Tool, ToolCallContext, ToolkitService

log = logging.getLogger("tests.redaction_tools")


def echo(text: str) -> str:
    """Return ``text`` as it is.

    Args:
        text: what to return.
    """
    log.warning("echo: %s", text)
    return text


def leak(ctx: ToolCallContext) -> str:
    """Report (and log) the job's token."""
    log.warning("leak: the token is %s", ctx.secrets.get("tok", "(none)"))
    return f"the token is {ctx.secrets.get('tok', '(none)')}"


def _build() -> ToolkitService:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    for fn in (echo, leak):
        service.add_tool(Tool.from_function(fn), [(work, 1.0)])
    return service


toolkit = _build().get_toolkit()
