"""Tools for ``test_children``: a tool that spawns child jobs and waits for them, and one that holds
its worker right after the children are created (before the job parks), so the test can SIGKILL
that worker mid-spawn.

Workers load it with ``TANDEM_TOOLKIT=tests.integration.children_tools:toolkit``.
"""

from __future__ import annotations

import json
import os
import time

from redis import Redis

from tandem.toolkit import Tool, ToolCallContext
from tests.integration.tools import _build, _record

HOLD_SECONDS = 60.0
"""How long ``fan_out_held`` holds its worker on its first attempt (the test kills it meanwhile)."""
GATE = "test:gate"
"""The key that lets ``wait_for_gate`` return (the test sets it)."""


def fan_out(goals: list[str], ctx: ToolCallContext, max_rounds: int = 4, endless: bool = False) -> str:
    """Start one mono child job per goal and wait for all of them; their outcomes as JSON.
    ``endless``: the children never deliver (their goals get the plan model's NEVER_DONE here,
    not in the parent's goal, which would make the parent never call this tool)."""
    _record(ctx, "fan_out_run", time.time())
    goals = [f"NEVER_{'DONE'} {g}" if endless else g for g in goals]
    specs = [{"goal": g, "reasoner": "mono", "max_rounds": max_rounds} for g in goals]
    outcomes = ctx.spawn(specs, wait="all")
    _record(ctx, "fan_out", time.time(), children=[o.job_id for o in outcomes])
    return json.dumps([o.model_dump() for o in outcomes])


def wait_for_gate(ctx: ToolCallContext) -> str:
    """Wait until the test opens the gate (the key ``test:gate``), then say so."""
    started = time.time()
    redis = Redis.from_url(os.environ.get("TEST_CALLS_REDIS_URL") or os.environ["TANDEM_REDIS_URL"])
    while not redis.exists(GATE) and time.time() < started + HOLD_SECONDS:
        time.sleep(0.05)
    _record(ctx, "wait_for_gate", started)
    return "the gate opened"


def fan_out_held(goals: list[str], ctx: ToolCallContext) -> str:
    """``fan_out``, but its first attempt holds its worker once the children exist."""
    _record(ctx, "fan_out_held_run", time.time())
    try:
        outcomes = ctx.spawn([{"goal": g, "reasoner": "mono"} for g in goals])
    except BaseException:  # the spawn's pending wait: the children exist now
        if ctx.attempt == 1:
            _record(ctx, "fan_out_held_holding", time.time())
            time.sleep(HOLD_SECONDS)
        raise
    return json.dumps([o.model_dump() for o in outcomes])


_service = _build()
for _fn in (fan_out, fan_out_held, wait_for_gate):
    _tool = Tool.from_function(_fn)
    _tool.timeout = HOLD_SECONDS * 2  # the wait is the job's deadline's, never the tool's
    _service.add_tool(_tool, [(_service.get_action("work"), 1.0)])
toolkit = _service.get_toolkit()
