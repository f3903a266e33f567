"""Listeners told of every task message a worker drops without running it.

The worker's transport and consumer (``tandem.broker_config.transport``, ``consumer``) drop a
message no task can be run with: an envelope or body that cannot be read, a body that is not
``[args, kwargs, embed]``, headers Celery refuses. They log it and dead-letter it, then tell each
listener here the message's headers (``{}`` when none could be read) and why it was dropped. The
tasks answer the caller through one (``tandem.tasks.call_answers``), so a client that waits on the
message's task id is not left waiting; this package knows nothing of tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("tandem.broker")

Listener = Callable[[Mapping[str, Any], str], None]
"""``listener(headers, reason)``: a message with these headers was dropped for ``reason``."""

_listeners: list[Listener] = []


def listen(listener: Listener) -> None:
    """Tell ``listener`` of every message dropped from now on (once, however often it is added)."""
    if listener not in _listeners:
        _listeners.append(listener)


def tell(headers: Any, reason: str) -> None:
    """Tell every listener that a message with ``headers`` was dropped for ``reason``. Never
    raises: a listener's failure is logged, and the worker goes on."""
    named = headers if isinstance(headers, Mapping) else {}
    for listener in list(_listeners):
        try:
            listener(named, reason)
        except Exception:
            log.warning("a listener of dropped messages failed", exc_info=True)


__all__ = ["Listener", "listen", "tell"]
