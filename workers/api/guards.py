"""ASGI middleware in front of the API: bearer-token auth and the request body limit."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from tandem.workers.api.errors import ApiError, error_response


class BearerAuth:
    """Refuses ``/v1/`` requests without ``Authorization: Bearer <token>`` for one of ``tokens``.

    The console's page and assets, ``/healthz`` and ``/openapi.json`` hold no job data and are open.

    With no tokens every request passes (``tandem api`` allows that on a loopback address only).
    """

    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        self.app = app
        self.tokens = [t.encode() for t in tokens]

    def _allowed(self, scope: Scope) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token:
            return False
        # Compare with every token, always, so the time taken says nothing about which matched.
        matched = [hmac.compare_digest(token.strip(), known) for known in self.tokens]
        return any(matched)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.tokens or not path.startswith("/v1/") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        has_header = b"authorization" in dict(scope.get("headers") or [])
        response = error_response(
            401,
            "unauthorized",
            "the bearer token is not valid: send one of TANDEM_API_TOKENS"
            if has_header
            else "no bearer token: send the header 'Authorization: Bearer <token>' "
            "with one of TANDEM_API_TOKENS",
        )
        response.headers["WWW-Authenticate"] = 'Bearer realm="tandem"'
        await response(scope, receive, send)


class BodyLimit:
    """Answers 413 at once to a request that declares a ``Content-Length`` above ``max_bytes``.

    (A chunked body is counted while it is read: see ``tandem.workers.api.app.read_json``.)
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if scope["type"] == "http" and declared.isdigit() and int(declared) > self.max_bytes:
            response = too_large(self.max_bytes, int(declared)).response()
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def too_large(limit: int, size: int | None = None) -> ApiError:
    """The 413 error of a body over ``limit`` bytes."""
    said = f" ({size} bytes)" if size is not None else ""
    return ApiError(
        413,
        "body_too_large",
        f"the request body{said} is larger than the limit of {limit} bytes (TANDEM_API_MAX_BODY): "
        "send a smaller job spec",
        limit=limit,
    )
