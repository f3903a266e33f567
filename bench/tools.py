"""The benchmarks' toolkit: ``noop`` and ``sleep_tool``, loaded by workers with
``TANDEM_TOOLKIT=bench.tools:toolkit``.

Unlike the integration tests' tools these record nothing, so a tool call costs only what the
tool does (nothing, or the sleep) plus tandem's own work around it.
"""

from __future__ import annotations

import json
import os
import time

from redis import Redis

from tandem.toolkit import Action, Tool, ToolCallContext, ToolkitService
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


def _build_once() -> Toolkit:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    service.add_tool(Tool.from_function(noop, at_most_once=True), [(work, 1.0)])
    return service.get_toolkit()


once_toolkit = _build_once()
"""``noop`` alone, ``at_most_once`` (its start mark is a write that waits for replicas:
``bench.wait_replicas``)."""


_calls: Redis | None = None


def charge(seconds: float, ctx: ToolCallContext) -> str:
    """Charge once (a side effect that must never happen twice), then take ``seconds``.

    Args:
        seconds: how long the charge takes after it was made.
    """
    global _calls
    if _calls is None:  # a side channel outside the Redis under test: BENCH_CALLS_REDIS_URL
        _calls = Redis.from_url(os.environ["BENCH_CALLS_REDIS_URL"])
    entry = {"job": ctx.job_id, "round": ctx.round, "index": ctx.call_index, "at": time.time()}
    _calls.rpush("bench:charges", json.dumps(entry))
    _calls.expire("bench:charges", 86400)
    time.sleep(seconds)
    return "charged"


def _build_charge() -> Toolkit:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    service.add_tool(Tool.from_function(charge, at_most_once=True), [(work, 1.0)])
    return service.get_toolkit()


charge_toolkit = _build_charge()
"""``charge`` alone, ``at_most_once``, each run recorded in the list ``bench:charges`` of
``BENCH_CALLS_REDIS_URL`` (``bench.failover`` counts the calls that ran twice)."""
