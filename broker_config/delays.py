"""Countdowns on quorum queues: whole seconds, rounded up.

With quorum queues Celery sends a message with a countdown through RabbitMQ's delay queues (its
native delayed delivery: 28 levels of queues whose TTLs are powers of two seconds), so that it
waits in the broker rather than in a worker. It encodes the delay in whole seconds: it truncates
a countdown to ``int`` and refuses one of less than a second with ``ValueError``, which would make
the send of a step parked for half a second fail. ``Celery`` below rounds every countdown (and
eta) up to the next whole second first: a parked step wakes at most a second late, never early.

``tandem.tasks.app.create_app`` uses it when ``TANDEM_RABBITMQ_QUEUE_TYPE=quorum``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from celery import Celery as CeleryApp
from celery.utils.time import maybe_make_aware


def whole_seconds(countdown: float | None, eta: datetime | None, now: datetime) -> int | None:
    """The delay of a message as whole seconds, rounded up (``None``: none, or one already due)."""
    if eta is not None:
        countdown = (maybe_make_aware(eta) - now).total_seconds()
    if countdown is None or countdown <= 0:
        return None
    return math.ceil(countdown)


class Celery(CeleryApp):
    """Celery's app, whose ``send_task`` gives every countdown and eta in whole seconds (see the
    module docstring). ``Task.apply_async`` and ``Task.retry`` send through it too."""

    def send_task(
        self,
        name: str,
        args: Any = None,
        kwargs: Any = None,
        countdown: float | None = None,
        eta: datetime | None = None,
        *rest: Any,
        **options: Any,
    ) -> Any:
        """``Celery.send_task`` with ``countdown`` and ``eta`` as a whole-second countdown."""
        delay = whole_seconds(countdown, eta, self.now()) if countdown or eta else None
        return super().send_task(name, args, kwargs, delay, None, *rest, **options)
