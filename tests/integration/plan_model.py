"""A plan-following model for integration tests, served over HTTP by ``tests.openai_server``.

The job's goal carries the plan: ``PLAN: [[call, call], [call]]`` where each call is
``{"name": ..., "args": {...}}`` and each inner list is one round of tool calls. The Thinker
instructs one round of the plan per turn, then says TASK_DONE; the Actor writes the calls it is
given as ``<function_call>`` blocks, and the deliverable once told TASK_DONE. A goal holding
``NEVER_DONE`` never finishes; a mono model follows the plan on its own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.openai_server import RecordedRequest, Reply

_GOAL = re.compile(r"<goal>(.*?)</goal>", re.S)


def _plan(goal: str) -> list[list[dict[str, Any]]]:
    if "PLAN:" not in goal:
        return []
    return json.loads(goal.split("PLAN:", 1)[1].strip())


def _goal(request: RecordedRequest) -> str:
    for m in request["messages"]:
        found = _GOAL.search(str(m.get("content") or ""))
        if found:
            return found.group(1)
    return ""


def turn(request: RecordedRequest) -> int:
    """1 for the model's first turn of the job, 2 for its second, ..."""
    return 1 + sum(1 for m in request["messages"] if m["role"] == "assistant")


def _calls(calls: list[dict[str, Any]]) -> str:
    blocks = [
        "<function_call>\n"
        + json.dumps({"name": c["name"], "call_objective": "test", "args": c["args"]})
        + "\n</function_call>"
        for c in calls
    ]
    return "<action>\n" + "\n".join(blocks) + "\n</action>"


def thinker(request: RecordedRequest) -> Reply:
    """The Thinker's reply."""
    goal = _goal(request)
    plan, turn_no = _plan(goal), turn(request)
    if "NEVER_DONE" in goal or turn_no <= len(plan):
        calls = plan[turn_no - 1] if turn_no <= len(plan) else []
        return Reply(
            content=f"<deep_thinking>turn {turn_no}</deep_thinking>\n"
            "<instruction>Run these calls.</instruction>\n"
            f"<input>{json.dumps(calls)}</input>",
            reasoning_content=f"thinker reasoning {turn_no}",
        )
    return Reply(content="<instruction>TASK_DONE: deliver.</instruction>\n<input>[]</input>")


def actor(request: RecordedRequest) -> Reply:
    """The Actor's reply (dual jobs)."""
    last = str(request["messages"][-1]["content"])
    if "TASK_DONE" in last:
        done = "<deliverable>all planned calls ran</deliverable>"
        return Reply(content=f"<shallow_thinking>done</shallow_thinking>\n{done}")
    given = re.search(r"<input>(.*?)</input>", last, re.S)
    calls = json.loads(given.group(1)) if given else []
    if not calls:
        return Reply(content="<action>nothing to call</action>")
    return Reply(content="<shallow_thinking>calling</shallow_thinking>\n" + _calls(calls))


def mono(request: RecordedRequest) -> Reply:
    """The single model's reply (mono jobs)."""
    goal = _goal(request)
    plan, turn_no = _plan(goal), turn(request)
    if "NEVER_DONE" in goal:
        return Reply(content="<action>still thinking</action>")
    if turn_no <= len(plan):
        return Reply(content=_calls(plan[turn_no - 1]))
    return Reply(content="TASK_DONE\n<deliverable>mono plan done</deliverable>")


def goal_with_plan(text: str, plan: list[list[dict[str, Any]]]) -> str:
    """A goal that carries ``plan``."""
    return f"{text} PLAN: {json.dumps(plan)}"
