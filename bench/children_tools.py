"""The child-job benchmark's toolkit (``bench.children``): ``fan_out`` starts child jobs and waits
for them all, ``hold`` parks its job on a question nobody answers (a child that runs until it is
cancelled, holding no worker), plus ``noop``.

Workers load it with ``TANDEM_TOOLKIT=bench.children_tools:toolkit``.
"""

from __future__ import annotations

import json

from bench.models import call, plan_goal
from bench.tools import noop
from tandem.toolkit import Action, Tool, ToolCallContext, ToolkitService
from tandem.toolkit.graph import Toolkit

CHILD_GOAL = plan_goal([[call("noop")]], "child job")
"""A child of two rounds: a ``noop`` call, then the deliverable."""
HELD_GOAL = plan_goal([[call("hold")]], "held child job")
"""A child that parks on a question in its first round and waits until it is cancelled."""
BUSY_GOAL = plan_goal([[call("noop")]] * 50, "busy child job")
"""A child of 51 rounds: busy on the workers (a model call or a ``noop``) until it is cancelled."""
GOALS = {"two_rounds": CHILD_GOAL, "question": HELD_GOAL, "busy": BUSY_GOAL}


def fan_out(n: int, kind: str, ctx: ToolCallContext) -> str:
    """Start ``n`` dual child jobs and wait for all of them; how many completed.

    Args:
        n: how many children.
        kind: ``two_rounds``, ``question`` (each waits on a question until cancelled) or ``busy``
            (51 rounds).
    """
    specs = [{"goal": GOALS[kind], "reasoner": "dual", "max_rounds": 60} for _ in range(n)]
    outcomes = ctx.spawn(specs, wait="all")
    return json.dumps(
        {"completed": sum(o.status == "completed" for o in outcomes), "children": len(outcomes)}
    )


def hold(ctx: ToolCallContext) -> str:
    """Ask a question nobody answers (the job parks until it is cancelled)."""
    return str(ctx.ask("go on?"))


def _build() -> Toolkit:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    for fn in (noop, fan_out, hold):
        tool = Tool.from_function(fn)
        tool.timeout = 600.0  # the waits are the job's, never the tool's
        service.add_tool(tool, [(work, 1.0)])
    return service.get_toolkit()


toolkit = _build()
