"""Writing a job's events to its Redis stream, and reading the raw entries back.

The events are the typed models of ``tandem.client.events`` (``JobEvent``, named here too, for the
writers). A job's stream (``JobStore.key(job_id, "events")``) is a Redis stream whose entries have
three fields: ``type`` (the event kind), ``data`` (a JSON object: the event's fields) and ``at``
(Unix time); the entry id is the event's ``id``. The store writes these models, and the CLI
display, ``JobHandle.events()`` and the HTTP API read them back as the same models.

Writers are strict: every writer builds the event's model, and publishing an unknown kind, a
field the kind does not have, or a value of the wrong type is an ``EventError`` (``checked``).
Readers are lenient (``read_event``, ``decode_entry``): see ``tandem.client.events``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tandem.client.events import (
    EVENT_ADAPTER,
    EVENT_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    ChildEnded,
    ChildrenSpawned,
    Final,
    JobEvent,
    JobStarted,
    MemoryCompacted,
    MessageReceived,
    ModelDelta,
    ModelReply,
    OtherEvent,
    QuestionAnswered,
    QuestionAsked,
    RoundStarted,
    ToolCall,
    ToolResult,
    Waiting,
    WebhookDelivered,
    WebhookFailed,
    read_event,
)
from tandem.tasks.errors import JobError


class EventError(JobError, ValueError):
    """An event to publish does not fit its kind (unknown kind, missing or wrong field)."""


def make_event(kind: str, data: dict[str, Any]) -> JobEvent:
    """A typed event of ``kind`` from its fields, for writing; ``EventError`` if they do not fit
    (an unknown kind or field, a missing or wrong value)."""
    if kind not in EVENT_TYPES:
        raise EventError(f"unknown event type {kind!r}: use one of {', '.join(EVENT_TYPES)}")
    try:
        event: JobEvent = EVENT_ADAPTER.validate_python({**data, "type": kind})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "(event)"
        raise EventError(f"event {kind!r}: field {where!r}: {first['msg']}") from None
    return checked(event)


def checked(event: JobEvent) -> JobEvent:
    """``event`` if a writer may publish it: a known kind, with only the fields its model has
    (readers keep unknown fields; writers never make them). ``EventError`` otherwise."""
    if isinstance(event, OtherEvent) or event.type not in EVENT_TYPES:
        raise EventError(f"unknown event type {event.type!r}: use one of {', '.join(EVENT_TYPES)}")
    extra = sorted(event.model_extra or {})
    if extra:
        fields = ", ".join(sorted(set(type(event).model_fields) - {"id", "at", "type"}))
        raise EventError(f"event {event.type!r}: unknown field(s) {extra}: its fields are {fields}")
    return event


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decode_entry(entry_id: Any, fields: dict[Any, Any]) -> JobEvent:
    """The typed event of a raw Redis stream entry (bytes or str keys and values)."""
    decoded = {_text(k): _text(v) for k, v in fields.items()}
    try:
        data = json.loads(decoded.get("data", "{}"))
    except ValueError:
        data = {"raw": decoded.get("data", "")}
    if not isinstance(data, dict):
        data = {"value": data}
    try:
        at = float(decoded.get("at", 0) or 0)
    except ValueError:
        at = 0.0
    return read_event(_text(entry_id), decoded.get("type", ""), data, at)


def encode_event(event: JobEvent) -> dict[str, str]:
    """The stream entry fields of ``event`` (``type``, ``data`` as JSON, ``at``)."""
    return {
        "type": event.type,
        "data": json.dumps(event.data, ensure_ascii=False, default=str),
        "at": f"{event.at or time.time():.3f}",
    }


def event_json(event: JobEvent) -> str:
    """One event as a flat JSON object (``id``, ``type``, ``at`` and its fields): the SSE payload."""
    return json.dumps(
        {"id": event.id, "type": event.type, "at": event.at, **event.data}, ensure_ascii=False, default=str
    )


@dataclass(frozen=True)
class StreamSettings:
    """How a job's event stream is written.

    ``maxlen`` caps the stream (approximately, as Redis trims whole nodes); ``deltas`` turns
    ``model_delta`` events on; a reply's deltas are published at most every ``delta_interval``
    seconds, or sooner once ``delta_max_chars`` characters are waiting.
    """

    maxlen: int = 10000
    deltas: bool = True
    delta_interval: float = 0.1
    delta_max_chars: int = 512


__all__ = [
    "EVENT_TYPES",
    "ApprovalDecided",
    "ApprovalRequested",
    "ChildEnded",
    "ChildrenSpawned",
    "EventError",
    "Final",
    "JobEvent",
    "JobStarted",
    "MemoryCompacted",
    "MessageReceived",
    "ModelDelta",
    "ModelReply",
    "OtherEvent",
    "QuestionAnswered",
    "QuestionAsked",
    "RoundStarted",
    "StreamSettings",
    "ToolCall",
    "ToolResult",
    "Waiting",
    "WebhookDelivered",
    "WebhookFailed",
    "checked",
    "decode_entry",
    "encode_event",
    "event_json",
    "make_event",
    "read_event",
]
