"""Server-sent events, parsed line by line as they arrive (the parts both clients share)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import ValidationError

from tandem.client.http.errors import ServerError
from tandem.client.http.models import Event


@dataclass
class SseParser:
    """Turns the lines of a ``text/event-stream`` into ``Event``s (comments and heartbeats are
    skipped). ``last_id`` is the id of the last event seen: what ``Last-Event-ID`` resumes from."""

    last_id: str = "0"
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, line: str) -> Event | None:
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

    def _dispatch(self) -> Event | None:
        data, event_id = "\n".join(self._data), self._id
        self._data, self._id = [], None
        if not data:
            return None
        try:
            event = Event.model_validate(json.loads(data))
        except (ValueError, ValidationError) as exc:
            raise ServerError(f"the event stream sent an event that is not an event's JSON: {exc}") from None
        self.last_id = event_id or event.id
        return event


def stream_headers(token: str | None, after: str) -> dict[str, str]:
    """The headers of an event-stream request resuming after event ``after``."""
    headers = {"Accept": "text/event-stream", "Last-Event-ID": after}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
