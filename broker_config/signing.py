"""Message signing settings: ``TANDEM_SIGNING_KEY``, ``_CERT``, ``_CERT_STORE``, ``_MAX_AGE`` and
``TANDEM_SIGNING_TENANTS``, which binds certificates to tenants.

``TANDEM_SIGNING_TENANTS`` is a JSON object from a tenant id to the certificate (a PEM file path,
or a list of them) its clients sign with, e.g. ``{"team-a": "/etc/tandem/team-a.pem"}``. A message
signed by one of these certificates acts for that tenant only, whatever it names
(``tandem.tasks.signers``); a message signed by any other trusted certificate (the workers', the
API's) acts for the tenant it names. Each certificate must also be in the trusted store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.tokens import TENANT_ID

_NAMES = ("TANDEM_SIGNING_KEY", "TANDEM_SIGNING_CERT", "TANDEM_SIGNING_CERT_STORE")


@dataclass(frozen=True)
class Signing:
    """Celery message signing (``TANDEM_SIGNING_KEY``, ``_CERT``, ``_CERT_STORE``): Celery's ``auth``
    serializer signs every message with the key; workers accept only messages signed by a
    certificate in the store, for its task id, within ``max_age`` seconds (``TANDEM_SIGNING_MAX_AGE``)
    of being sent, once (``tandem.tasks.replay``). ``tenants`` maps a certificate's id (Celery's
    ``"<issuer> <serial>"``) to the one tenant its messages act for (``TANDEM_SIGNING_TENANTS``)."""

    key: str
    cert: str
    cert_store: str
    max_age: int = 3600
    tenants: Mapping[str, str] = field(default_factory=dict)


def read_signing(env: Mapping[str, str], max_age: int) -> Signing | None:
    """The signing settings in ``env``, or ``None`` when none of the three is set; a
    ``SettingsError`` saying what to fix when they are incomplete or a file is missing."""
    values = [env.get(n, "").strip() for n in _NAMES]
    tenants_raw = env.get("TANDEM_SIGNING_TENANTS", "").strip()
    if not any(values):
        if tenants_raw:
            raise SettingsError(
                "TANDEM_SIGNING_TENANTS is set but message signing is off: set TANDEM_SIGNING_KEY, "
                "TANDEM_SIGNING_CERT and TANDEM_SIGNING_CERT_STORE too, or unset it"
            )
        return None
    missing = [n for n, v in zip(_NAMES, values, strict=True) if not v]
    if missing:
        raise SettingsError(
            f"message signing needs {', '.join(_NAMES)}; {', '.join(missing)} is not set "
            "(the key and certificate are PEM files, the store a directory or glob of trusted certificates)"
        )
    for name, value in zip(_NAMES[:2], values[:2], strict=True):
        if not os.path.isfile(value):
            raise SettingsError(f"{name}={value!r} is not a readable file: point it at a PEM file")
    return Signing(
        key=values[0], cert=values[1], cert_store=values[2], max_age=max_age, tenants=_tenants(tenants_raw)
    )


def _tenants(raw: str) -> dict[str, str]:
    """``TANDEM_SIGNING_TENANTS`` as certificate id -> tenant."""
    if not raw:
        return {}
    what = 'a JSON object such as {"team-a": "/etc/tandem/team-a.pem"} (tenant: certificate file or list)'
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SettingsError(f"TANDEM_SIGNING_TENANTS is not valid JSON ({exc}): write {what}") from None
    if not isinstance(value, dict) or not value:
        raise SettingsError(f"TANDEM_SIGNING_TENANTS={raw[:80]!r} is not {what}")
    by_id: dict[str, str] = {}
    for tenant, paths in value.items():
        if not TENANT_ID.fullmatch(tenant):
            raise SettingsError(
                f"TANDEM_SIGNING_TENANTS: {tenant!r} is not a tenant id "
                "(1 to 64 letters, digits, '_', '.', '-')"
            )
        for path in paths if isinstance(paths, list) else [paths]:
            if not isinstance(path, str) or not os.path.isfile(path):
                raise SettingsError(
                    f"TANDEM_SIGNING_TENANTS[{tenant!r}]: {path!r} is not a readable certificate file: "
                    "name the PEM certificate that tenant's clients sign with"
                )
            cert_id = certificate_id(path)
            if by_id.get(cert_id, tenant) != tenant:
                raise SettingsError(
                    f"TANDEM_SIGNING_TENANTS: the certificate {path!r} is given to both "
                    f"{by_id[cert_id]!r} and {tenant!r}: a certificate acts for one tenant"
                )
            by_id[cert_id] = tenant
    return by_id


def certificate_id(path: str) -> str:
    """The id Celery's ``auth`` serializer puts in a message signed with the certificate at ``path``."""
    from celery.security.certificate import Certificate

    try:
        with open(path, "rb") as fh:
            return str(Certificate(fh.read()).get_id())
    except Exception as exc:
        raise SettingsError(f"{path!r} is not a PEM certificate Celery can load: {exc}") from None


__all__ = ["Signing", "certificate_id", "read_signing"]
