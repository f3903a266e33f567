"""The requests of the API and the reading of its answers, with no I/O: what ``Client`` and
``AsyncClient`` share (they only differ in how they send).

A ``Call`` is one endpoint's request as the API documents it (method, path, body, query);
``Requests`` turns it into the ``httpx.Request`` that goes on the wire: the full URL under the
base URL, ``Authorization: Bearer <token>``, the timeouts. ``decode`` reads an answer, and every
answer that is not a success becomes the ``ClientError`` of its status (``errors.error_for``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from tandem.client.http.errors import ClientError, ConnectionFailed, InvalidRequest, ServerError, error_for
from tandem.client.http.options import ClientOptions

CONNECT_TIMEOUT = 10.0
"""How long opening a connection may take, for every request."""


@dataclass(frozen=True)
class Call:
    """One request: method, path under the base URL, JSON body (``None``: none), query."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None

    @property
    def safe(self) -> bool:
        """Whether asking again cannot change anything (a read)."""
        return self.method == "GET"


class Requests:
    """Builds the ``httpx.Request`` of each ``Call`` for the API at ``base_url`` with ``token``.

    Every request carries the full URL and, with a token, ``Authorization: Bearer <token>``; its
    timeouts ride in the request itself (``options.timeout`` seconds for a call;
    ``options.stream_silence`` seconds without a byte, or until the deadline, for an event stream;
    ``options.timeout`` for a free connection of its pool), so a driver only sends it.
    """

    def __init__(self, base_url: str, token: str | None, options: ClientOptions) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must be the API's http:// or https:// URL (like 'http://127.0.0.1:8000'), "
                f"got {base_url!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.options = options

    def headers(self) -> dict[str, str]:
        """The headers of every request."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def build(self, call: Call) -> httpx.Request:
        """The request of ``call``."""
        return httpx.Request(
            call.method,
            self.base_url + call.path,
            params=dict(call.params) if call.params else None,
            json=call.body,
            headers=self.headers(),
            extensions={"timeout": httpx.Timeout(self.options.timeout, connect=CONNECT_TIMEOUT).as_dict()},
        )

    def stream(self, job_id: str, after: str, deadline: float | None, now: float) -> httpx.Request:
        """The request of job ``job_id``'s event stream after event ``after``: cut when silent past
        ``options.stream_silence``, or past ``deadline`` (monotonic time; ``now`` is the time now)."""
        silence = self.options.stream_silence
        read = silence if deadline is None else max(0.05, min(silence, deadline - now))
        headers = {**self.headers(), "Accept": "text/event-stream", "Last-Event-ID": after}
        timeout = httpx.Timeout(CONNECT_TIMEOUT, read=read, pool=self.options.timeout)
        return httpx.Request(
            "GET",
            self.base_url + job_path(job_id, "/events"),
            headers=headers,
            extensions={"timeout": timeout.as_dict()},
        )


class HasId(Protocol):
    """Anything with a job's ``id``: a handle (``RemoteJob``, ``AsyncRemoteJob``, ``JobHandle``)."""

    @property
    def id(self) -> str:
        """The job's id."""
        ...


JobRef = str | HasId
"""A job, by its id or by its handle: what every method of the clients takes."""


def job_id_of(job: JobRef) -> str:
    """The id of ``job``: an id, or a handle's ``id``."""
    if isinstance(job, str):
        return job
    found = getattr(job, "id", None)
    if isinstance(found, str):
        return found
    raise InvalidRequest(f"job must be a job's id or its handle, got {job!r:.80}", code="invalid_job_id")


def job_path(job_id: str, tail: str = "") -> str:
    """The path of a job's resource (the id quoted, so no id can reach another path)."""
    if not isinstance(job_id, str) or not job_id:
        raise InvalidRequest(
            f"job_id must be a non-empty string (a job's id), got {job_id!r}", code="invalid_job_id"
        )
    return f"/v1/jobs/{quote(job_id, safe='')}{tail}"


def artifact_path(job_id: str, handle: str) -> str:
    """The path of a job's artifact (``GET /v1/jobs/{id}/artifacts/{handle}``; the handle quoted)."""
    if not isinstance(handle, str) or not handle:
        raise InvalidRequest(
            f"handle must be a non-empty string (a tool_result event's artifact.handle), got {handle!r}",
            code="invalid_handle",
        )
    return job_path(job_id, f"/artifacts/{quote(handle, safe='')}")


def decode_text(response: httpx.Response) -> str:
    """The body of a successful answer as text (UTF-8); the matching ``ClientError`` otherwise."""
    if not response.is_success:
        raise decode_error(response)
    return response.content.decode("utf-8")


def submit_call(spec: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> Call:
    """``POST /v1/jobs`` with ``spec`` and ``fields`` merged (``fields`` win)."""
    body = {**(spec or {}), **fields}
    if "goal" not in body:
        raise InvalidRequest("a job needs a goal: submit(goal='...')", code="invalid_spec")
    return Call("POST", "/v1/jobs", body)


def decisions_for(indices: tuple[int, ...], approve: bool, reason: str | None) -> list[dict[str, Any]] | bool:
    """The decisions of ``approve``/``reject``: every undecided call (no indices), or those named."""
    if not indices and reason is None:
        return approve
    if not indices:
        raise InvalidRequest("a reason applies to named calls: reject(job_id, 1, reason='...')")
    extra = {} if reason is None else {"reason": reason}
    return [{"index": i, "approve": approve, **extra} for i in indices]


def decide_call(
    job_id: str, decisions: list[dict[str, Any]] | bool, pause_id: str | None, idempotency_key: str | None
) -> Call:
    """``POST /v1/jobs/{id}/decisions`` for pause ``pause_id``, with an idempotency key (a fresh one
    if none is given: the request may then be sent again safely)."""
    body: dict[str, Any] = {"decisions": decisions, "idempotency_key": idempotency_key or uuid.uuid4().hex}
    if pause_id is not None:
        body["pause_id"] = pause_id
    return Call("POST", job_path(job_id, "/decisions"), body)


def current_pause(job: Mapping[str, Any]) -> str | None:
    """The id of the pause a job (``GET /v1/jobs/{id}``'s body) waits on, if any."""
    approval = job.get("approval")
    status = job.get("status")
    if not isinstance(approval, dict) or not isinstance(status, dict):
        return None
    if status.get("state") != "awaiting_approval" or approval.get("decided_by"):
        return None
    pause = approval.get("pause_id")
    return pause if isinstance(pause, str) else None


def answer_call(job_id: str, answer: Any, pause_id: str | None, idempotency_key: str | None) -> Call:
    """``POST /v1/jobs/{id}/answers`` for pause ``pause_id``, with an idempotency key (a fresh one
    if none is given: the request may then be sent again safely)."""
    body: dict[str, Any] = {"answer": answer, "idempotency_key": idempotency_key or uuid.uuid4().hex}
    if pause_id is not None:
        body["pause_id"] = pause_id
    return Call("POST", job_path(job_id, "/answers"), body)


def current_question(job: Mapping[str, Any]) -> str | None:
    """The id of the question's pause a job (``GET /v1/jobs/{id}``'s body) waits on, if any."""
    status = job.get("status")
    if not isinstance(status, dict) or status.get("state") != "awaiting_approval":
        return None
    if status.get("pause_kind") != "question":
        return None
    pause = status.get("pause_id")
    return pause if isinstance(pause, str) else None


def fork_call(job_id: str, round_no: int, goal: str | None, max_rounds: int | None) -> Call:
    """``POST /v1/jobs/{id}/fork``: a new job from rounds ``0..round_no-1``."""
    body: dict[str, Any] = {"round": round_no}
    if goal is not None:
        body["goal"] = goal
    if max_rounds is not None:
        body["max_rounds"] = max_rounds
    return Call("POST", job_path(job_id, "/fork"), body)


def message_call(job_id: str, text: str, idempotency_key: str | None) -> Call:
    """``POST /v1/jobs/{id}/messages`` with an idempotency key (a fresh one if none is given)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(f"text must be a non-empty string, got {text!r:.80}", code="invalid_message")
    body = {"text": text, "idempotency_key": idempotency_key or uuid.uuid4().hex}
    return Call("POST", job_path(job_id, "/messages"), body)


def follow_up_call(job_id: str, goal: str, idempotency_key: str | None) -> Call:
    """``POST /v1/jobs/{id}/follow-up``: a new job in the ended job's thread."""
    if not isinstance(goal, str) or not goal.strip():
        raise InvalidRequest(f"goal must be a non-blank string, got {goal!r:.80}", code="invalid_follow_up")
    body = {"goal": goal, "idempotency_key": idempotency_key or uuid.uuid4().hex}
    return Call("POST", job_path(job_id, "/follow-up"), body)


def thread_path(thread_id: str) -> str:
    """The path of a thread (the id quoted, so no id can reach another path)."""
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidRequest(
            f"thread_id must be a non-empty string, got {thread_id!r}", code="invalid_thread_id"
        )
    return f"/v1/threads/{quote(thread_id, safe='')}"


def resume_call(job_id: str, max_rounds: int | None) -> Call:
    """``POST /v1/jobs/{id}/resume``, with a new round budget if given."""
    return Call("POST", job_path(job_id, "/resume"), {} if max_rounds is None else {"max_rounds": max_rounds})


def decode(response: httpx.Response) -> Any:
    """The JSON of a successful answer; the matching ``ClientError`` otherwise."""
    if not response.is_success:
        raise decode_error(response)
    try:
        return response.json() if response.content else None
    except ValueError:
        raise ServerError(
            f"the API answered {response.status_code} with a body that is not JSON: {response.text[:120]!r}",
            status=response.status_code,
        ) from None


def decode_error(response: httpx.Response) -> ClientError:
    """The ``ClientError`` of an answer that is not a success."""
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    return error_for(response.status_code, body, response.headers.get("Retry-After"))


def unreachable(base_url: str, exc: Exception) -> ClientError:
    """The error of a request that got no answer (``exc`` itself if it is a ``ClientError``)."""
    if isinstance(exc, ClientError):
        return exc
    return ConnectionFailed(f"the tandem API at {base_url} does not answer: {type(exc).__name__}: {exc}")
