"""Where a job's webhooks go: the ``Webhook`` entry of ``JobSpec.webhooks`` and the operator's
allow-list of hosts (``TANDEM_WEBHOOK_ALLOWED_HOSTS``, loopback only by default).

A spec naming a host the allow-list does not hold is refused at submit (``submit``, ``POST
/v1/jobs``: 422) and at intake, and a worker checks the URL again right before each POST (its own
settings may be stricter than the submitter's). The check is by name: ``hooks.example.com`` in the
list allows that name, ``.example.com`` its subdomains too, ``loopback`` the names and addresses of
this machine (``localhost``, ``127.0.0.0/8``, ``::1``), ``*`` any host. Redirects are never followed,
so a receiver cannot send a delivery on to a host the list does not hold.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tandem.broker_config.webhook_settings import LOOPBACK, WebhookSettings
from tandem.tasks.errors import JobSpecError

WebhookEvent = Literal["final", "waiting_for_person"]
_ALL_EVENTS: tuple[WebhookEvent, ...] = ("final", "waiting_for_person")
MAX_WEBHOOKS = 5
"""Webhooks one spec may name."""
MAX_URL_CHARS = 2048


class Webhook(BaseModel):
    """One entry of ``JobSpec.webhooks``: the URL to POST to and the events it is told of
    (``final``: the job ended; ``waiting_for_person``: it parked for a person's decision or answer)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=MAX_URL_CHARS, description="http:// or https:// URL.")
    events: list[WebhookEvent] = Field(
        default_factory=lambda: list(_ALL_EVENTS),
        min_length=1,
        description="Which events it is told of; both by default.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        problem = url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("events")
    @classmethod
    def _unique(cls, value: list[WebhookEvent]) -> list[WebhookEvent]:
        return list(dict.fromkeys(value))


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a webhook address (``None``: nothing)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as exc:
        return f"{url[:80]!r} is not a URL ({exc}): write http(s)://host[:port]/path"
    if parts.scheme not in ("http", "https"):
        return f"{url[:80]!r} must start with http:// or https://"
    if not parts.hostname:
        return f"{url[:80]!r} names no host: write http(s)://host[:port]/path"
    return None


def shown_url(url: str) -> str:
    """``url`` as events and logs show it: scheme, host, port and path only (no user, password,
    query or fragment, where a receiver's credentials may sit)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(url: str, allowed: Sequence[str]) -> bool:
    """Whether ``url``'s host is in the allow-list ``allowed`` (see the module docstring)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    for entry in allowed:
        if entry == "*" or entry == host:
            return True
        if entry == LOOPBACK and _loopback(host):
            return True
        if entry.startswith(".") and (host == entry[1:] or host.endswith(entry)):
            return True
    return False


def refusal(url: str, settings: WebhookSettings) -> str | None:
    """Why a delivery to ``url`` is not allowed here (``None``: it is)."""
    if host_allowed(url, settings.allowed_hosts):
        return None
    host = urlsplit(url).hostname or ""
    listed = ",".join(settings.allowed_hosts)
    return (
        f"host {host!r} is not allowed (TANDEM_WEBHOOK_ALLOWED_HOSTS={listed}): webhooks go to this "
        f"machine only unless the operator lists the host, e.g. TANDEM_WEBHOOK_ALLOWED_HOSTS="
        f"{listed},{host}"
    )


def check_webhooks(webhooks: Sequence[Webhook], settings: WebhookSettings, *, signing: bool = False) -> None:
    """Refuse webhooks this process may not deliver (``JobSpecError`` naming the field and what to
    do): a host outside the allow-list, more than ``MAX_WEBHOOKS``, and with ``signing`` (a worker,
    which signs the deliveries) a missing ``TANDEM_WEBHOOK_SECRET``."""
    if len(webhooks) > MAX_WEBHOOKS:
        raise JobSpecError(f"field 'webhooks': {len(webhooks)} entries, at most {MAX_WEBHOOKS}")
    for i, hook in enumerate(webhooks):
        problem = refusal(hook.url, settings)
        if problem:
            raise JobSpecError(f"field 'webhooks.{i}.url': {problem}")
    if webhooks and signing and not settings.secret:
        raise JobSpecError(
            "field 'webhooks': this worker has no TANDEM_WEBHOOK_SECRET to sign deliveries with: the "
            "operator sets it on the workers (and gives it to the receivers), or drop 'webhooks'"
        )
