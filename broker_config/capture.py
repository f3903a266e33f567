"""Messages built but not sent: what a step's commit pushes to the broker's lists itself.

Where the broker is the job state's own Redis, a step's commit script pushes the next step's
messages to their queues in the same call that stores the step (``tandem.tasks.steps.dispatch.wire``):
the step is stored and its successor queued at once, or neither, and the worker saves two round trips a
step (the push and the outbox's ``sent`` mark). The messages are still built by Celery and kombu,
signals, headers and priority included: inside ``capture()`` the broker channel
(``tandem.broker_config.transport.Channel``) hands each message it would push to the capture instead of
sending it, as the list it belongs in and its JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kombu.utils.json import dumps

_box: ContextVar[list[tuple[str, str]] | None] = ContextVar("tandem_capture", default=None)
"""The capture of the running thread (or greenlet: each has its own context)."""


class NotCaptured(RuntimeError):
    """A message the channel cannot hand over as one push (a queue with ``x-expires``, a batch)."""


@contextmanager
def capture() -> Iterator[list[tuple[str, str]]]:
    """Collect, as ``(list key, message JSON)`` pairs, the messages this thread publishes to a
    Redis broker inside the block, instead of pushing them."""
    box: list[tuple[str, str]] = []
    token = _box.set(box)
    try:
        yield box
    finally:
        _box.reset(token)


def take(channel: Any, queue: str, message: Any, kwargs: dict[str, Any]) -> bool:
    """Keep ``message`` for ``queue`` if this thread is capturing (``True``); ``False`` to push
    it as usual. Raises ``NotCaptured`` for a message one ``LPUSH`` would not deliver as kombu does."""
    box = _box.get()
    if box is None:
        return False
    if kwargs.get("_publish_batch") is not None or (channel._expires and queue in channel._expires):
        raise NotCaptured(f"a message for queue {queue!r} needs more than one push")
    key = channel._q_for_pri(queue, channel._get_message_priority(message, reverse=False))
    box.append((getattr(channel, "global_keyprefix", "") + key, dumps(message)))
    return True
