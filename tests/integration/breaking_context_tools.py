"""Tools for the breaking tests of context budgets and artifacts (issue 34).

Workers load ``TANDEM_TOOLKIT=tests.integration.breaking_context_tools:toolkit``: the tools of
``tests.integration.tools`` (each call recorded in Redis, ``test:calls``) plus

* ``page(n, kb)``: a page of ``kb`` thousand ASCII characters that starts ``PAGE-<n>-START`` and ends
  ``PAGE-<n>-END``; page 0 hides ``NEEDLE`` just before its end (past any preview);
* ``slow_page(n, kb, seconds)``: the same page after ``seconds`` of sleep (a call to kill a worker in);
* ``wide_page(n)``: ``WIDE_TEXT``, 3,000 characters of 3-byte UTF-8 (8,960 bytes);
* ``secret_page()``: ``SECRET_TEXT``, a 21 KB page holding credential-shaped lines.

The texts are functions of their arguments, so a test computes what a call returned (and an
artifact's handle, ``r<round>-c<call>-<10 hex of the SHA-256>``, docs/artifacts.md) on its own.
"""

from __future__ import annotations

import hashlib
import time

from tandem.toolkit import Tool, ToolCallContext
from tests.integration.tools import _build, _record

NEEDLE = "the vault code is 4417-ZETA"
_FILLER = "the archive lists another shelf of ledgers and letters and maps "


def page_text(n: int, kb: int) -> str:
    """What ``page(n, kb)`` returns: exactly ``kb * 1000`` characters."""
    head = f"PAGE-{n}-START\n"
    tail = (f"{NEEDLE}\n" if n == 0 else "") + f"PAGE-{n}-END"
    size = kb * 1000
    body = (_FILLER * (size // len(_FILLER) + 2))[: size - len(head) - len(tail)]
    return head + body + tail


def handle_of(round_: int, call: int, text: str) -> str:
    """An artifact's handle as docs/artifacts.md defines it."""
    return f"r{round_}-c{call}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:10]}"


WIDE_TEXT = "WIDE-START " + "€" * 2980 + " WIDE-END"
"""3,000 characters, 8,960 UTF-8 bytes (the euro sign is three): over 8,000 bytes, under 8,000 characters."""
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBhcnQtb2YtdGhlLXRva2Vu.Zm9vYmFyYmF6cXV4"
PASSWORD = "hunter2-VAULT-99"
SECRET_TEXT = (
    "SECRET-PAGE\n"
    + "ordinary words on a page " * 600
    + f"\nAuthorization: Bearer {BEARER}\npassword: {PASSWORD}\n"
    + "more words after the secret " * 200
)
"""A page of about 21 KB with credential-shaped lines 15,000 characters in: past its preview, past
the cut of one output (8,000) and the redaction's margin past it (4,096)."""


def page(n: int, kb: int, ctx: ToolCallContext) -> str:
    """Return page ``n`` of the archive, ``kb`` thousand characters long.

    Args:
        n: the page number.
        kb: its size in thousands of characters.
    """
    _record(ctx, "page", time.time(), n=n)
    return page_text(n, kb)


def slow_page(n: int, kb: int, seconds: float, ctx: ToolCallContext) -> str:
    """Return page ``n`` after ``seconds`` of work.

    Args:
        n: the page number.
        kb: its size in thousands of characters.
        seconds: how long it takes.
    """
    started = time.time()
    _record(ctx, "slow_page_started", started, n=n)
    time.sleep(seconds)
    _record(ctx, "slow_page", started, n=n)
    return page_text(n, kb)


def wide_page(n: int, ctx: ToolCallContext) -> str:
    """Return a page in a wide script.

    Args:
        n: the page number (ignored).
    """
    _record(ctx, "wide_page", time.time(), n=n)
    return WIDE_TEXT


def secret_page(ctx: ToolCallContext) -> str:
    """Return a page holding a credential."""
    _record(ctx, "secret_page", time.time())
    return SECRET_TEXT


def _with_pages() -> object:
    service = _build()
    work = service.get_action("work")
    for fn in (page, slow_page, wide_page, secret_page):
        service.add_tool(Tool.from_function(fn), [(work, 1.0)])
    return service.get_toolkit()


toolkit = _with_pages()
