"""API tokens with a tenant and scopes: who a bearer token speaks for, and what it may do.

``TANDEM_API_TOKENS`` takes two forms:

* the old one, comma-separated tokens: each acts for the ``default`` tenant with every scope but
  ``admin`` (a deployment without tenants changes nothing);
* a JSON object, token -> ``{"tenant": "...", "scopes": [...]}`` (``TANDEM_API_TOKENS_FILE`` names a
  file holding the same object, so the tokens stay out of the environment).

Scopes: ``submit`` (POST /v1/jobs), ``read`` (status, events, list), ``control`` (cancel, resume,
fork), ``approve`` (decisions), ``admin`` (every tenant's jobs, and submitting for any tenant).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.broker_config.errors import SettingsError

DEFAULT_TENANT = "default"
"""The tenant of every job and token that names none."""
TENANT_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
"""What a tenant id may be: letters, digits, ``_``, ``.``, ``-``; 1 to 64 characters."""
SCOPES: tuple[str, ...] = ("submit", "read", "control", "approve", "admin")
PLAIN_SCOPES: frozenset[str] = frozenset({"submit", "read", "control", "approve"})
"""The scopes of a token written in the old comma-separated form (all but ``admin``)."""
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class ApiToken:
    """One bearer token: the tenant it acts for and its scopes."""

    token: str = field(repr=False)
    tenant: str = DEFAULT_TENANT
    scopes: frozenset[str] = PLAIN_SCOPES

    def allows(self, scope: str) -> bool:
        """True when the token holds ``scope`` (``admin`` holds every scope)."""
        return scope in self.scopes or "admin" in self.scopes

    @property
    def admin(self) -> bool:
        """True for a token that sees every tenant's jobs."""
        return "admin" in self.scopes


def _check_length(name: str, tokens: list[str]) -> None:
    short = [t for t in tokens if len(t) < MIN_TOKEN_CHARS]
    if short:
        raise SettingsError(
            f"{name} holds a token of {len(short[0])} characters: use tokens of at least "
            f"{MIN_TOKEN_CHARS} random characters, e.g. from "
            "`python -c 'import secrets; print(secrets.token_urlsafe())'`"
        )


def _entry(name: str, index: int, value: object) -> tuple[str, frozenset[str]]:
    where = f"{name}: the token #{index + 1}"  # never quote a token in a message
    if not isinstance(value, Mapping):
        raise SettingsError(
            f'{where} maps to {type(value).__name__}, not an object: write {{"<token>": '
            '{"tenant": "team-a", "scopes": ["submit", "read"]}}'
        )
    unknown = set(value) - {"tenant", "scopes"}
    if unknown:
        raise SettingsError(f"{where} has unknown key(s) {sorted(unknown)}: only 'tenant' and 'scopes'")
    tenant = value.get("tenant", DEFAULT_TENANT)
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise SettingsError(
            f"{where} has tenant {tenant!r}: a tenant id is 1 to 64 letters, digits, '_', '.' or '-'"
        )
    scopes = value.get("scopes", sorted(PLAIN_SCOPES))
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise SettingsError(f"{where} has scopes {scopes!r}: write a list such as ['submit', 'read']")
    bad = [s for s in scopes if s not in SCOPES]
    if bad:
        raise SettingsError(f"{where} has unknown scope {bad[0]!r}: scopes are {', '.join(SCOPES)}")
    return tenant, frozenset(scopes)


def parse_tokens(raw: str, name: str = "TANDEM_API_TOKENS") -> tuple[ApiToken, ...]:
    """The tokens of ``raw``: comma-separated (``default`` tenant, ``PLAIN_SCOPES``) or a JSON object
    token -> ``{"tenant", "scopes"}``. ``SettingsError`` naming ``name`` for a malformed value (the
    message never quotes a token)."""
    raw = raw.strip()
    if not raw:
        return ()
    if not raw.startswith("{"):
        plain = [t.strip() for t in raw.split(",") if t.strip()]
        _check_length(name, plain)
        return tuple(ApiToken(t) for t in dict.fromkeys(plain))
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{name} starts with '{{' but is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f'{exc.colno}): write {{"<token>": {{"tenant": "team-a", "scopes": ["submit", "read"]}}}}'
        ) from None
    if not isinstance(table, dict):
        raise SettingsError(f"{name} must be a JSON object of token -> {{tenant, scopes}}")
    _check_length(name, [str(t) for t in table])
    tokens = []
    for index, (token, value) in enumerate(table.items()):
        tenant, scopes = _entry(name, index, value)
        tokens.append(ApiToken(token.strip(), tenant, scopes))
    return tuple(tokens)


def read_tokens(env: Mapping[str, str]) -> tuple[ApiToken, ...]:
    """The tokens of ``TANDEM_API_TOKENS`` and of the file ``TANDEM_API_TOKENS_FILE`` names (JSON or
    comma-separated, as the variable); a token in both keeps the file's tenant and scopes."""
    tokens = list(parse_tokens(env.get("TANDEM_API_TOKENS", "")))
    path = env.get("TANDEM_API_TOKENS_FILE", "").strip()
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise SettingsError(
                f"TANDEM_API_TOKENS_FILE={path!r} cannot be read ({exc.strerror}): name a readable file "
                "holding the tokens' JSON object"
            ) from None
        tokens.extend(parse_tokens(text, f"the tokens file {path!r} (TANDEM_API_TOKENS_FILE)"))
    by_token = {t.token: t for t in tokens}
    return tuple(by_token.values())


def check_tenant(value: object, what: str = "owner") -> str:
    """``value`` as a tenant id; ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(value, str) or not TENANT_ID.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a tenant id: 1 to 64 letters, digits, '_', '.' or '-' "
            f"({DEFAULT_TENANT!r} when there are no tenants)"
        )
    return value


__all__ = [
    "DEFAULT_TENANT",
    "PLAIN_SCOPES",
    "SCOPES",
    "TENANT_ID",
    "ApiToken",
    "check_tenant",
    "parse_tokens",
    "read_tokens",
]
