"""The conversation endpoints of ``tandem api``: a person's message into a running job, follow-ups
and threads.

- ``POST /v1/jobs/{id}/messages`` (scope ``control``): ``{"text": "...", "idempotency_key": "..."}``
  (the key may come as an ``Idempotency-Key`` header instead) sends the text through
  ``tandem.message``; 202 ``{"id", "message_id", "round"}`` once a worker stored it, 409
  ``job_ended`` for a job that has ended, 422 for a text that is empty or too long, 504 when no
  worker took it in time (it was withdrawn and never reaches the job).

- ``POST /v1/jobs/{id}/follow-up`` (scope ``control``): ``{"goal": "...", "idempotency_key": "..."}``
  starts a new job in the ended job's thread through ``tandem.follow_up``; 202 with its id and
  ``thread_id``, 409 ``job_state`` while the job runs.
- ``GET /v1/threads/{id}`` (scope ``read``): the thread's jobs in order (``job_id``, ``goal``,
  ``state``, ``deliverable``); 404 when the token's tenant has no job in it.

Owners as everywhere (``tandem.workers.api.callers``): another tenant's job is 404.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tandem.tasks.control.threads import thread_jobs
from tandem.workers.api.bodies import read_json
from tandem.workers.api.callers import caller, unknown_job
from tandem.workers.api.errors import ApiError

if TYPE_CHECKING:
    from tandem.workers.api.app import Api

MAX_KEY_CHARS = 200
"""The longest idempotency key a request may carry."""


class Conversation:
    """The conversation endpoints over the API's state (``Api``)."""

    def __init__(self, api: Api) -> None:
        self.api = api

    async def post_message(self, request: Request) -> Response:
        """``POST /v1/jobs/{id}/messages``."""
        api = self.api
        job_id = request.path_params["job_id"]
        handle, owner = await run_in_threadpool(api.owned, job_id, caller(request, "control"))
        raw = await read_json(request, api.settings.api_max_body)
        body = raw if isinstance(raw, dict) else {}
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(
                422,
                "invalid_message",
                'send {"text": "..."} (a non-empty string; "idempotency_key" is optional)',
                fields=[{"field": "text", "message": "a non-empty string"}],
            )
        key = _key(body.get("idempotency_key", request.headers.get("idempotency-key")))
        answer = await run_in_threadpool(
            partial(handle.message_answer, text, idempotency_key=key, timeout=api.decide_timeout, owner=owner)
        )
        return message_response(job_id, answer)

    async def follow_up(self, request: Request) -> Response:
        """``POST /v1/jobs/{id}/follow-up``."""
        api = self.api
        job_id = request.path_params["job_id"]
        handle, owner = await run_in_threadpool(api.owned, job_id, caller(request, "control"))
        raw = await read_json(request, api.settings.api_max_body)
        body = raw if isinstance(raw, dict) else {}
        goal = body.get("goal")
        if not isinstance(goal, str) or not goal.strip():
            raise ApiError(
                422,
                "invalid_follow_up",
                'send {"goal": "..."} (a non-blank string; "idempotency_key" is optional)',
                fields=[{"field": "goal", "message": "a non-blank string"}],
            )
        key = _key(body.get("idempotency_key", request.headers.get("idempotency-key")))
        follow = partial(handle.follow_up, goal, idempotency_key=key, timeout=api.decide_timeout, owner=owner)
        new = await api._worker_answer(follow)
        status = await run_in_threadpool(new.status)
        spec = await run_in_threadpool(api.store.spec, job_id)
        reply = {
            "id": new.id,
            "follow_up_of": job_id,
            "thread_id": (spec.thread_id if spec is not None else None) or job_id,
            "status": status.model_dump(mode="json"),
            "links": {"self": f"/v1/jobs/{new.id}", "events": f"/v1/jobs/{new.id}/events"},
        }
        return JSONResponse(reply, status_code=202, headers={"Location": f"/v1/jobs/{new.id}"})

    async def thread(self, request: Request) -> Response:
        """``GET /v1/threads/{id}``."""
        api = self.api
        token = caller(request, "read")
        thread_id = request.path_params["thread_id"]
        owner = None if token.admin else token.tenant
        jobs = await run_in_threadpool(thread_jobs, api.store, thread_id, owner)
        if not jobs:
            raise ApiError(
                404, "unknown_thread", f"no thread {thread_id[:80]!r} is known (no job of yours is in it)"
            )
        body = {"id": thread_id, "jobs": [j.model_dump(mode="json") for j in jobs]}
        return JSONResponse(body)


def _key(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_KEY_CHARS):
        raise ApiError(
            422,
            "invalid_idempotency_key",
            f"idempotency_key must be a string of 1 to {MAX_KEY_CHARS} characters (a key of your choice)",
            fields=[{"field": "idempotency_key", "message": f"a string of 1 to {MAX_KEY_CHARS} characters"}],
        )
    return value


def message_response(job_id: str, answer: dict[str, Any]) -> JSONResponse:
    """The answer of ``POST /v1/jobs/{id}/messages`` for ``tandem.message``'s JSON ``answer``."""
    if answer.get("accepted"):
        body = {"id": job_id, "message_id": answer.get("message_id"), "round": answer.get("round")}
        return JSONResponse(body, status_code=202)
    error = str(answer.get("error") or "the message was refused; nothing was added")
    reason = answer.get("reason")
    if reason == "unknown":
        raise unknown_job(job_id)
    if reason == "withdrawn":
        raise ApiError(504, "no_worker_answered", error, withdrawn=True)
    if reason == "ended":
        raise ApiError(409, "job_ended", error)
    if reason == "full":
        raise ApiError(409, "too_many_messages", error)
    raise ApiError(422, "invalid_message", error, fields=[{"field": "text", "message": error}])


def conversation_paths(json_body: Any, error: Any, job_id_param: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI paths of these endpoints (``json_body``/``error``: the document's helpers)."""
    unknown = error("No such job (or another tenant's).")
    return {
        "/v1/jobs/{job_id}/messages": {
            "post": {
                "summary": "Send a person's message into a running job",
                "description": 'Body: {"text": "...", "idempotency_key": "..."} (the key may come as an '
                "Idempotency-Key header). The job's leading model (the Thinker of a dual job, the Actor "
                "otherwise) reads it at the start of its next round, once; it stays in the job's memory "
                "(resume and fork replay it). The same key gets the same answer and adds nothing.",
                "operationId": "sendMessage",
                "parameters": [job_id_param],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["text"],
                                "properties": {
                                    "text": {"type": "string", "minLength": 1},
                                    "idempotency_key": {"type": "string", "maxLength": MAX_KEY_CHARS},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "202": json_body(
                        {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "message_id": {"type": "string"},
                                "round": {"type": "integer"},
                            },
                        },
                        "Stored: round is the round whose leading model call reads it.",
                    ),
                    "401": error("Missing or unknown bearer token."),
                    "404": unknown,
                    "409": error("job_ended: the job has ended (follow up on it); too_many_messages."),
                    "422": error("No text, or a text over TANDEM_MAX_GOAL_CHARS, or a bad idempotency_key."),
                    "504": error("No worker took the message in time: it was withdrawn."),
                },
            }
        },
        "/v1/jobs/{job_id}/follow-up": {
            "post": {
                "summary": "Follow up on an ended job: a new job in its thread",
                "description": 'Body: {"goal": "...", "idempotency_key": "..."}. The new job has the ended '
                "job's spec with this goal, and reads the thread so far (each earlier job's goal, the "
                "person's messages and its answer, within TANDEM_MAX_THREAD_CHARS, oldest dropped first).",
                "operationId": "followUp",
                "parameters": [job_id_param],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["goal"],
                                "properties": {
                                    "goal": {"type": "string", "minLength": 1},
                                    "idempotency_key": {"type": "string", "maxLength": MAX_KEY_CHARS},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "202": json_body(
                        {"type": "object"}, "Started: the new job's id, thread_id, status, links."
                    ),
                    "401": error("Missing or unknown bearer token."),
                    "404": unknown,
                    "409": error("job_state: the job has not ended (send it a message instead)."),
                    "422": error("No goal, or one over TANDEM_MAX_GOAL_CHARS."),
                    "504": error("No worker answered in time."),
                },
            }
        },
        "/v1/threads/{thread_id}": {
            "get": {
                "summary": "A thread's jobs, in order",
                "description": "Each job of the thread the token's tenant owns (every tenant's for admin): "
                "job_id, goal, state, owner, joined_at, deliverable (once it ended with one).",
                "operationId": "getThread",
                "parameters": [
                    {"name": "thread_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": json_body({"type": "object"}, '{"id", "jobs": [...]}'),
                    "401": error("Missing or unknown bearer token."),
                    "404": error("No job of the token's tenant is in this thread."),
                },
            }
        },
    }


__all__ = ["Conversation", "conversation_paths", "message_response"]
