"""Tools and model hosts for ``test_breaking_console``: a tool that holds its job in ``running``
until the test opens its gate, a tool that returns whatever text it is given (hostile markup
included), and model-host scripts that fail, answer 429 or deliver hostile text on cue.

Workers load the toolkit with ``TANDEM_TOOLKIT=tests.integration.breaking_console_tools:toolkit``.
The goal carries the cue (``tests.integration.plan_model`` reads the plan from it too):

- ``HOST_429``: the Actor's host answers every call with 429 and a long ``Retry-After`` (the job
  parks in ``waiting``);
- ``FAIL_LATE``: the Actor's host answers its second call of the job with 400 (the job fails in
  round 1, after round 0 was stored);
- ``HOSTILE_DELIVERABLE``: the mono model's deliverable is ``HOSTILE`` (markup and script).
"""

from __future__ import annotations

import os
import time

from redis import Redis

from tandem.toolkit import Tool, ToolCallContext, Toolkit
from tests.integration import plan_model
from tests.integration.tools import _build, _record, book_trip
from tests.openai_server import RecordedRequest, Reply

GATE_SECONDS = 300
"""The longest a gated call waits for its gate (the test opens it well before; the tool timeout
is set above it)."""

HOSTILE = (
    '<img src="x" id="pwned-img" onerror="window.__pwned=1">'
    '<script id="pwned-script">window.__pwned=2</script>'
    '<b id="pwned-bold">bold?</b></pre></div></td></table>'
    '<a href="javascript:window.__pwned=3" id="pwned-link">x</a>'
)
"""Markup that would run or show as elements if a page wrote it as HTML (each element has an id a
test looks for)."""


def gate_key(name: str) -> str:
    """The Redis list a test pushes to, to open the gate ``name`` (it stays open: a call run
    again passes at once)."""
    return f"test:gate:{name}"


def gate(name: str, ctx: ToolCallContext) -> str:
    """Wait until the test opens the gate ``name``, then say so.

    Args:
        name: the gate's name.
    """
    started = time.time()
    _record(ctx, "gate_entered", started, gate=name)
    url = os.environ.get("TEST_CALLS_REDIS_URL") or os.environ["TANDEM_REDIS_URL"]
    redis = Redis.from_url(url, socket_timeout=10)
    opened = False
    while not opened and time.time() < started + GATE_SECONDS:
        opened = bool(redis.exists(gate_key(name)))
        time.sleep(0.1)
    _record(ctx, "gate", started, gate=name, opened=opened)
    return f"gate {name} {'opened' if opened else 'timed out'}"


def echo(text: str, ctx: ToolCallContext) -> str:
    """Return ``text`` as it is.

    Args:
        text: what to return.
    """
    _record(ctx, "echo", time.time())
    return text


def _toolkit() -> Toolkit:
    service = _build()  # sleep_tool, add, boom, hang and notify (requires approval)
    work = service.get_action("work")
    for fn in (gate, echo, book_trip):
        service.add_tool(Tool.from_function(fn), [(work, 1.0)])
    return service.get_toolkit()


toolkit = _toolkit()


def _goal(request: RecordedRequest) -> str:
    return " ".join(
        str(m.get("content") or "") for m in request["messages"] if m["role"] in ("system", "user")
    )


def actor_host(request: RecordedRequest) -> Reply:
    """The Actor role's host: the plan model, with the cues above."""
    goal = _goal(request)
    if "HOST_429" in goal:
        return Reply(status=429, headers={"Retry-After": "900"})
    if "FAIL_LATE" in goal and plan_model.turn(request) >= 2:
        return Reply(status=400, error="FAIL_LATE: this host refuses the second call")
    mono = "on your own" in str(request["messages"][0]["content"])
    if (
        mono
        and "HOSTILE_DELIVERABLE" in goal
        and plan_model.turn(request) > len(plan_model._plan(plan_model._goal(request)))
    ):
        return Reply(content=f"TASK_DONE\n<deliverable>{HOSTILE}</deliverable>")
    return plan_model.mono(request) if mono else plan_model.actor(request)
