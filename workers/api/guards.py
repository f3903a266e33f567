"""ASGI middleware in front of the API: bearer-token auth and the request body limit."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.tokens import ApiToken
from tandem.workers.api.errors import ApiError, error_response


class BearerAuth:
    """Refuses ``/v1/`` requests without ``Authorization: Bearer <token>`` for one of ``tokens``,
    and leaves the token's ``ApiToken`` (tenant and scopes, from ``table``) in the request's state
    as ``token`` (``tandem.workers.api.callers``).

    The console's page and assets, ``/healthz`` and ``/openapi.json`` hold no job data and are open.

    With no tokens every request passes (``tandem api`` allows that on a loopback address only).
    """

    def __init__(self, app: ASGIApp, tokens: Sequence[str], table: ApiSettings | None = None) -> None:
        self.app = app
        self.table = table or ApiSettings()
        self.tokens = tuple(dict.fromkeys([*tokens, *(t.token for t in self.table.tokens)]))

    def _token(self, scope: Scope) -> ApiToken | None:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return None
        # Every token is compared, always, so the time taken says nothing about which matched.
        return self.table.token(token.strip().decode("latin-1"), self.tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.tokens or not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        token = self._token(scope)
        if token is not None:
            scope.setdefault("state", {})["token"] = token
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
