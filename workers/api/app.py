"""The HTTP API of ``tandem api``: jobs in, status and results out, events as server-sent events.

``create_api(settings)`` builds the ASGI app. Routes (all JSON; errors are
``{"error": {"code", "message", ...}}``):

* ``POST /v1/jobs``: a ``JobSpec``; 202 with the job's id and status; 422 naming the field.
* ``GET /v1/jobs``: the recent jobs' statuses, newest first (``?limit=``, at most 200).
* ``GET /v1/jobs/{id}``: status, the goal (its first 8,000 characters) and, once it ended, the
  ``JobResult``.
* ``GET /v1/jobs/{id}/events``: the job's events as ``text/event-stream``; each SSE ``id`` is the
  Redis stream id, so ``Last-Event-ID`` (or ``?after=``) resumes right after it. Comment lines keep
  an idle connection alive; the stream ends after the ``final`` event.
* ``POST /v1/jobs/{id}/cancel``: ask the job to stop (202), 409 once it has ended.
* ``POST /v1/jobs/{id}/decisions``: approve or reject tool calls awaiting approval, naming the
  pause (``pause_id``; the current one if none) and an ``idempotency_key`` (or an ``Idempotency-Key``
  header). 409 when refused, nothing changed: ``stale_pause`` (the body names the pause asked and
  the current one) or ``decision_refused``; 504 when no worker answered (the decision was
  withdrawn and never applies). ``GET /v1/jobs/{id}`` shows the last pause as ``approval``.
* ``POST /v1/jobs/{id}/resume``: continue a failed, cancelled or truncated job from its last
  stored step (body ``{"max_rounds": N}`` optional); 202. ``POST /v1/jobs/{id}/fork``: a new job
  from rounds ``0..round-1`` (body ``{"round": R, "goal"?, "max_rounds"?}``); 202 with its id. Refusals:
  404 (unknown or expired), 409 (not ended), 422 (budget or round), 504 (no worker answered).
* ``GET /v1/jobs/{id}/children``: the job's parent and its child jobs (``children``).
* ``GET /v1/me``: the token's tenant and scopes.
* ``GET /openapi.json``, ``GET /healthz``, and the job console at ``/``.

Every ``/v1/`` action checks the token's scope (403 ``missing_scope``) and the job's owner (another
tenant's job is 404, as an unknown one): ``tandem.workers.api.callers``.

In front of the routes (``create_api``): security headers on every answer (``headers``), the
``Host`` allow-list (``host_header``), cross-site refusals and CORS (``origins``), bearer tokens and
the body limit (``guards``). Bodies are parsed strictly (``bodies``); event streams share one Redis
reader per job (``streams``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from typing import Any, TypeVar

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from redis import Redis
from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from tandem.broker_config import Settings
from tandem.broker_config.job_redis import async_job_store_client, is_cluster_url, job_store_client
from tandem.broker_config.sentinel import is_sentinel_url
from tandem.broker_config.tokens import ApiToken
from tandem.client.handle import JobHandle
from tandem.client.submission import submit
from tandem.reasoner import tracing
from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.errors import (
    DecisionRefused,
    JobSpecError,
    JobTimeout,
    ResumeRefused,
    UnknownJobError,
)
from tandem.tasks.runtime import redis_options
from tandem.tasks.spec import FINAL_STATES, JobResult
from tandem.tasks.state.store import JobStore
from tandem.workers.api.answers import answer_endpoint
from tandem.workers.api.artifacts import artifact_endpoint
from tandem.workers.api.bodies import (
    json_object,
    optional_json,
    pause_fields,
    read_json,
    validate_spec,
    without_secrets,
)
from tandem.workers.api.callers import caller, check_owner, may_see, unknown_job, whoami
from tandem.workers.api.children import Family
from tandem.workers.api.conversation import Conversation
from tandem.workers.api.errors import ApiError, error_response
from tandem.workers.api.guards import BearerAuth, BodyLimit
from tandem.workers.api.headers import SecurityHeaders
from tandem.workers.api.host_header import AllowedHosts, default_hosts
from tandem.workers.api.job_list import listed, status_goal
from tandem.workers.api.openapi import openapi_document
from tandem.workers.api.origins import OriginGuard
from tandem.workers.api.streams import EventHub, EventStreamResponse, StreamsFull, StreamSlots

T = TypeVar("T")
_STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
_JOB_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}


class Api:
    """The API's state: the job store, the async Redis clients (requests, and the event streams'
    readers, each a bounded pool), the event hub and the Celery app.

    ``async_redis`` given alone serves both (tests pass one fakeredis client)."""

    def __init__(
        self,
        settings: Settings,
        *,
        celery_app: Celery | None = None,
        redis: Redis | None = None,
        async_redis: AsyncRedis | None = None,
        stream_redis: AsyncRedis | None = None,
        heartbeat: float | None = None,
        decide_timeout: float = 30.0,
    ) -> None:
        self.settings = settings
        heartbeat = settings.api.heartbeat if heartbeat is None else heartbeat
        if celery_app is None:
            from tandem.tasks.app import create_app

            celery_app = create_app(settings)
        self.celery = celery_app
        options = redis_options(settings)
        self.redis = redis or job_store_client(settings, **options)
        self.async_redis = async_redis or _pooled(settings, settings.api.redis_max_connections, options)
        # A feed waits in XREAD for up to ``heartbeat`` seconds: its reads may take that long on top
        # of TANDEM_REDIS_SOCKET_TIMEOUT. One connection per job followed, at most stream_jobs.
        wait = {**options, "socket_timeout": settings.redis_socket_timeout + heartbeat}
        self.stream_redis = stream_redis or (
            self.async_redis if async_redis is not None else _pooled(settings, settings.api.stream_jobs, wait)
        )
        self.store = JobStore.from_settings(self.redis, settings)
        self.heartbeat = heartbeat
        self.decide_timeout = decide_timeout
        self.hub = EventHub(
            self.store,
            self.async_redis,
            self.stream_redis,
            heartbeat=heartbeat,
            max_jobs=settings.api.stream_jobs,
        )
        self.slots = StreamSlots(settings.api.max_streams)

    # -- helpers -----------------------------------------------------------------------------

    def owned(self, job_id: str, token: ApiToken) -> tuple[JobHandle, str]:
        """The handle of a job ``token`` may act on, and the tenant owning it; 404 for an unknown
        job and for another tenant's (the same answer: ``tandem.workers.api.callers``)."""
        handle = self.handle(job_id)
        owner = handle.status().owner
        check_owner(token, job_id, owner)
        return handle, owner

    def handle(self, job_id: str) -> JobHandle:
        """The handle of a known job (stored, or refused at intake); 404 otherwise."""
        if not _JOB_ID.match(job_id):
            raise unknown_job(job_id[:80])
        handle = JobHandle(job_id, self.store, self.celery)
        # No riding out a Redis outage inside a request: it answers 503 with Retry-After at once.
        handle.reconnect_call = 0.0
        try:
            handle.status()
        except UnknownJobError:
            raise unknown_job(job_id) from None
        return handle

    def job_body(self, job_id: str, token: ApiToken) -> dict[str, Any]:
        """The JSON of ``GET /v1/jobs/{id}``."""
        handle, _ = self.owned(job_id, token)
        try:
            result: JobResult | None = handle.result(timeout=0)
        except JobTimeout:
            result = None
        approval = ApprovalStore(self.store).get(job_id)
        return {
            "id": job_id,
            "status": handle.status().model_dump(mode="json"),
            "goal": status_goal(self.store, job_id),
            "result": None if result is None else result.model_dump(mode="json"),
            "approval": None if approval is None else approval.model_dump(mode="json"),
            "links": _links(job_id),
        }

    # -- endpoints ---------------------------------------------------------------------------

    async def create_job(self, request: Request) -> Response:
        token = caller(request, "submit")
        raw = json_object(await read_json(request, self.settings.api_max_body), "invalid_spec", "a job spec")
        owner = raw.get("owner", token.tenant)
        if owner != token.tenant and not token.admin:
            raise ApiError(
                403,
                "foreign_owner",
                f"this token submits jobs for tenant {token.tenant!r} only: leave 'owner' out, or use "
                "an admin token to submit for another tenant",
                scope="admin",
            )
        spec = validate_spec({**raw, "owner": owner})
        try:
            parent = tracing.extract(request.headers)  # a caller's W3C traceparent: the job joins its trace
            handle = await run_in_threadpool(_submit_under, parent, spec, self.celery, self.store)
        except JobSpecError as exc:  # a limit of TANDEM_MAX_* (the message names it)
            raise without_secrets(ApiError(422, "invalid_spec", str(exc)), raw) from None
        status = await run_in_threadpool(handle.status)
        body = {"id": handle.id, "status": status.model_dump(mode="json"), "links": _links(handle.id)}
        return JSONResponse(body, status_code=202, headers={"Location": f"/v1/jobs/{handle.id}"})

    async def list_jobs(self, request: Request) -> Response:
        raw = request.query_params.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 200:
            raise ApiError(400, "invalid_query", f"limit={raw!r} must be a whole number from 1 to 200")
        token = caller(request, "read")
        limit = int(raw)
        # A tenant's token lists its tenant's jobs, from the tenant's own index; an admin's, all.
        owner = None if token.admin else token.tenant
        jobs = await run_in_threadpool(partial(self.store.recent, limit, owner=owner))
        seen = [j for j in jobs if may_see(token, j.owner)]
        return JSONResponse({"jobs": await run_in_threadpool(listed, self.store, seen)})

    async def get_job(self, request: Request) -> Response:
        token = caller(request, "read")
        return JSONResponse(await run_in_threadpool(self.job_body, request.path_params["job_id"], token))

    async def cancel_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle, _ = await run_in_threadpool(self.owned, job_id, caller(request, "control"))
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
        handle, owner = await run_in_threadpool(self.owned, job_id, caller(request, "approve"))
        raw = await read_json(request, self.settings.api_max_body)
        body = raw if isinstance(raw, dict) else {}
        decisions = body.get("decisions")
        if not isinstance(decisions, bool | list):
            raise ApiError(
                422,
                "invalid_decisions",
                'send {"pause_id": "...", "decisions": [{"index": 1, "approve": true}, {"index": 2, '
                '"approve": false, "reason": "..."}]} (an "args" object edits a call), or {"decisions": '
                "true|false} for every undecided call",
                fields=[{"field": "decisions", "message": "a list of decisions, or true/false"}],
            )
        pause_id, key = pause_fields(body, request)
        try:
            answer = await run_in_threadpool(
                partial(
                    handle.decision_answer,
                    decisions,
                    pause_id=pause_id,
                    idempotency_key=key,
                    timeout=self.decide_timeout,
                    owner=owner,
                )
            )
        except DecisionRefused as exc:
            raise ApiError(409, "decision_refused", str(exc), pause_id=None, current_pause=None) from None
        return decision_response(job_id, answer)

    async def resume_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle, owner = await run_in_threadpool(self.owned, job_id, caller(request, "control"))
        body = await optional_json(request, self.settings.api_max_body)
        max_rounds = body.get("max_rounds")
        if max_rounds is not None and (isinstance(max_rounds, bool) or not isinstance(max_rounds, int)):
            raise ApiError(
                422,
                "invalid_resume",
                f"max_rounds must be a whole number, got {max_rounds!r}: "
                'send {"max_rounds": 30}, or no body to keep the budget',
                fields=[{"field": "max_rounds", "message": "not a whole number"}],
            )
        await self._worker_answer(lambda: handle.resume(max_rounds, timeout=self.decide_timeout, owner=owner))
        status = await run_in_threadpool(handle.status)
        reply = {"id": job_id, "resumed": True, "status": status.model_dump(mode="json")}
        return JSONResponse({**reply, "links": _links(job_id)}, status_code=202)

    async def fork_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        handle, owner = await run_in_threadpool(self.owned, job_id, caller(request, "control"))
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
            lambda: handle.fork(
                round_no, goal, max_rounds=max_rounds, timeout=self.decide_timeout, owner=owner
            )
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
            code, name = {
                "unknown": (404, "unknown_job"),
                "state": (409, "job_state"),
                "timeout": (504, "no_worker_answered"),
            }.get(exc.reason, (422, "invalid_request"))
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
        token = caller(request, "read")
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if after != "$" and not _STREAM_ID.match(after):
            raise ApiError(
                400,
                "invalid_event_id",
                f"Last-Event-ID {after[:60]!r} is not a stream id: send the id of the last event "
                "received (like '1700000000000-0'), or '0' for the first event",
            )
        # A crowd of clients arriving at once must not take a thread and a connection each.
        # One read on the pooled client; a record without an owner field (written before owners)
        # is the default tenant's, as ``JobRecord`` reads it.
        found = (
            await self.async_redis.hmget(self.store.key(job_id, "state"), ["state", "owner"])
            if _JOB_ID.match(job_id)
            else [None, None]
        )
        if found[0] is None:
            await run_in_threadpool(self.owned, job_id, token)  # 404, or a job refused at intake
        else:
            owner = found[1] or b"default"
            check_owner(token, job_id, owner.decode() if isinstance(owner, bytes) else str(owner))
        who = _client_identity(request)
        if not self.slots.acquire(who):
            limit = self.settings.api.max_streams
            raise ApiError(
                429,
                "too_many_streams",
                f"this {'token' if who.startswith('token:') else 'client'} already has {limit} event "
                "streams open on this API process (TANDEM_API_MAX_STREAMS): close one, or follow "
                "several jobs from one page",
                limit=limit,
            ).with_headers({"Retry-After": "5"})
        try:
            if after == "$":
                newest = await self.async_redis.xrevrange(self.store.key(job_id, "events"), count=1)
                after = newest[0][0].decode() if newest else "0"
            sub = self.hub.subscribe(job_id)
        except StreamsFull:
            self.slots.release(who)
            raise ApiError(
                503,
                "too_many_jobs_streamed",
                f"this API process already follows {self.hub.max_jobs} jobs' events "
                "(TANDEM_API_STREAM_JOBS): try again in a moment, or through another API process",
            ).with_headers({"Retry-After": "5"}) from None
        except BaseException:
            self.slots.release(who)
            raise

        def close() -> None:
            self.hub.unsubscribe(sub)
            self.slots.release(who)

        return EventStreamResponse(self.hub.stream(sub, after, request.is_disconnected), close)

    async def me(self, request: Request) -> Response:
        """``GET /v1/me``: whom the token acts for, its tenant and scopes (the console shows them)."""
        token = whoami(request)
        return JSONResponse({"tenant": token.tenant, "scopes": sorted(token.scopes), "admin": token.admin})

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
        """Stop the event feeds and close the Redis clients."""
        await self.hub.aclose()
        if self.stream_redis is not self.async_redis:
            await self.stream_redis.aclose()  # type: ignore[attr-defined]  # (stubs predate aclose)
        await self.async_redis.aclose()  # type: ignore[attr-defined]
        self.redis.close()


def _pooled(settings: Settings, size: int, options: dict[str, Any]) -> AsyncRedis:
    """An async client of the job store on a pool of at most ``size`` connections; a command waits
    ``TANDEM_REDIS_POOL_TIMEOUT`` seconds for a free one (then ``ConnectionError``: 503). The API
    only reads with it: a command whose pooled connection turns out dead (Redis restarted) is sent
    once more, on a new connection, at once; Redis down still answers 503 at once. On a Redis
    Cluster: ``size`` connections per node, under the cluster client's own retries."""
    if is_cluster_url(settings.redis_url):
        return async_job_store_client(settings, max_connections=size, **options)
    if is_sentinel_url(settings.redis_url):  # the master the Sentinels name, followed through a failover
        return async_job_store_client(
            settings,
            max_connections=size,
            pool_timeout=settings.redis_pool_timeout,
            retry=Retry(NoBackoff(), 1),
            **options,
        )
    pool: BlockingConnectionPool = BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=size,
        timeout=settings.redis_pool_timeout,
        retry=Retry(NoBackoff(), 1),
        **options,
    )
    return AsyncRedis.from_pool(pool)  # type: ignore[attr-defined]  # (stubs predate from_pool)


def _client_identity(request: Request) -> str:
    """Whose streams a request counts against: its bearer token (hashed), else its address."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return "token:" + hashlib.sha256(token.strip().encode()).hexdigest()[:24]
    return "client:" + (request.client.host if request.client else "unknown")


def decision_response(job_id: str, answer: dict[str, Any]) -> JSONResponse:
    """The answer of ``POST /v1/jobs/{id}/decisions`` for ``tandem.decide``'s JSON ``answer``: 200
    with the pause's decisions, 409 ``stale_pause`` or ``decision_refused`` naming the pause asked
    and the current one, 504 ``no_worker_answered`` when the decision was withdrawn."""
    if answer.get("accepted"):
        body = {
            "id": job_id,
            "pause_id": answer.get("pause_id"),
            "complete": bool(answer.get("complete")),
            "decisions": answer.get("decisions", []),
        }
        return JSONResponse(body)
    pauses = {"pause_id": answer.get("pause_id"), "current_pause": answer.get("current_pause")}
    error = str(answer.get("error") or "the decision was refused; nothing changed")
    if answer.get("reason") == "unknown":  # it expired since the API looked at it
        raise unknown_job(job_id)
    if answer.get("reason") == "withdrawn":
        raise ApiError(504, "no_worker_answered", error, withdrawn=True, **pauses)
    code = "stale_pause" if answer.get("reason") == "stale_pause" else "decision_refused"
    raise ApiError(409, code, error, **pauses)


def _links(job_id: str) -> dict[str, str]:
    base = f"/v1/jobs/{job_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "cancel": f"{base}/cancel",
        "decisions": f"{base}/decisions",
        "answers": f"{base}/answers",
        "resume": f"{base}/resume",
        "fork": f"{base}/fork",
    }


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


def create_api(settings: Settings, *, bound_host: str | None = None, **options: Any) -> ASGIApp:
    """The ASGI app of ``tandem api`` for ``settings`` (options: see ``Api``).

    ``bound_host``: the address it listens on, allowed as a ``Host`` (with the loopback names)
    when ``TANDEM_API_ALLOWED_HOSTS`` is unset."""
    api = Api(settings, **options)
    talk = Conversation(api)
    family = Family(api)
    routes = [
        Route("/v1/jobs", api.create_job, methods=["POST"]),
        Route("/v1/jobs", api.list_jobs, methods=["GET"]),
        Route("/v1/jobs/{job_id}", api.get_job, methods=["GET"]),
        Route("/v1/jobs/{job_id}/events", api.job_events, methods=["GET"]),
        Route("/v1/jobs/{job_id}/children", family.children, methods=["GET"]),
        Route("/v1/jobs/{job_id}/artifacts/{handle}", artifact_endpoint(api), methods=["GET"]),
        Route("/v1/jobs/{job_id}/cancel", api.cancel_job, methods=["POST"]),
        Route("/v1/jobs/{job_id}/decisions", api.decide, methods=["POST"]),
        Route("/v1/jobs/{job_id}/answers", answer_endpoint(api), methods=["POST"]),
        Route("/v1/jobs/{job_id}/resume", api.resume_job, methods=["POST"]),
        Route("/v1/jobs/{job_id}/fork", api.fork_job, methods=["POST"]),
        Route("/v1/jobs/{job_id}/messages", talk.post_message, methods=["POST"]),
        Route("/v1/jobs/{job_id}/follow-up", talk.follow_up, methods=["POST"]),
        Route("/v1/threads/{thread_id}", talk.thread, methods=["GET"]),
        Route("/v1/me", api.me, methods=["GET"]),
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
    inner = BodyLimit(BearerAuth(app, settings.api_tokens, settings.api), settings.api_max_body)
    allowed = settings.api.allowed_hosts or default_hosts(bound_host)
    return SecurityHeaders(AllowedHosts(OriginGuard(inner, settings.api.cors_origins), allowed))


def _submit_under(parent: Any, spec: Any, celery: Any, store: Any) -> JobHandle:
    """``submit`` with ``parent`` (a trace context, or ``None``) current: the job's trace is then
    a child of the API request's (``docs/tracing.md``)."""
    with tracing.attached(parent):
        return submit(spec, app=celery, store=store)
