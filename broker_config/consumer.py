"""The worker's consumer: Celery's, with a guard around the handler of task messages.

Celery checks most of what a task message may get wrong (a body it cannot decode, an unknown task
name, arguments its protocol refuses) and drops such a message with a log line. But some shapes
raise from inside its handler into the worker's event loop, which ends the worker: a message
whose body is an object with a ``task`` key and no ``id``, for example, makes its "unknown task"
report fail with ``KeyError``. Here any error of the handler that is not a lost connection drops
the one message instead: it is logged, dead-lettered where the channel keeps dead letters
(``tandem.broker_config.transport``), rejected without requeue, and the worker goes on.

A task message whose body Celery would hand to the task unread (protocol 2 defers that to the
pool) but that cannot call it, since it is not ``[args, kwargs, embed]`` with ``args`` a list and
``kwargs`` an object (a JSON object, ``"kwargs": null``, ``"args": null``), is dropped the same way
before it reaches the pool, where it would fail with nobody told (``unfit_body``).

Every message dropped here is also told to the listeners of ``tandem.broker_config.dropped`` with
its headers, so the caller of a public task still gets an answer.

A step message (``tandem.thinker_turn``, ``tandem.run_tool``, ...: the tasks routed to a role
queue) that arrives on the intake queue or one of its lanes is refused before it reaches the pool
(``misplaced_step``): one WARNING line, and the message is rejected. Clients may write the intake
queue but not the role queues (docs/security.md, "Redis ACL users"), so a step found there was put
there by a client, never by a worker. Which queue a message came from is the queue tandem's Redis
channel took it from (``tandem.broker_config.transport.QUEUE_STAMP``), else its routing key (on
RabbitMQ, what the broker routed it by).

Celery uses this consumer through ``worker_consumer`` (see ``tandem.broker_config.celery_config``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer
from vine import promise

from tandem.broker_config import dropped
from tandem.broker_config.celery_config import TASK_QUEUES
from tandem.broker_config.intake_lanes import is_intake
from tandem.broker_config.transport import QUEUE_STAMP, unstamped

log = logging.getLogger("tandem.broker")

DELAY_PREFIX = re.compile(r"^(?:[01]\.){28}")
"""What RabbitMQ's delayed delivery (Celery's, on quorum queues) puts before a routing key: the
delay's 28 bits, each followed by a dot (``kombu.transport.native_delayed_delivery``)."""


class Consumer(CeleryConsumer):
    """Celery's consumer whose task-message handler never raises into the event loop but for a
    lost connection (which Celery's reconnect handles), and that keeps every message Celery drops
    as malformed (a body it cannot decode, no task name, an unknown task, arguments its protocol
    refuses) in the dead-letter list once Celery dropped it (after: when Celery's own handling of it
    raises, the guard keeps it, once)."""

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        """Let Celery drop a message whose body cannot be decoded, then dead-letter it."""
        super().on_decode_error(message, exc)
        keep(message, f"a body that cannot be decoded: {type(exc).__name__}: {exc}")

    def on_unknown_message(self, body: Any, message: Any) -> None:
        """Let Celery drop a message that is not a task message, then dead-letter it."""
        super().on_unknown_message(body, message)
        keep(message, "not a task message (no task name)")

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        """Let Celery drop a message for a task no worker knows, then dead-letter it."""
        super().on_unknown_task(body, message, exc)
        keep(message, f"an unknown task: {exc}")

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """Let Celery drop a task message its protocol refuses, then dead-letter it."""
        super().on_invalid_task(body, message, exc)
        keep(message, f"an invalid task message: {type(exc).__name__}: {exc}")

    def create_task_handler(self, promise: Any = promise) -> Callable[[Any], Any]:
        """Celery's handler of task messages, guarded (see the module docstring)."""
        handle = super().create_task_handler(promise)
        connection_errors = lost_connection_errors(self.connection_errors)
        intake = str(self.app.conf.task_default_queue or "celery")

        def on_task_received(message: Any) -> Any:
            try:
                unfit = unfit_body(message)
                if unfit is not None:
                    drop(message, unfit, connection_errors)
                    return None
                misplaced = misplaced_step(message, intake)
                if misplaced is not None:
                    refuse(message, misplaced, connection_errors)
                    return None
                return handle(message)
            except connection_errors:
                raise
            except Exception as exc:
                drop(message, exc, connection_errors)
                return None

        return on_task_received


def _kind(value: Any) -> str:
    """What JSON value ``value`` is: ``null``, ``a JSON object``, ``a JSON string``, ..."""
    if value is None:
        return "null"
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return f"a JSON {names.get(type(value), type(value).__name__)}"


def unfit_body(message: Any) -> str | None:
    """Why a protocol-2 task message's body cannot call its task (``None``: it can, or it is not
    such a message, or its body cannot be decoded: Celery's own handling reports that). The body
    must be ``[args, kwargs, embed]``: ``args`` a list, ``kwargs`` an object, ``embed`` an object or
    null. A body object with ``args`` (the hybrid protocol 1/2) is Celery's to convert."""
    headers = message.headers
    if not isinstance(headers, dict) or not isinstance(headers.get("task"), str):
        return None
    try:
        body = message.payload  # decoded once: Celery's strategy reads the same cached value
    except Exception:
        return None
    if isinstance(body, dict) and "args" in body:
        return None
    if not isinstance(body, list | tuple) or len(body) != 3:
        return f"its body is {_kind(body)}, not [args, kwargs, embed]"
    args, kwargs, embed = body
    if not isinstance(args, list | tuple):
        return f"its args are {_kind(args)}, not a list"
    if not isinstance(kwargs, dict):
        return f"its kwargs are {_kind(kwargs)}, not an object"
    if embed is not None and not isinstance(embed, dict):
        return f"its embed is {_kind(embed)}, not an object"
    return None


def arrival_queue(message: Any) -> str | None:
    """The queue ``message`` was taken from: the one tandem's Redis channel wrote into its
    ``delivery_info`` (``QUEUE_STAMP``), else its routing key without the prefix of RabbitMQ's
    delayed delivery (``None`` when it has neither)."""
    info = getattr(message, "delivery_info", None) or {}
    queue = info.get(QUEUE_STAMP)
    if isinstance(queue, str):
        return queue
    key = info.get("routing_key")
    return DELAY_PREFIX.sub("", key, count=1) if isinstance(key, str) else None


def misplaced_step(message: Any, intake_queue: str) -> str | None:
    """Why ``message`` is refused when it is a step task (one routed to a role queue,
    ``TASK_QUEUES``) taken from ``intake_queue`` or one of its lanes, where clients may write;
    ``None`` for any other message, and for one whose body cannot be decoded (Celery drops it, and
    it is dead-lettered as malformed)."""
    headers = getattr(message, "headers", None)
    task = headers.get("task") if isinstance(headers, dict) else None
    arrived = arrival_queue(message)
    if not isinstance(task, str) or task not in TASK_QUEUES or not is_intake(arrived, intake_queue):
        return None
    try:
        message.payload  # noqa: B018 - decoded once: a body that cannot be is malformed, not misplaced
    except Exception:
        return None
    task_id = str(headers.get("id"))[:80] if isinstance(headers, dict) else "?"
    return (
        f"{task} (task id {task_id}) arrived on the intake queue {arrived!r}: a step runs only "
        f"from its role queue {TASK_QUEUES[task]!r}, which only workers may write (docs/security.md, "
        "Redis ACL users); whoever can write the intake queue sent it"
    )


def refuse(message: Any, reason: str, connection_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Log ``message`` as refused (one WARNING line: ``reason``) and reject it without requeue:
    it never reaches a task."""
    log.warning("message refused, nothing done: %s", reason)
    if not message.acknowledged:
        message.reject_log_error(log, connection_errors)


def lost_connection_errors(errors: Any) -> tuple[type[BaseException], ...]:
    """The errors of ``errors`` (a transport's ``connection_errors``) that mean a lost connection.

    kombu's Redis transport counts ``KeyError`` among them (an internal one may escape its
    polling); raised by the handler of a message, it is the message's fault, and treating it as a
    lost connection would restore the message and take it again, for ever."""
    return tuple(e for e in errors if not issubclass(e, LookupError))


def keep(message: Any, reason: str) -> None:
    """Log ``message`` as malformed, and keep it in the dead-letter list where its channel keeps
    one (tandem's Redis channel; on RabbitMQ it is logged only); then tell the listeners of dropped
    messages (``tandem.broker_config.dropped``). Never raises."""
    _keep(message, reason)
    dropped.tell(getattr(message, "headers", None), reason)


def _keep(message: Any, reason: str) -> None:
    try:
        queue = arrival_queue(message) or "?"
        dead_letter = getattr(message.channel, "dead_letter", None)
        if callable(dead_letter):
            raw = unstamped(getattr(message, "_raw", None))  # as it came, without the channel's stamp
            dead_letter(json.dumps(raw, default=str) if raw is not None else message.body, queue, reason)
        else:
            body = message.body if isinstance(message.body, bytes | str) else repr(message.body)
            log.error("dropped a malformed message from queue %r (%s), starting %r", queue, reason, body[:80])
    except Exception:
        log.warning("could not keep a malformed message", exc_info=True)


def drop(message: Any, exc: Exception | str, connection_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Log ``message`` as malformed (``exc`` says why), dead-letter it where its channel keeps
    dead letters, and reject it without requeue unless it was acknowledged already."""
    keep(message, exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}")
    if not message.acknowledged:
        message.reject_log_error(log, connection_errors)
