"""Tools for ``test_breaking_questions``: one that asks and then works a while (so a worker can be
killed after the answer, mid-run), and one that puts the job's secret into its question.

Workers load it with ``TANDEM_TOOLKIT=tests.integration.breaking_question_tools:toolkit``.
"""

from __future__ import annotations

import time

from tandem.toolkit import Tool, ToolCallContext, Toolkit
from tests.integration.tools import _build, _record, book_trip

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
SLOW_SECONDS = 4.0
"""How long ``slow_booking`` works after its answer (the tool timeout is set above it)."""


def slow_booking(ctx: ToolCallContext) -> str:
    """Ask which city, then work a while before booking it (every phase is recorded)."""
    _record(ctx, "slow_booking_run", time.time())
    answer = ctx.ask("Which city for the slow booking?", CITY)
    _record(ctx, "slow_booking_answered", time.time(), city=answer["city"])
    time.sleep(SLOW_SECONDS)
    _record(ctx, "slow_booking", time.time(), city=answer["city"])
    return f"slowly booked {answer['city']}"


def secret_question(ctx: ToolCallContext) -> str:
    """Ask a question whose text holds the job's secret ``api_token``."""
    token = ctx.secrets["api_token"]
    answer = ctx.ask(f"Is {token} the right token?", {"type": "string"})
    _record(ctx, "secret_question", time.time(), answer=answer)
    return f"the person said {answer}"


def two_questions(ctx: ToolCallContext) -> str:
    """Ask for a city, then for a number of nights; book once both are known."""
    _record(ctx, "two_questions_run", time.time())
    city = ctx.ask("Which city?", {"type": "string"})
    nights = ctx.ask(f"How many nights in {city}?", {"type": "integer", "minimum": 1})
    _record(ctx, "two_questions", time.time(), city=city, nights=nights)
    return f"booked {nights} nights in {city}"


def once_asking(ctx: ToolCallContext) -> str:
    """An ``at_most_once`` tool that asks before its side effect."""
    _record(ctx, "once_asking_run", time.time())
    amount = ctx.ask("How much to charge?", {"type": "integer"})
    _record(ctx, "once_asking", time.time(), amount=amount)
    return f"charged {amount}"


def _with_questions() -> Toolkit:
    service = _build()
    work = service.get_action("work")
    for fn in (book_trip, slow_booking, secret_question, two_questions):
        service.add_tool(Tool.from_function(fn), [(work, 1.0)])
    service.add_tool(Tool.from_function(once_asking, at_most_once=True), [(work, 1.0)])
    return service.get_toolkit()


toolkit = _with_questions()
