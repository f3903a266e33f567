"""Security headers on every response of ``tandem api`` (the console's page above all).

The console is plain HTML with its script and style in files of its own (``static/``): its
Content-Security-Policy allows only those, from the API's own origin, and no inline script,
style, plugin, frame or form target elsewhere. The same policy suits the JSON answers (they run
nothing). Frames are refused twice (``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``, for
older browsers), types are never sniffed, and no page address leaks in a ``Referer``.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}
"""Set on every HTTP response that does not set the header itself."""


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every HTTP response (refusals and errors included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
