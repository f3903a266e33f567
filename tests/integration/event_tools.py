"""The toolkit of the event-order breaking tests: ``TANDEM_TOOLKIT=tests.integration.event_tools:toolkit``.

The tools of ``tests.integration.tools:questions_toolkit`` (add, sleep_tool, boom, hang, notify
that needs approval, book_trip that asks a person) plus ``held``, a call that runs until the test
releases it, so a test can cancel a job or kill a worker while a call runs, with no timing guess.
"""

from __future__ import annotations

import os
import time

from redis import Redis

from tandem.toolkit import Tool, ToolCallContext, Toolkit
from tests.integration.tools import _record, _with_questions

RELEASE = "test:release:{}"


def held(key: str, ctx: ToolCallContext) -> str:
    """Run until the test releases ``key``.

    Args:
        key: what the test releases.
    """
    started = time.time()
    _record(ctx, "held_start", started, key=key)
    calls = Redis.from_url(os.environ.get("TEST_CALLS_REDIS_URL") or os.environ["TANDEM_REDIS_URL"])
    deadline = time.monotonic() + 55
    while not calls.exists(RELEASE.format(key)) and time.monotonic() < deadline:
        time.sleep(0.05)
    _record(ctx, "held", started, key=key)
    return f"released {key}"


def _build() -> Toolkit:
    service = _with_questions()
    service.add_tool(Tool.from_function(held), [(service.get_action("work"), 1.0)])
    return service.get_toolkit()


toolkit = _build()
