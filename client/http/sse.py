"""Server-sent events, parsed line by line as they arrive, into the typed events of
``tandem.client.events`` (the same models ``JobHandle.events()`` gives)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tandem.client.events import JobEvent, event_from_json
from tandem.client.http.errors import ServerError


@dataclass
class SseParser:
    """Turns the lines of a ``text/event-stream`` into ``JobEvent``s (comments and heartbeats are
    skipped). ``last_id`` is the id of the last event seen: what ``Last-Event-ID`` resumes from."""

    last_id: str = "0"
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, line: str) -> JobEvent | None:
        """Take one line (without its end of line); an event when the line ends one."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None

    def _dispatch(self) -> JobEvent | None:
        data, event_id = "\n".join(self._data), self._id
        self._data, self._id = [], None
        if not data:
            return None
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise ServerError(
                f"the event stream sent an event that is not JSON ({exc}): {data[:120]!r}"
            ) from None
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            raise ServerError(f"the event stream sent an event without a type: {data[:120]!r}")
        event = event_from_json({**payload, "id": payload.get("id") or event_id or ""})
        self.last_id = event_id or event.id
        return event
