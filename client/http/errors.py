"""The errors of the HTTP client: one class per kind of answer the API gives.

The tree::

    ClientError               the HTTP client's root: an answer other than success, or none;
        │                     ``status``, ``code`` (the API's error code, like ``unknown_job``),
        │                     ``message``, ``fields``
        ├── InvalidRequest    400, 413, 422: the request is wrong (``fields`` name what)
        ├── Unauthorized      401, 403: no token, a wrong one, or one without the right
        ├── NotFound          404: no such job (never submitted, or its records expired)
        ├── Conflict          409: refused in the job's state (ended, not awaiting, decided)
        │   └── StalePauseError  409 ``stale_pause``: a decision for a pause that is not current
        │                     (``pause_id`` asked, ``current_pause`` the job waits on, or ``None``)
        ├── RateLimited       429: too many requests or streams (``retry_after`` seconds)
        ├── Unavailable       503, 504: Redis, or any worker, did not answer (``retry_after``)
        ├── ServerError       500 and any other status
        ├── ConnectionFailed  no answer at all (the API does not answer, or the link broke)
        ├── PoolExhausted     the client's own pool of connections stayed full (``max_streams``
        │                     or ``max_calls``): its limit, not the API's; nothing was sent
        └── WaitTimeout       ``result(timeout=...)``: the job had not ended in time
"""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """The API answered with an error, or did not answer (see the module docstring)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str = "",
        fields: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.fields = fields or []
        self.retry_after = retry_after


class InvalidRequest(ClientError):
    """400, 413 or 422: the request is wrong; ``fields`` name each bad field."""


class Unauthorized(ClientError):
    """401 or 403: the token is missing, wrong, or not allowed this."""


class NotFound(ClientError):
    """404: no such job (never submitted, or its records expired)."""


class Conflict(ClientError):
    """409: refused in the job's state (it ended, awaits nothing, or was decided); nothing changed."""


class StalePauseError(Conflict):
    """409 ``stale_pause``: the decision named a pause (``pause_id``) that is not the job's current
    one (it ended, or the job paused again); nothing changed. ``current_pause`` is the pause the
    job waits on now (``None``: none); decide on it after looking at its calls."""

    def __init__(
        self, message: str, *, pause_id: str | None = None, current_pause: str | None = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.pause_id = pause_id
        self.current_pause = current_pause


class RateLimited(ClientError):
    """429: too many requests or streams; try again after ``retry_after`` seconds."""


class Unavailable(ClientError):
    """503 or 504: Redis or the workers did not answer; try again after ``retry_after`` seconds."""


class ServerError(ClientError):
    """500, or a status the API does not document."""


class ConnectionFailed(ClientError):
    """The API did not answer at all (refused, timed out, or the link broke and stayed down)."""


class PoolExhausted(ClientError):
    """Every connection of the client's own pool stayed busy for ``timeout`` seconds, so the request
    was never sent: ``code`` ``client_streams_full`` (``max_streams`` event streams open) or
    ``client_calls_full`` (``max_calls`` requests in flight). Close what you no longer read, or
    make the client with a larger pool; the API is not at fault."""


class WaitTimeout(ClientError):
    """The job had not ended within the ``timeout`` given to ``result``."""


_BY_STATUS: dict[int, type[ClientError]] = {
    400: InvalidRequest,
    413: InvalidRequest,
    422: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    429: RateLimited,
    503: Unavailable,
    504: Unavailable,
}


def error_for(status: int, body: Any, retry_after: str | None) -> ClientError:
    """The error of an answer with ``status`` and JSON ``body`` (the API's ``{"error": {...}}``)."""
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    code = str(error.get("code") or f"http_{status}")
    message = str(error.get("message") or f"the API answered {status}")
    fields = error.get("fields") if isinstance(error.get("fields"), list) else None
    wait: float | None = None
    if retry_after:
        try:
            wait = float(retry_after)
        except ValueError:
            wait = None
    text = f"{message} ({status} {code})"
    if status == 409 and code == "stale_pause":
        pauses = {
            k: error.get(k) if isinstance(error.get(k), str) else None for k in ("pause_id", "current_pause")
        }
        return StalePauseError(text, status=status, code=code, fields=fields, **pauses)
    kind = _BY_STATUS.get(status, ServerError)
    return kind(text, status=status, code=code, fields=fields, retry_after=wait)
