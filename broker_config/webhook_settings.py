"""``WebhookSettings``: the ``TANDEM_WEBHOOK_*`` variables of job webhooks (``JobSpec.webhooks``).

Read by ``Settings.from_env`` (``Settings.webhooks``); every bad value is a ``SettingsError`` naming
the variable, the value and what to write. Where deliveries may go is the operator's choice:
loopback only unless ``TANDEM_WEBHOOK_ALLOWED_HOSTS`` names more (``tandem.tasks.webhooks.targets``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.broker_config.errors import SettingsError

LOOPBACK = "loopback"
"""The word in ``TANDEM_WEBHOOK_ALLOWED_HOSTS`` for ``localhost``, ``127.0.0.0/8`` and ``::1``."""
MIN_SECRET_CHARS = 16
_HOST = re.compile(r"^(\*\.|\.)?[a-z0-9_.\-]{1,253}$|^\[?[0-9a-f:.]{2,45}\]?$")


def _hosts(env: Mapping[str, str]) -> tuple[str, ...]:
    raw = env.get("TANDEM_WEBHOOK_ALLOWED_HOSTS", "").strip()
    if not raw:
        return (LOOPBACK,)
    hosts = tuple(part.strip().lower() for part in raw.split(",") if part.strip())
    for host in hosts:
        if host not in ("*", LOOPBACK) and not _HOST.match(host):
            raise SettingsError(
                f"TANDEM_WEBHOOK_ALLOWED_HOSTS holds {host!r}, which is not a host name: write names or "
                "addresses without scheme or port, comma-separated (hooks.example.com, .example.com for "
                "its subdomains, 10.0.0.5, loopback for this machine), or * for any host"
            )
    return tuple(h[1:] if h.startswith("*.") else h.strip("[]") for h in hosts)


def _number(env: Mapping[str, str], name: str, default: float, minimum: float, maximum: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not minimum <= value <= maximum:  # also refuses nan
        raise SettingsError(
            f"{name}={raw!r} must be a number from {minimum:g} to {maximum:g} (e.g. {default:g})"
        )
    return value


def _secret(env: Mapping[str, str]) -> str | None:
    raw = env.get("TANDEM_WEBHOOK_SECRET", "").strip()
    if not raw:
        return None
    if len(raw) < MIN_SECRET_CHARS:
        raise SettingsError(
            f"TANDEM_WEBHOOK_SECRET has {len(raw)} characters: use at least {MIN_SECRET_CHARS} random "
            "ones (e.g. the output of `python -c 'import secrets; print(secrets.token_hex(32))'`)"
        )
    return raw


@dataclass(frozen=True)
class WebhookSettings:
    """How workers deliver job webhooks: the signing secret, the hosts deliveries may reach, the
    time-out of one POST and the retry schedule (attempt ``n`` waits about ``backoff * 2**(n-1)``
    seconds after the ``n``-th failure, at most ``backoff_max``, for ``max_attempts`` attempts)."""

    secret: str | None = field(default=None, repr=False)
    """``TANDEM_WEBHOOK_SECRET``: the HMAC-SHA256 key of ``Tandem-Signature``; a worker without one
    refuses jobs that name webhooks (it could not sign their deliveries)."""
    allowed_hosts: tuple[str, ...] = (LOOPBACK,)
    """``TANDEM_WEBHOOK_ALLOWED_HOSTS``: host names deliveries may go to (``.example.com`` also its
    subdomains, ``*`` any, ``loopback`` this machine); by default ``loopback`` only."""
    timeout: float = 5.0
    """``TANDEM_WEBHOOK_TIMEOUT``: seconds one POST may take (connect, send and answer)."""
    max_attempts: int = 8
    """``TANDEM_WEBHOOK_MAX_ATTEMPTS``: attempts of one delivery before it is given up."""
    backoff: float = 2.0
    """``TANDEM_WEBHOOK_BACKOFF_SECONDS``: the wait after the first failed attempt; it doubles after
    every further one."""
    backoff_max: float = 600.0
    """The longest wait between two attempts (seconds)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WebhookSettings:
        """Read the ``TANDEM_WEBHOOK_*`` variables."""
        return cls(
            secret=_secret(env),
            allowed_hosts=_hosts(env),
            timeout=_number(env, "TANDEM_WEBHOOK_TIMEOUT", 5.0, 0.1, 60.0),
            max_attempts=int(_number(env, "TANDEM_WEBHOOK_MAX_ATTEMPTS", 8, 1, 50)),
            backoff=_number(env, "TANDEM_WEBHOOK_BACKOFF_SECONDS", 2.0, 0.05, 3600.0),
        )

    def register_secrets(self) -> None:
        """Have ``tandem.toolkit.redaction`` mask the signing secret wherever it appears."""
        from tandem.toolkit.redaction import register_secret

        register_secret(self.secret)
