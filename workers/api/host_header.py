"""The ``Host`` allow-list of ``tandem api``: a request naming a host the API does not answer to gets 400.

Why: a page on ``attacker.example`` can have its own name resolve to ``127.0.0.1`` (DNS
rebinding). Its requests then reach an API on the loopback address carrying
``Host: attacker.example``, and to the browser they are same-origin, so the page could read the
answers (the job list). Answering only the names the API is known by closes that door, with or
without tokens.

The allowed names are ``TANDEM_API_ALLOWED_HOSTS`` when set; otherwise the loopback names
(``localhost``, ``127.0.0.1``, ``::1``) and the address the API listens on. Listening on every
address (``0.0.0.0``), the machine's own name and addresses stand for it (what a peer or a probe
uses); a name behind a proxy or a Service must be listed. ``/healthz`` and ``/openapi.json`` hold
no job data and answer any ``Host``: load balancers and Kubernetes probe them by IP address.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from tandem.workers.api.errors import error_response

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
OPEN_PATHS = frozenset({"/healthz", "/openapi.json"})
_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


def own_names() -> list[str]:
    """This machine's host name, its fully qualified name and the addresses they resolve to."""
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    for name in list(names):
        try:
            infos = socket.getaddrinfo(name, None)
        except OSError:
            continue
        names.update(str(info[4][0]).lower() for info in infos)
    return sorted(n for n in names if n)


def default_hosts(bound: str | None) -> tuple[str, ...]:
    """The names allowed when ``TANDEM_API_ALLOWED_HOSTS`` is unset, for an API listening on ``bound``."""
    names = list(LOOPBACK_NAMES)
    if bound is not None:
        address = bound.strip("[]").lower()
        names.extend(own_names() if address in _ANY_ADDRESS else [address])
    return tuple(dict.fromkeys(names))


def host_name(header: str) -> str:
    """The name of a ``Host`` header, without its port or brackets, lower-cased (``''`` if none)."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8000
        return value[1 : value.find("]")] if "]" in value else ""
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        value = name
    return value.rstrip(".")


def host_allowed(name: str, allowed: Iterable[str]) -> bool:
    """True when ``name`` is one of ``allowed`` (``.example.com`` also matches its subdomains; ``*`` all)."""
    if not name:
        return False
    for entry in allowed:
        if entry == "*" or entry == name:
            return True
        if entry.startswith(".") and (name == entry[1:] or name.endswith(entry)):
            return True
    return False


class AllowedHosts:
    """Answers 400 to an HTTP request whose ``Host`` header is not one of ``allowed``."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if host_allowed(host_name(header), self.allowed):
            await self.app(scope, receive, send)
            return
        shown = header[:100] or "(none)"
        response = error_response(
            400,
            "host_not_allowed",
            f"Host {shown!r} is not a name this API answers to: call it by one of its names, or add the "
            "name to TANDEM_API_ALLOWED_HOSTS on the server",
        )
        await response(scope, receive, send)
