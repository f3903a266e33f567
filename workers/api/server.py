"""Starting ``tandem api`` with uvicorn, after checking that it may listen where it was asked."""

from __future__ import annotations

import ipaddress
import socket

from tandem.broker_config import Settings
from tandem.workers.api.host_header import default_hosts
from tandem.workers.errors import ApiExposureError


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback one (``127.0.0.1``, ``::1``, ``localhost``)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_exposure(host: str, settings: Settings) -> None:
    """Refuse a non-loopback address without bearer tokens (``ApiExposureError`` saying what to set)."""
    if not settings.api_tokens and not is_loopback(host):
        raise ApiExposureError(
            f"tandem api will not listen on {host!r} without tokens: anyone who reaches it could run "
            "jobs. Set TANDEM_API_TOKENS to one or more comma-separated secrets (16+ characters), "
            "or listen on 127.0.0.1"
        )


def serve(host: str, port: int, *, log_level: str = "info", settings: Settings | None = None) -> int:
    """Run the API until interrupted; returns the exit code."""
    import uvicorn

    from tandem.workers.api.app import create_api

    settings = settings or Settings.from_env()
    check_exposure(host, settings)
    app = create_api(settings, bound_host=host)
    hosts = settings.api.allowed_hosts or default_hosts(host)
    print(
        f"tandem api: listening on http://{host}:{port} (console at /, OpenAPI at /openapi.json); "
        f"{'bearer tokens required' if settings.api_tokens else 'no tokens: loopback only'}; "
        f"Host names answered: {', '.join(hosts)} (TANDEM_API_ALLOWED_HOSTS)",
        flush=True,
    )
    # Open event streams would hold a graceful shutdown forever: give them a few seconds.
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=3)
    return 0
