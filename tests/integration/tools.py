"""Tools and a toolkit for integration tests.

Workers load it with ``TANDEM_TOOLKIT=tests.integration.tools:toolkit``.

Every call records itself in Redis (``TANDEM_REDIS_URL``, or ``TEST_CALLS_REDIS_URL`` when set) so
tests can count runs and see when each ran: ``test:calls`` (a list of JSON entries). A test that
crashes the job store's Redis records the calls elsewhere: a crash may lose the last writes, the
record of a call that ran among them.
"""

from __future__ import annotations

import json
import os
import time

from redis import Redis

from tandem.toolkit import Action, NoAnswer, Tool, ToolCallContext, ToolkitService

_redis: Redis | None = None


def _record(ctx: ToolCallContext | None, name: str, started: float, **extra: object) -> None:
    global _redis
    if _redis is None:
        _redis = Redis.from_url(os.environ.get("TEST_CALLS_REDIS_URL") or os.environ["TANDEM_REDIS_URL"])
    entry = {
        "name": name,
        "job": ctx.job_id if ctx else "",
        "round": ctx.round if ctx else -1,
        "index": ctx.call_index if ctx else -1,
        "start": started,
        "end": time.time(),
        "pid": os.getpid(),
        "key": ctx.idempotency_key if ctx else "",
        "attempt": ctx.attempt if ctx else 0,
        **extra,
    }
    _redis.rpush("test:calls", json.dumps(entry))


def sleep_tool(seconds: float, ctx: ToolCallContext) -> str:
    """Sleep, then say how long.

    Args:
        seconds: how long to sleep.
    """
    started = time.time()
    time.sleep(seconds)
    _record(ctx, "sleep_tool", started)
    return f"slept {seconds} s"


def add(a: int, b: int, ctx: ToolCallContext) -> int:
    """Add two integers."""
    started = time.time()
    _record(ctx, "add", started)
    return a + b


def boom(ctx: ToolCallContext) -> str:
    """Always fails."""
    _record(ctx, "boom", time.time())
    raise RuntimeError("boom went the tool")


def hang(ctx: ToolCallContext) -> str:
    """Never returns in time."""
    _record(ctx, "hang", time.time())
    time.sleep(60)
    return "late"


def notify(to: str, ctx: ToolCallContext) -> str:
    """Send a notification (needs a person's approval)."""
    _record(ctx, "notify", time.time())
    return f"notified {to}"


def charge_card(amount: int, seconds: float, ctx: ToolCallContext) -> str:
    """Charge a card (a side effect that must never happen twice), then take ``seconds``.

    Args:
        amount: how much to charge.
        seconds: how long the charge takes after it was made.
    """
    _record(ctx, "charge_card", time.time(), amount=amount)
    time.sleep(seconds)
    return f"charged {amount}"


def _build(durable: bool = False) -> ToolkitService:
    service = ToolkitService()
    work = Action("work", "work", "Do the work the task needs")
    service.add_action(work, [], [])
    for fn in (sleep_tool, add, boom, hang):
        service.add_tool(Tool.from_function(fn), [(work, 1.0)])
    service.add_tool(Tool.from_function(notify, requires_approval=True), [(work, 1.0)])
    if durable:  # only where tested: every tool's description lengthens the prompts (and their usage)
        service.add_tool(Tool.from_function(charge_card, at_most_once=True), [(work, 1.0)])
    return service


toolkit = _build().get_toolkit()
durable_toolkit = _build(durable=True).get_toolkit()
"""The same tools plus ``charge_card`` (``at_most_once``), for the durability and chaos tests."""


def big_output(megabytes: int, ctx: ToolCallContext) -> str:
    """Return ``megabytes`` million characters of log lines (a tool that dumps a whole log).

    Args:
        megabytes: how many million characters to return.
    """
    started = time.time()
    size = megabytes * 1_000_000
    line = "{:08d} GET /v1/items/item-{}-a-b-c?page=2 200 agent=curl/8 trace=4bf92f3577b34da6 ok\n"
    # Built a megabyte at a time and joined once, to its exact length: one join of a million
    # small strings, or a copy of the whole, holds the GIL (and the lease keeper of the process
    # with it) for seconds on a loaded machine, and the test judges tandem's handling, not this.
    chunks, kept, i = [], 0, 0
    while kept < size - 14:
        chunk = "".join(line.format(n, n) for n in range(i, i + 16_000))
        chunk, i = chunk[: size - 14 - kept], i + 16_000
        chunks.append(chunk)
        kept += len(chunk)
    text = "".join([*chunks, "auth token: x\n"])
    _record(ctx, "big_output", started, chars=len(text))
    return text


CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def book_trip(ctx: ToolCallContext) -> str:
    """Ask a person which city to book, then book it."""
    _record(ctx, "book_trip_run", time.time())  # every run: the one that asks, the one that books
    try:
        answer = ctx.ask("Which city should the trip go to?", CITY)
    except NoAnswer as exc:
        _record(ctx, "book_trip", time.time(), city=None)
        return f"booked nothing: {exc}"
    _record(ctx, "book_trip", time.time(), city=answer["city"])
    return f"booked a trip to {answer['city']}"


def _with_questions() -> ToolkitService:
    service = _build()
    service.add_tool(Tool.from_function(book_trip), [(service.get_action("work"), 1.0)])
    return service


questions_toolkit = _with_questions().get_toolkit()
"""The same tools plus ``book_trip`` (it asks a person through ``ToolCallContext.ask``)."""


def _with_big_output() -> ToolkitService:
    service = _build()
    service.add_tool(Tool.from_function(big_output), [(service.get_action("work"), 1.0)])
    return service


large_output_toolkit = _with_big_output().get_toolkit()
"""The same tools plus ``big_output``, for the large-output tests."""


NEEDLE = "the needle is 7351"
_LINES = "".join(f"line {i:06d} of the report\n" for i in range(8000))
ARTIFACT_TEXT = _LINES[: 200_000 - len(NEEDLE)] + NEEDLE
"""200,000 characters (one byte each) whose end holds ``NEEDLE``: ``report``'s output."""


def report(ctx: ToolCallContext) -> str:
    """Return a 200 KB report (over the artifact threshold: kept whole as an artifact)."""
    _record(ctx, "report", time.time(), chars=len(ARTIFACT_TEXT))
    return ARTIFACT_TEXT


def _with_report() -> ToolkitService:
    service = _build()
    service.add_tool(Tool.from_function(report), [(service.get_action("work"), 1.0)])
    return service


artifact_toolkit = _with_report().get_toolkit()
"""The same tools plus ``report``, for the artifact tests."""


def _with_questions_and_report() -> ToolkitService:
    service = _with_questions()
    service.add_tool(Tool.from_function(report), [(service.get_action("work"), 1.0)])
    return service


client_surface_toolkit = _with_questions_and_report().get_toolkit()
"""The same tools plus ``book_trip`` (a question) and ``report`` (an artifact): every pause and
output a client reads (``tests.integration.test_redis_acl``)."""
