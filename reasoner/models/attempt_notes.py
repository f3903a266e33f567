"""Who hears of a model call's failed attempts while the call goes on.

A call retries a transient failure inside itself (``tandem.reasoner.models.attempts``), so the
step that made it learns of the failure only when the whole call ends. A job whose deadline passes
meanwhile would end knowing nothing of what its host said. ``noting(listener)`` makes
``listener`` hear the error of each attempt that fails (retried or the call's last), as it
happens (a worker's lease keeper writes it to the job's record as its last error); ``within``
carries the listener into a call awaited on another thread's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

AttemptListener = Callable[[str], None]
"""Hears the error (text) of a model call's attempt that failed."""

log = logging.getLogger(__name__)

_listener: ContextVar[AttemptListener | None] = ContextVar("tandem_attempt_listener", default=None)


@contextmanager
def noting(listener: AttemptListener | None) -> Iterator[None]:
    """Within the block, ``listener`` hears each failed attempt's error of the calls made here."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def current() -> AttemptListener | None:
    """The listener of this context (to hand to ``within`` on another thread)."""
    return _listener.get()


async def within(listener: AttemptListener | None, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` with ``listener`` hearing its attempts' errors."""
    token = _listener.set(listener)  # as ``noting``, without a context manager's objects per call
    try:
        return await awaitable
    finally:
        _listener.reset(token)


def attempt_failed(error: str) -> None:
    """Tell this context's listener, if any, that an attempt failed with ``error`` (a listener's
    own failure never fails the call)."""
    listener = _listener.get()
    if listener is None:
        return
    try:
        listener(error)
    except Exception:
        log.warning("a listener of failed model attempts failed", exc_info=True)
