"""``GET /v1/jobs/{id}/artifacts/{handle}``: the whole text of a tool output the job kept as an artifact.

A tool output over ``TANDEM_ARTIFACT_BYTES`` is kept whole (``tandem.reasoner.artifacts``); its
``tool_result`` event's ``artifact.handle`` names it. The answer is the text as UTF-8
(``text/plain``), byte for byte as kept, with headers ``Tandem-Artifact-Chars`` and
``Tandem-Artifact-Bytes``. It needs the ``read`` scope and the job's tenant. An unknown handle, an
unknown or expired job and another tenant's job all get the same 404 ``unknown_artifact``, so the
answer tells nothing of other tenants' jobs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from tandem.broker_config.tokens import ApiToken
from tandem.tasks.errors import UnknownArtifactError
from tandem.toolkit.artifacts import HANDLE_PATTERN
from tandem.workers.api.callers import caller
from tandem.workers.api.errors import ApiError

if TYPE_CHECKING:
    from tandem.workers.api.app import Api

__all__ = ["artifact_endpoint", "artifact_text"]


def artifact_text(api: Api, job_id: str, handle: str, token: ApiToken) -> str:
    """The text of job ``job_id``'s artifact ``handle`` as ``token`` may read it; the one 404
    otherwise (see the module docstring)."""
    gone = ApiError(
        404,
        "unknown_artifact",
        f"no artifact {handle[:80]!r} of job {job_id[:80]!r} is known: use a handle of the job's "
        "tool_result events (their 'artifact'), while the job's records last",
    )
    if not HANDLE_PATTERN.fullmatch(handle):
        raise gone
    try:
        job, _ = api.owned(job_id, token)
        return job.artifact(handle)
    except UnknownArtifactError:
        raise gone from None
    except ApiError as exc:
        if exc.status == 404:
            raise gone from None
        raise


def artifact_endpoint(api: Api) -> Callable[[Request], Awaitable[Response]]:
    """The handler of ``GET /v1/jobs/{id}/artifacts/{handle}`` for ``api``."""

    async def artifact(request: Request) -> Response:
        token = caller(request, "read")
        job_id, handle = request.path_params["job_id"], request.path_params["handle"]
        text = await run_in_threadpool(artifact_text, api, job_id, handle, token)
        body = text.encode("utf-8")
        headers = {"Tandem-Artifact-Chars": str(len(text)), "Tandem-Artifact-Bytes": str(len(body))}
        return Response(body, media_type="text/plain; charset=utf-8", headers=headers)

    return artifact
