"""``ApiSettings``: the ``TANDEM_API_*`` variables of ``tandem api``'s HTTP surface and event streams.

(The tokens and the body limit, ``TANDEM_API_TOKENS`` and ``TANDEM_API_MAX_BODY``, are fields of
``Settings`` itself.) Read by ``Settings.from_env``; every bad value is a ``SettingsError`` naming
the variable, the value and what to write.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.tokens import ApiToken, read_tokens

_HOST = re.compile(r"^(\*\.|\.)?[a-z0-9_.\-]{1,253}$|^\[?[0-9a-f:.]{2,45}\]?$")
_ORIGIN = re.compile(r"^https?://[a-z0-9_.\-]{1,253}(:\d{1,5})?$|^https?://\[[0-9a-f:.]{2,45}\](:\d{1,5})?$")


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip().lower() for part in env.get(name, "").split(",") if part.strip())


def _allowed_hosts(env: Mapping[str, str]) -> tuple[str, ...]:
    hosts = _names(env, "TANDEM_API_ALLOWED_HOSTS")
    for host in hosts:
        if host != "*" and not _HOST.match(host):
            raise SettingsError(
                f"TANDEM_API_ALLOWED_HOSTS holds {host!r}, which is not a host name: write names or "
                "addresses without scheme or port, comma-separated (api.example.com, .example.com for "
                "its subdomains, 10.0.0.5), or * to accept any Host header"
            )
    return tuple(h[1:] if h.startswith("*.") else h for h in hosts)  # "*.x" and ".x" mean the same


def _origins(env: Mapping[str, str]) -> tuple[str, ...]:
    origins = tuple(o.rstrip("/") for o in _names(env, "TANDEM_API_CORS_ORIGINS"))
    for origin in origins:
        if not _ORIGIN.match(origin):
            raise SettingsError(
                f"TANDEM_API_CORS_ORIGINS holds {origin!r}, which is not an origin: write each as "
                "scheme://host[:port] (https://app.example.com, http://localhost:5173), comma-separated; "
                "'*' is not accepted"
            )
    return origins


def _whole(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise SettingsError(f"{name}={raw!r} must be a whole number of at least {minimum} (e.g. {default})")
    return int(raw)


@dataclass(frozen=True)
class ApiSettings:
    """How ``tandem api`` meets the web: which ``Host`` names and cross-origin callers it accepts, and
    how many event streams it serves with how many Redis connections."""

    allowed_hosts: tuple[str, ...] = ()
    """``TANDEM_API_ALLOWED_HOSTS``: the ``Host`` names requests may carry (``.example.com`` also
    accepts its subdomains, ``*`` any name). Empty: the loopback names and the address the API
    listens on (``tandem.workers.api.host_header``)."""
    cors_origins: tuple[str, ...] = ()
    """``TANDEM_API_CORS_ORIGINS``: web origins (``https://app.example.com``) whose pages may call the
    API from the browser; none by default."""
    redis_max_connections: int = 32
    """``TANDEM_API_REDIS_MAX_CONNECTIONS``: the async Redis pool of requests (``/healthz``, status
    reads, event catch-up); a request waits up to ``TANDEM_REDIS_POOL_TIMEOUT`` for a connection."""
    stream_jobs: int = 256
    """``TANDEM_API_STREAM_JOBS``: jobs whose events one API process follows at once; each has one
    Redis reader (one connection, waiting in ``XREAD``) shared by all its clients."""
    max_streams: int = 100
    """``TANDEM_API_MAX_STREAMS``: event streams one token (one client address, without tokens) may
    hold open at once on one API process; one more is answered 429."""
    heartbeat: int = 15
    """``TANDEM_API_HEARTBEAT``: seconds between the heartbeats (``: heartbeat`` lines) an idle event
    stream sends, so proxies keep it open and clients know it is alive: keep it below a third of
    the clients' ``stream_silence`` (45 s by default) and below any proxy's idle timeout."""
    tokens: tuple[ApiToken, ...] = field(default=(), repr=False)
    """``TANDEM_API_TOKENS`` / ``TANDEM_API_TOKENS_FILE``: each token's tenant and scopes
    (``tandem.broker_config.tokens``)."""

    def token(self, value: str, plain: tuple[str, ...] = ()) -> ApiToken | None:
        """The ``ApiToken`` of bearer ``value``: from ``tokens``, else (a token listed only in
        ``plain``, ``Settings.api_tokens``) the ``default`` tenant without ``admin``; ``None`` for
        an unknown token. Every token is compared, in constant time each."""
        found: ApiToken | None = None
        given = value.encode()
        for known in self.tokens:
            if hmac.compare_digest(given, known.token.encode()) and found is None:
                found = known
        for text in plain:
            if hmac.compare_digest(given, text.encode()) and found is None:
                found = ApiToken(text)
        return found

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiSettings:
        """Read ``TANDEM_API_ALLOWED_HOSTS``, ``_CORS_ORIGINS``, ``_REDIS_MAX_CONNECTIONS``,
        ``_STREAM_JOBS``, ``_MAX_STREAMS`` and ``_HEARTBEAT``."""
        d = cls()
        return cls(
            allowed_hosts=_allowed_hosts(env),
            cors_origins=_origins(env),
            redis_max_connections=_whole(
                env, "TANDEM_API_REDIS_MAX_CONNECTIONS", d.redis_max_connections, minimum=2
            ),
            stream_jobs=_whole(env, "TANDEM_API_STREAM_JOBS", d.stream_jobs, minimum=1),
            max_streams=_whole(env, "TANDEM_API_MAX_STREAMS", d.max_streams, minimum=1),
            heartbeat=_whole(env, "TANDEM_API_HEARTBEAT", d.heartbeat, minimum=1),
            tokens=read_tokens(env),
        )
