"""The HTTP API of ``tandem api``: jobs in, status and results out, events as server-sent events.

``create_api(settings)`` builds the ASGI app. Routes (all JSON; errors are
``{"error": {"code", "message", ...}}``):

* ``POST /v1/jobs``: a ``JobSpec``; 202 with the job's id and status; 422 naming the field.
* ``GET /v1/jobs``: the recent jobs' statuses, newest first (``?limit=``, at most 200).
* ``GET /v1/jobs/{id}``: status and, once it ended, the ``JobResult``.
* ``GET /v1/jobs/{id}/events``: the job's events as ``text/event-stream``; each SSE ``id`` is the
  Redis stream id, so ``Last-Event-ID`` (or ``?after=``) resumes right after it. Comment lines keep
  an idle connection alive; the stream ends after the ``final`` event.
* ``POST /v1/jobs/{id}/cancel``: ask the job to stop (202), 409 once it has ended.
* ``POST /v1/jobs/{id}/decisions``: approve or reject tool calls awaiting approval (409 when
  refused: nothing changed); ``GET /v1/jobs/{id}`` shows the pending ``approval``.
* ``POST /v1/jobs/{id}/resume``: continue a failed, cancelled or truncated job from its last
  stored step (body ``{"max_rounds": N}`` optional); 202. ``POST /v1/jobs/{id}/fork``: a new job
  from rounds ``0..round-1`` (body ``{"round": R, "goal"?, "max_rounds"?}``); 202 with its id. Refusals:
  404 (unknown or expired), 409 (not ended), 422 (budget or round), 504 (no worker answered).
* ``GET /openapi.json``, ``GET /healthz``, and the job console at ``/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, TypeVar

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ConnectionError as RedisConnectionError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from tandem.broker_config import Settings
from tandem.broker_config.job_redis import async_job_store_client, job_store_client
from tandem.tasks.client import JobHandle, submit
from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.errors import DecisionRefused, JobSpecError, JobTimeout, ResumeRefused, UnknownJobError
from tandem.tasks.job_events import decode_entry, event_json
from tandem.tasks.runtime import redis_options
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec
from tandem.tasks.state.store import FINAL_LOOKAHEAD, JobStore, entry_types, final_ends
from tandem.workers.api.errors import ApiError, error_response
from tandem.workers.api.guards import BearerAuth, BodyLimit, too_large
from tandem.workers.api.openapi import openapi_document

T = TypeVar("T")
_STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
_JOB_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}


class Api:
    """The API's state: the job store, an async Redis client for event streams, the Celery app."""

    def __init__(
        self,
        settings: Settings,
        *,
        celery_app: Celery | None = None,
        redis: Redis | None = None,
        async_redis: AsyncRedis | None = None,
        heartbeat: float = 15.0,
        decide_timeout: float = 30.0,
    ) -> None:
        self.settings = settings
        if celery_app is None:
            from tandem.tasks.app import create_app

            celery_app = create_app(settings)
        self.celery = celery_app
        options = redis_options(settings)
        self.redis = redis or job_store_client(settings, **options)
        # An event stream blocks in XREAD for up to ``heartbeat`` seconds: reads may wait that long
        # on top of TANDEM_REDIS_SOCKET_TIMEOUT (redis-py's own default would be 5 s).
        wait = {**options, "socket_timeout": settings.redis_socket_timeout + heartbeat}
        self.async_redis = async_redis or async_job_store_client(settings, **wait)
        self.store = JobStore.from_settings(self.redis, settings)
        self.heartbeat = heartbeat
        self.decide_timeout = decide_timeout

    # -- helpers -----------------------------------------------------------------------------

    def handle(self, job_id: str) -> JobHandle:
        """The handle of a known job (stored, or refused at intake); 404 otherwise."""
        if not _JOB_ID.match(job_id):
            raise ApiError(
                404, "unknown_job", f"no job {job_id[:80]!r}: job ids are what POST /v1/jobs returned"
            )
        handle = JobHandle(job_id, self.store, self.celery)
        # No riding out a Redis outage inside a request: it answers 503 with Retry-After at once.
        handle.reconnect_call = 0.0
        try:
            handle.status()
        except UnknownJobError:
            raise ApiError(
                404, "unknown_job", f"no job {job_id!r} is known (never submitted, or its records expired)"
            ) from None
        return handle

    def job_body(self, job_id: str) -> dict[str, Any]:
        """The JSON of ``GET /v1/jobs/{id}``."""
        handle = self.handle(job_id)
        try:
            result: JobResult | None = handle.result(timeout=0)
        except JobTimeout:
            result = None
        approval = ApprovalStore(self.store).get(job_id)
        return {
            "id": job_id,
            "status": handle.status().model_dump(mode="json"),
            "result": None if result is None else result.model_dump(mode="json"),
            "approval": None if approval is None else approval.model_dump(mode="json"),
            "links": _links(job_id),
        }

    # -- endpoints ---------------------------------------------------------------------------

    async def create_job(self, request: Request) -> Response:
        raw = await read_json(request, self.settings.api_max_body)
        if not isinstance(raw, dict):
            raise ApiError(
                422,
                "invalid_spec",
                f"the body must be a JSON object (a job spec), got {type(raw).__name__}",
                fields=[{"field": "(body)", "message": "not a JSON object"}],
            )
        spec = _validate(raw)
        try:
            handle = await run_in_threadpool(submit, spec, app=self.celery, store=self.store)
        except JobSpecError as exc:  # a limit of TANDEM_MAX_* (the message names it)
            raise ApiError(422, "invalid_spec", str(exc)) from None
        status = await run_in_threadpool(handle.status)
        body = {"id": handle.id, "status": status.model_dump(mode="json"), "links": _links(handle.id)}
        return JSONResponse(body, status_code=202, headers={"Location": f"/v1/jobs/{handle.id}"})

    async def list_jobs(self, request: Request) -> Response:
        raw = request.query_params.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 200:
            raise ApiError(400, "invalid_query", f"limit={raw!r} must be a whole number from 1 to 200")
        jobs = await run_in_threadpool(self.store.recent, int(raw))
        return JSONResponse({"jobs": [j.model_dump(mode="json") for j in jobs]})

    async def get_job(self, request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(self.job_body, request.path_params["job_id"]))

    async def cancel_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle = await run_in_threadpool(self.handle, job_id)
        status = await run_in_threadpool(handle.status)
        if status.state in FINAL_STATES:
            raise ApiError(
                409, "job_ended", f"job {job_id!r} has already ended ({status.state}): nothing to cancel"
            )
        await run_in_threadpool(handle.cancel)
        status = await run_in_threadpool(handle.status)
        body = {"id": job_id, "cancel_requested": True, "status": status.model_dump(mode="json")}
        return JSONResponse(body, status_code=202)

    async def decide(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle = await run_in_threadpool(self.handle, job_id)
        raw = await read_json(request, self.settings.api_max_body)
        decisions = raw.get("decisions") if isinstance(raw, dict) else None
        if not isinstance(decisions, bool | list):
            raise ApiError(
                422,
                "invalid_decisions",
                'send {"decisions": [{"index": 1, "approve": true}, {"index": 2, "approve": false, '
                '"reason": "..."}]} (an "args" object edits a call), or {"decisions": true|false} '
                "for every undecided call",
                fields=[{"field": "decisions", "message": "a list of decisions, or true/false"}],
            )
        try:
            decided = await run_in_threadpool(handle.decide, decisions, timeout=self.decide_timeout)
        except DecisionRefused as exc:
            raise ApiError(409, "decision_refused", str(exc)) from None
        except CeleryTimeout:
            raise ApiError(
                504,
                "no_worker_answered",
                f"no worker applied the decisions within {self.decide_timeout:g} s: are workers "
                "running? Nothing was decided unless GET /v1/jobs/{id} shows it",
            ) from None
        return JSONResponse({"id": job_id, "decisions": [d.model_dump(mode="json") for d in decided]})

    async def resume_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle = await run_in_threadpool(self.handle, job_id)
        body = await _optional_json(request, self.settings.api_max_body)
        max_rounds = body.get("max_rounds")
        if max_rounds is not None and (isinstance(max_rounds, bool) or not isinstance(max_rounds, int)):
            raise ApiError(
                422,
                "invalid_resume",
                f"max_rounds must be a whole number, got {max_rounds!r}: "
                'send {"max_rounds": 30}, or no body to keep the budget',
                fields=[{"field": "max_rounds", "message": "not a whole number"}],
            )
        await self._worker_answer(lambda: handle.resume(max_rounds, timeout=self.decide_timeout))
        status = await run_in_threadpool(handle.status)
        reply = {"id": job_id, "resumed": True, "status": status.model_dump(mode="json")}
        return JSONResponse({**reply, "links": _links(job_id)}, status_code=202)

    async def fork_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle = await run_in_threadpool(self.handle, job_id)
        body = await read_json(request, self.settings.api_max_body)
        body = body if isinstance(body, dict) else {}
        round_no, goal, max_rounds = body.get("round"), body.get("goal"), body.get("max_rounds")
        if (
            isinstance(round_no, bool)
            or not isinstance(round_no, int)
            or not isinstance(goal, str | None)
            or not isinstance(max_rounds, int | None)
        ):
            raise ApiError(
                422,
                "invalid_fork",
                'send {"round": R, "goal": "...", "max_rounds": N}: R (a whole number) keeps the job\'s '
                "rounds 0..R-1; goal (a string) and max_rounds (a whole number) are optional",
                fields=[{"field": "round", "message": "a whole number"}],
            )
        forked = await self._worker_answer(
            lambda: handle.fork(round_no, goal, max_rounds=max_rounds, timeout=self.decide_timeout)
        )
        status = await run_in_threadpool(forked.status)
        reply = {
            "id": forked.id,
            "forked_from": job_id,
            "round": round_no,
            "status": status.model_dump(mode="json"),
            "links": _links(forked.id),
        }
        return JSONResponse(reply, status_code=202, headers={"Location": f"/v1/jobs/{forked.id}"})

    async def _worker_answer(self, ask: Callable[[], T]) -> T:
        """Run a request a worker answers (resume, fork); its refusal as 404/409/422, none as 504."""
        try:
            return await run_in_threadpool(ask)
        except ResumeRefused as exc:
            code, name = {"unknown": (404, "unknown_job"), "state": (409, "job_state")}.get(
                exc.reason, (422, "invalid_request")
            )
            raise ApiError(code, name, str(exc)) from None
        except CeleryTimeout:
            raise ApiError(
                504,
                "no_worker_answered",
                f"no worker answered within {self.decide_timeout:g} s: are workers running? "
                "Look at GET /v1/jobs/{id} before trying again",
            ) from None

    async def job_events(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        await run_in_threadpool(self.handle, job_id)
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if after != "$" and not _STREAM_ID.match(after):
            raise ApiError(
                400,
                "invalid_event_id",
                f"Last-Event-ID {after[:60]!r} is not a stream id: send the id of the last event "
                "received (like '1700000000000-0'), or '0' for the first event",
            )
        if after == "$":
            newest = await self.async_redis.xrevrange(self.store.key(job_id, "events"), count=1)
            after = newest[0][0].decode() if newest else "0"
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(
            self._sse(request, job_id, after), media_type="text/event-stream", headers=headers
        )

    async def _sse(self, request: Request, job_id: str, after: str) -> AsyncIterator[str]:
        key = self.store.key(job_id, "events")
        yield f"retry: 2000\n: job {job_id} events after {after}\n\n"
        block_ms = max(1, int(self.heartbeat * 1000))
        ending = False
        while True:
            # Once the job is seen ended, one more read without waiting: events written between
            # the last empty read and that look (its ``final`` among them) are sent, not lost.
            batch = await self.async_redis.xread({key: after}, count=200, block=None if ending else block_ms)
            for _stream, entries in batch or []:
                for entry_id, fields in entries:
                    event = decode_entry(entry_id, fields)
                    after = event.id
                    yield f"id: {event.id}\nevent: {event.type}\ndata: {event_json(event)}\n\n"
                    if event.type == "final" and await self._final_is_last(job_id, event.id):
                        return
            if batch:
                continue
            # Idle: end if the job ended (every event was read) or its records are gone.
            ended = await self.async_redis.exists(self.store.key(job_id, "result"))
            known = await self.async_redis.exists(self.store.key(job_id, "state"))
            if ending:
                return
            if ended or not known:
                ending = True
                continue
            if await request.is_disconnected():
                return
            yield ": heartbeat\n\n"

    async def _final_is_last(self, job_id: str, event_id: str) -> bool:
        """The ``final`` event ``event_id`` ends the job's stream (a resumed job's goes on)."""
        key = self.store.key(job_id, "events")
        after = await self.async_redis.xrange(key, min=f"({event_id}", count=FINAL_LOOKAHEAD)
        state = await self.async_redis.hget(self.store.key(job_id, "state"), "state")
        return final_ends(entry_types(after), state)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def healthz(self, request: Request) -> Response:
        try:
            await self.async_redis.ping()
        except Exception as exc:  # the probe says why instead of failing with a 500
            return error_response(503, "redis_unavailable", f"Redis does not answer: {exc}")
        return JSONResponse({"ok": True})

    async def static(self, request: Request) -> Response:
        name, media = _STATIC[request.url.path]
        text = resources.files("tandem.workers.api").joinpath("static", name).read_text("utf-8")
        return Response(text, media_type=media, headers={"Cache-Control": "no-cache"})

    async def aclose(self) -> None:
        """Close the Redis clients."""
        await self.async_redis.aclose()  # type: ignore[attr-defined]  # (stubs predate aclose)
        self.redis.close()


def _links(job_id: str) -> dict[str, str]:
    base = f"/v1/jobs/{job_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "cancel": f"{base}/cancel",
        "decisions": f"{base}/decisions",
        "resume": f"{base}/resume",
        "fork": f"{base}/fork",
    }


def _validate(raw: dict[str, Any]) -> JobSpec:
    from pydantic import ValidationError

    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        fields = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(spec)"
            reason = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            fields.append({"field": where, "message": reason, "input": _short(err.get("input"))})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        raise ApiError(422, "invalid_spec", f"invalid job spec: {summary}", fields=fields) from None


def _short(value: Any) -> Any:
    text = json.dumps(value, default=str)
    return value if len(text) <= 200 else text[:200] + "…"


async def _optional_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object body, or ``{}`` when it sent none."""
    if not request.headers.get("content-type") and request.headers.get("content-length", "0") == "0":
        return {}
    raw = await read_json(request, limit)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApiError(422, "invalid_body", f"the body must be a JSON object, got {type(raw).__name__}")
    return raw


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes (413 beyond it, 415/400 if not JSON)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {kind or '(none)'!r} is not accepted: send the job spec as application/json",
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"null")
    except ValueError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    message = {
        404: f"no route {request.url.path!r}: see /openapi.json for the endpoints",
        405: f"{request.method} is not allowed on {request.url.path!r}: see /openapi.json",
    }.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, codes.get(exc.status_code, "http_error"), message)


async def _redis_down(request: Request, exc: Exception) -> Response:
    response = error_response(
        503, "redis_unavailable", f"the job store (Redis) does not answer: {exc}; retry in a moment"
    )
    response.headers["Retry-After"] = "1"
    return response


async def _server_error(request: Request, exc: Exception) -> Response:
    return error_response(500, "internal_error", f"the server failed: {type(exc).__name__}: {exc}")


def create_api(settings: Settings, **options: Any) -> ASGIApp:
    """The ASGI app of ``tandem api`` for ``settings`` (options: see ``Api``)."""
    api = Api(settings, **options)
    routes = [
        Route("/v1/jobs", api.create_job, methods=["POST"]),
        Route("/v1/jobs", api.list_jobs, methods=["GET"]),
        Route("/v1/jobs/{job_id}", api.get_job, methods=["GET"]),
        Route("/v1/jobs/{job_id}/events", api.job_events, methods=["GET"]),
        Route("/v1/jobs/{job_id}/cancel", api.cancel_job, methods=["POST"]),
        Route("/v1/jobs/{job_id}/decisions", api.decide, methods=["POST"]),
        Route("/v1/jobs/{job_id}/resume", api.resume_job, methods=["POST"]),
        Route("/v1/jobs/{job_id}/fork", api.fork_job, methods=["POST"]),
        Route("/openapi.json", api.openapi, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        *(Route(path, api.static, methods=["GET"]) for path in _STATIC),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await api.aclose()

    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            RedisConnectionError: _redis_down,
            500: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.api = api
    return BodyLimit(BearerAuth(app, settings.api_tokens), settings.api_max_body)
