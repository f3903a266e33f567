"""``POST /v1/jobs/{id}/answers``: a person's answer to the question a job waits on.

The body is ``{"answer": <JSON value>, "pause_id": "...", "idempotency_key": "..."}`` (``pause_id``
from ``question_asked`` or ``GET /v1/jobs/{id}``'s ``status.pause_id``; the header
``Idempotency-Key`` works too). It needs the ``approve`` scope and the job's tenant (as a
decision does). The answer goes through ``tandem.answer`` (``JobHandle.answer_reply``):

- 200 ``{"id", "pause_id", "round", "call_index", "answer"}``: stored, the job goes on;
- 409 ``stale_pause`` (the pause named is not the one the job waits on: ``pause_id``,
  ``current_pause``) or ``answer_refused`` (the job waits on no question, has ended, ...);
- 422 ``invalid_answer``: the answer does not fit the question's schema (the message names the
  field and the reason), or a body without ``answer``;
- 504 ``no_worker_answered``: no worker took it in time, so it was withdrawn (it never applies).

A refused answer changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tandem.tasks.errors import DecisionRefused
from tandem.workers.api.bodies import pause_fields, read_json
from tandem.workers.api.callers import caller, unknown_job
from tandem.workers.api.errors import ApiError

if TYPE_CHECKING:
    from tandem.workers.api.app import Api

__all__ = ["answer_endpoint", "answer_response"]


def answer_endpoint(api: Api) -> Callable[[Request], Awaitable[Response]]:
    """The handler of ``POST /v1/jobs/{id}/answers`` for ``api``."""

    async def answer(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle, owner = await run_in_threadpool(api.owned, job_id, caller(request, "approve"))
        raw = await read_json(request, api.settings.api_max_body)
        body = raw if isinstance(raw, dict) else {}
        if "answer" not in body:
            raise ApiError(
                422,
                "invalid_answer",
                'send {"pause_id": "...", "answer": <a JSON value that fits the question\'s '
                "answer_schema>} (text for a question without one)",
                fields=[{"field": "answer", "message": "missing"}],
            )
        pause_id, key = pause_fields(body, request)
        try:
            reply = await run_in_threadpool(
                partial(
                    handle.answer_reply,
                    body["answer"],
                    pause_id=pause_id,
                    idempotency_key=key,
                    timeout=api.decide_timeout,
                    owner=owner,
                )
            )
        except DecisionRefused as exc:
            raise ApiError(409, "answer_refused", str(exc), pause_id=None, current_pause=None) from None
        return answer_response(job_id, reply)

    return answer


def answer_response(job_id: str, reply: dict[str, Any]) -> JSONResponse:
    """The response for ``tandem.answer``'s JSON ``reply`` (see the module docstring)."""
    if reply.get("accepted"):
        fields = ("pause_id", "round", "call_index", "answer")
        return JSONResponse({"id": job_id, **{k: reply.get(k) for k in fields}})
    pauses = {"pause_id": reply.get("pause_id"), "current_pause": reply.get("current_pause")}
    error = str(reply.get("error") or "the answer was refused; nothing changed")
    reason = reply.get("reason")
    if reason == "unknown":  # it expired since the API looked at it
        raise unknown_job(job_id)
    if reason == "withdrawn":
        raise ApiError(504, "no_worker_answered", error, withdrawn=True, **pauses)
    if reason == "invalid_answer":
        raise ApiError(422, "invalid_answer", error, fields=[{"field": "answer", "message": error}], **pauses)
    raise ApiError(409, "stale_pause" if reason == "stale_pause" else "answer_refused", error, **pauses)
