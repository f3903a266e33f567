"""Cross-site requests: state-changing ones refused (CSRF), chosen origins allowed by CORS.

A page on another site can make the browser send a ``POST`` to the API without asking anyone:
a form, or ``fetch`` with a ``text/plain`` body, needs no CORS preflight. On the token-less
loopback API nothing else would stop it from cancelling a job. So every request that changes
state (any method but ``GET``, ``HEAD`` and ``OPTIONS``) is refused with 403 when the browser
says it comes from another origin:

* an ``Origin`` header that is neither the API's own origin (the ``Host`` it was called by) nor
  one of ``TANDEM_API_CORS_ORIGINS`` (``Origin: null``, from sandboxed frames and files, included);
* no ``Origin`` but ``Sec-Fetch-Site: cross-site`` or ``same-site``.

Requests without either header (the CLI, curl, ``tandem.Client``, other servers) pass: only a
browser sends them, and a browser always does on a cross-origin request.

CORS is off unless ``TANDEM_API_CORS_ORIGINS`` names origins: their preflights are answered here
(bearer tokens travel in the ``Authorization`` header, never in cookies: no credentials mode),
and their responses carry ``Access-Control-Allow-Origin``. Other origins get no CORS header, so
the browser keeps the answers from their pages.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tandem.workers.api.errors import error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ALLOW_METHODS = "GET, POST"
ALLOW_HEADERS = "Authorization, Content-Type, Last-Event-ID"
EXPOSE_HEADERS = "Location, Retry-After"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _netloc(scheme: str, netloc: str) -> str:
    """``netloc`` lower-cased, without the scheme's default port."""
    netloc = netloc.lower()
    default = _DEFAULT_PORTS.get(scheme)
    return netloc.removesuffix(f":{default}") if default else netloc


def same_origin(origin: str, host: str) -> bool:
    """True when ``origin`` (an ``Origin`` header) names the host the request was sent to."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc or not host:
        return False
    # Behind a TLS proxy the API sees http while the page is https: compare host and port only,
    # each without its scheme's default port.
    ours = host.lower()
    theirs = _netloc(parts.scheme, parts.netloc)
    return theirs in (ours, _netloc("http", ours), _netloc("https", ours))


class OriginGuard:
    """Refuses cross-site state-changing requests (403) and answers CORS for ``cors_origins``."""

    def __init__(self, app: ASGIApp, cors_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.cors_origins = frozenset(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin", b"").decode("latin-1").strip()
        method = scope["method"]
        allowed_cors = bool(origin) and origin.rstrip("/").lower() in self.cors_origins
        if method == "OPTIONS" and origin and b"access-control-request-method" in headers:
            await self._preflight(origin, allowed_cors)(scope, receive, send)
            return
        if method not in SAFE_METHODS and not allowed_cors:
            refusal = self._refusal(origin, headers)
            if refusal is not None:
                await error_response(403, "cross_site_request", refusal)(scope, receive, send)
                return
        if not allowed_cors:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                response_headers["Access-Control-Allow-Origin"] = origin
                response_headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
                response_headers.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)

    @staticmethod
    def _refusal(origin: str, headers: dict[bytes, bytes]) -> str | None:
        """Why a state-changing request is refused, or ``None`` when it may go on."""
        host = headers.get(b"host", b"").decode("latin-1")
        if origin:
            if same_origin(origin, host):
                return None
            return (
                f"a page on {origin[:100]!r} may not change anything here (cross-site request refused): "
                "call the API from its own console, from a server or the CLI, or add that origin to "
                "TANDEM_API_CORS_ORIGINS"
            )
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
        if site in ("cross-site", "same-site"):
            return (
                f"a request from another site (Sec-Fetch-Site: {site}) may not change anything here: "
                "call the API from its own console, from a server or the CLI"
            )
        return None

    @staticmethod
    def _preflight(origin: str, allowed: bool) -> Response:
        if not allowed:
            return error_response(
                403,
                "origin_not_allowed",
                f"origin {origin[:100]!r} is not allowed to call this API from a browser: add it to "
                "TANDEM_API_CORS_ORIGINS on the server",
            )
        return Response(
            status_code=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": ALLOW_METHODS,
                "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": "600",
                "Vary": "Origin",
            },
        )
