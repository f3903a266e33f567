"""The benchmarks' model hosts' scripts: a Thinker and an Actor that follow a plan in the goal.

The goal ends with ``PLAN: [[call, ...], ...]`` (``plan_goal``), one inner list of
``{"name": ..., "args": {...}}`` calls per round. The Thinker's n-th turn instructs the n-th
round's calls, and says TASK_DONE once the plan is spent; the Actor writes the calls it is given
as ``<function_call>`` blocks, and the deliverable once told TASK_DONE. So a plan of R rounds
makes a job of R + 1 rounds: R with tool calls, then the one that delivers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tests.openai_server import RecordedRequest, Reply

_GOAL = re.compile(r"<goal>(.*?)</goal>", re.S)
_INPUT = re.compile(r"<input>(.*?)</input>", re.S)


def plan_goal(rounds: Sequence[Sequence[Mapping[str, Any]]], text: str = "benchmark job") -> str:
    """A goal whose hosts ask for ``rounds`` of tool calls, then deliver."""
    return f"{text} PLAN: {json.dumps([list(r) for r in rounds])}"


def call(name: str, **args: Any) -> dict[str, Any]:
    """One planned tool call."""
    return {"name": name, "args": args}


def _plan(request: RecordedRequest) -> list[list[dict[str, Any]]]:
    for message in request["messages"]:
        found = _GOAL.search(str(message.get("content") or ""))
        if found and "PLAN:" in found.group(1):
            return list(json.loads(found.group(1).split("PLAN:", 1)[1]))
    return []


def thinker(request: RecordedRequest) -> Reply:
    """The Thinker: instruct the next round of the plan, or TASK_DONE."""
    plan = _plan(request)
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")  # 0 on the first turn
    if turn < len(plan):
        return Reply(
            content=f"<deep_thinking>round {turn}</deep_thinking>\n"
            f"<instruction>Run these calls.</instruction>\n<input>{json.dumps(plan[turn])}</input>"
        )
    return Reply(content="<instruction>TASK_DONE: deliver.</instruction>\n<input>[]</input>")


def actor(request: RecordedRequest) -> Reply:
    """The Actor: write the instructed calls, or the deliverable once told TASK_DONE."""
    last = str(request["messages"][-1]["content"])
    if "TASK_DONE" in last:
        return Reply(
            content="<shallow_thinking>done</shallow_thinking>\n<deliverable>plan done</deliverable>"
        )
    given = _INPUT.search(last)
    calls = json.loads(given.group(1)) if given else []
    blocks = "\n".join(
        "<function_call>\n"
        + json.dumps({"name": c["name"], "call_objective": "plan", "args": c["args"]})
        + "\n</function_call>"
        for c in calls
    )
    return Reply(content=f"<shallow_thinking>calling</shallow_thinking>\n<action>\n{blocks}\n</action>")
