"""Does RabbitMQ take a worker's queues as the worker declares them? Asked once, at start.

On RabbitMQ a queue's type and arguments are fixed when it is made. A worker that declares one
otherwise (its ``TANDEM_RABBITMQ_QUEUE_TYPE`` is ``classic`` but the queue was made ``quorum``, or
the other way round) is refused with ``PRECONDITION_FAILED`` on every connection: Celery reconnects
in a loop and, after a burst of refusals, the worker stops with ``RestartFreqExceeded``, the cause
far up its log. ``refusal`` declares the worker's queues once before Celery starts and turns the
first refusal into one line that says what to do. A broker that does not answer is not this
check's business: the worker rides out an outage as it always does.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from tandem.broker_config.settings import Settings

CHECK_TIMEOUT = 3.0
"""Seconds the check may wait for the broker before it leaves the question to the worker."""

PRECONDITION_FAILED = 406
"""The AMQP reply code of a declaration whose arguments differ from the existing queue's."""

_VHOST = re.compile(r"in vhost '([^']*)'")
_ARGUMENT = re.compile(r"inequivalent arg '([^']*)'")
_CURRENT = re.compile(r"current is (?:the value '([^']*)'|none)")


def refusal(
    app: Any, settings: Settings, names: Collection[str], timeout: float = CHECK_TIMEOUT
) -> str | None:
    """The line for the first of the queues ``names`` that RabbitMQ refuses as ``app`` declares it
    (the queue, RabbitMQ's words, what to do); ``None`` when all are taken, on Redis, or when the
    broker does not answer within ``timeout`` seconds."""
    if not settings.broker_url.startswith(("amqp", "pyamqp")):
        return None
    from kombu.exceptions import OperationalError

    declared = [queue for queue in app.amqp.queues.values() if queue.name in names]
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout)
            for queue in declared:
                try:
                    queue(connection.default_channel).declare()
                except connection.channel_errors as exc:  # AMQP 406 PRECONDITION_FAILED: refused
                    if getattr(exc, "reply_code", None) != PRECONDITION_FAILED:
                        return None  # another refusal (access, say): Celery reports it as before
                    return _line(queue.name, str(exc), settings, connection.virtual_host)
    except (OSError, OperationalError, ConnectionError):
        return None  # the broker is down or away: the worker waits for it, as after any outage
    return None


def _line(name: str, said: str, settings: Settings, vhost: str) -> str:
    """What to say about queue ``name`` refused with RabbitMQ's words ``said``: the queue's type
    when the argument that differs is ``x-queue-type``, else that the queue was made by someone
    else's declaration (a classic queue without tandem's ``x-max-priority``, say)."""
    found = _VHOST.search(said)
    where = found.group(1) if found else vhost
    words = " ".join(said.split())
    delete = f"rabbitmqctl delete_queue {name} -p {where}; the messages in it are lost"
    head = (
        f"RabbitMQ refuses the {name!r} queue as this worker declares it "
        f"(TANDEM_RABBITMQ_QUEUE_TYPE={settings.rabbitmq_queue_type}): {words}."
    )
    argument = _ARGUMENT.search(said)
    current = _CURRENT.search(said)
    quorum_worker = settings.rabbitmq_queue_type == "quorum"
    if argument is None or current is None:  # RabbitMQ's words not as expected: the other type
        kind = "classic" if quorum_worker else "quorum"
    elif argument.group(1) == "x-queue-type":
        kind = current.group(1) or "classic"
    elif argument.group(1) == "x-max-priority" and quorum_worker:
        kind = "classic"  # a queue with priorities: a classic one (a quorum queue refuses them)
    else:  # a classic queue made without tandem's arguments (a plain client's), or with others
        return (
            f"{head} The queue was made by another declaration, with other arguments than this "
            f"worker's: delete it to let the workers make it anew ({delete})"
        )
    return (
        f"{head} The queue is a {kind} queue: set TANDEM_RABBITMQ_QUEUE_TYPE={kind} on every worker "
        f"and client, or delete the queue to make it anew ({delete})"
    )


__all__ = ["CHECK_TIMEOUT", "PRECONDITION_FAILED", "refusal"]
