"""``GET /v1/jobs/{id}/children`` of ``tandem api``: a job's place in its tree of child jobs.

The answer (scope ``read``; another tenant's job is 404 as an unknown one, as on every job route)::

    {"id": "<job id>", "parent_id": "<id>" | null,
     "children": [{"job_id", "goal", "state", "error"}, ...]}

- ``parent_id``: the job that started this one (``ToolCallContext.spawn``, ``spawn_jobs``), given
  only when that parent did start it: the parent's children index lists it and the child is not
  ``foreign`` to it (``tandem.tasks.control.children``). A spec merely naming a parent gets
  ``null``, so the link never leads to a job of another tenant.
- ``children``: the children the job started, oldest first (``own_children``: an id in the index
  that another client's job took is left out). ``state`` is the child's end (``completed``,
  ``truncated``, ``failed``, ``cancelled``) once it ended, else its state now (``queued``,
  ``running``, ``waiting_for_children``, ...); ``error`` is its end's error; ``goal`` is its first
  ``GOAL_CHARS`` (``tandem.workers.api.job_list``), ``null`` once its spec expired. The
  grandchildren are the children's own ``/children``.

The console's "Children" panel and parent link read it (docs/children.md, "What you see").
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tandem.tasks.control.children import children_key, foreign, outcomes_of, own_children
from tandem.tasks.runtime import Runtime
from tandem.workers.api.callers import caller
from tandem.workers.api.job_list import job_goals

if TYPE_CHECKING:
    from tandem.workers.api.app import Api


class Family:
    """``GET /v1/jobs/{id}/children`` over the API's state (``Api``)."""

    def __init__(self, api: Api) -> None:
        self.api = api

    @cached_property
    def runtime(self) -> Runtime:
        """What ``tandem.tasks.control.children`` reads through: the API's own Redis client and
        settings (no worker resources are built)."""
        rt = Runtime(self.api.settings)
        rt.__dict__["redis"] = self.api.redis
        rt.__dict__["store"] = self.api.store
        return rt

    async def children(self, request: Request) -> Response:
        """``GET /v1/jobs/{id}/children``."""
        job_id = request.path_params["job_id"]
        _, owner = await run_in_threadpool(self.api.owned, job_id, caller(request, "read"))
        return JSONResponse(await run_in_threadpool(self.family, job_id, owner))

    def family(self, job_id: str, owner: str) -> dict[str, Any]:
        """The body of ``GET /v1/jobs/{id}/children`` for ``owner``'s job ``job_id``."""
        rt = self.runtime
        ids = own_children(rt, job_id, owner)
        goals = job_goals(self.api.store, ids)
        children = [
            {"job_id": o.job_id, "goal": goals.get(o.job_id), "state": o.status, "error": o.error}
            for o in outcomes_of(rt, ids)
        ]
        return {"id": job_id, "parent_id": self.parent_of(job_id), "children": children}

    def parent_of(self, job_id: str) -> str | None:
        """The job that started ``job_id``, if one did (see the module's docstring)."""
        rt = self.runtime
        stored = None
        for part in ("spec", "intake"):
            raw = rt.redis.get(rt.store.key(job_id, part))
            if raw is not None:
                stored = json.loads(raw)
                break
        parent = stored.get("parent_id") if isinstance(stored, dict) else None
        if not isinstance(parent, str) or rt.redis.zscore(children_key(rt, parent), job_id) is None:
            return None
        above = rt.store.spec(parent)
        if above is None or foreign(rt, job_id, parent, above.owner):
            return None
        return parent


def children_paths(json_body: Any, error: Any, job_id_param: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI path of this endpoint (``json_body``/``error``: the document's helpers)."""
    child = {
        "type": "object",
        "properties": {
            "job_id": {"type": "string"},
            "goal": {"type": ["string", "null"]},
            "state": {"type": "string"},
            "error": {"type": ["string", "null"]},
        },
    }
    body = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "parent_id": {"type": ["string", "null"]},
            "children": {"type": "array", "items": child},
        },
    }
    return {
        "/v1/jobs/{job_id}/children": {
            "get": {
                "summary": "A job's parent and the child jobs it started",
                "description": "parent_id: the job that started this one (null for a job a client "
                "submitted). children: the jobs this one started (ToolCallContext.spawn, spawn_jobs), "
                "oldest first, each with its goal (shortened), its state (its end once it ended) and "
                "error. A child's own children: its /children (docs/children.md).",
                "operationId": "getChildren",
                "parameters": [job_id_param],
                "responses": {
                    "200": json_body(body, "The job's parent and children."),
                    "401": error("Missing or unknown bearer token."),
                    "404": error("No such job (or another tenant's)."),
                },
            }
        }
    }
