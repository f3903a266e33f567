"""Sealing ``JobSpec.secrets``: per-job credentials are encrypted (Fernet) before they are stored.

A sealed value is ``"sealed:v2:<Fernet token>"``, the token sealing ``{"owner", "value"}``: a value
unseals only in a job of the tenant it was sealed for (``JobSpec.owner``), so a sealed value copied
into another tenant's spec, or a fork asked by another tenant, cannot use it. Values sealed before
tenants (``"sealed:v1:"``) unseal only in jobs of the ``default`` tenant.

``tandem.tasks.submit`` seals on the client when it has ``TANDEM_SECRETS_KEY``, so not even the
broker message holds the clear value; ``tandem.infer``
seals whatever still arrives in clear before the spec is stored. Workers unseal only to inject the
values into tools (``ToolCallContext.secrets``) and to mask them in the job's own records (the job's
``SecretScope``, ``tandem.toolkit.redaction``: never process-wide, where they would mask other jobs' text).

Without ``TANDEM_SECRETS_KEY`` a spec with secrets is refused: storing them in clear is not an option.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tandem.tasks.errors import JobSpecError

if TYPE_CHECKING:
    from tandem.tasks.spec import JobSpec

SEALED = "sealed:v2:"
SEALED_V1 = "sealed:v1:"
"""Values sealed before owners: no tenant inside, so usable by the ``default`` tenant only."""


def is_sealed(value: str) -> bool:
    """True for a value ``SecretBox.seal`` produced (either version)."""
    return value.startswith((SEALED, SEALED_V1))


class SecretBox:
    """Seals and unseals secret values with one Fernet key (``TANDEM_SECRETS_KEY``), or refuses them
    all when ``key`` is ``None``."""

    def __init__(self, key: str | None) -> None:
        self._fernet = None
        if key:
            from cryptography.fernet import Fernet

            self._fernet = Fernet(key.encode())

    @property
    def has_key(self) -> bool:
        """Whether this box seals (it has ``TANDEM_SECRETS_KEY``)."""
        return self._fernet is not None

    def _require(self, spec: JobSpec) -> None:
        if self._fernet is None:
            names = ", ".join(sorted(spec.secrets))
            raise JobSpecError(
                f"the spec carries secrets ({names}) but no TANDEM_SECRETS_KEY is configured to seal them: "
                "set the same TANDEM_SECRETS_KEY on the workers (and clients), or drop 'secrets'"
            )

    def seal(self, value: str, owner: str = "default") -> str:
        """``value`` sealed for tenant ``owner`` (a sealed value is returned as it is: ``unseal``
        checks whose it is)."""
        if is_sealed(value):
            return value
        assert self._fernet is not None
        plain = json.dumps({"owner": owner, "value": value}, ensure_ascii=False)
        return SEALED + self._fernet.encrypt(plain.encode("utf-8", "surrogatepass")).decode("ascii")

    def seal_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` with every secret sealed; ``JobSpecError`` if it has secrets and there is no key."""
        if not spec.secrets:
            return spec
        self._require(spec)
        sealed = {k: self.seal(v, spec.owner) for k, v in spec.secrets.items()}
        return spec.model_copy(update={"secrets": sealed})

    def unseal(self, spec: JobSpec) -> dict[str, str]:
        """The clear values of ``spec.secrets`` (registered nowhere: the caller scopes them to the job).

        ``JobSpecError`` when a value cannot be unsealed (another key, or tampered with), or was
        sealed for another tenant than ``spec.owner``.
        """
        if not spec.secrets:
            return {}
        self._require(spec)
        assert self._fernet is not None
        from cryptography.fernet import InvalidToken

        clear: dict[str, str] = {}
        for name, value in spec.secrets.items():
            if not is_sealed(value):
                clear[name] = value
                continue
            v2 = value.startswith(SEALED)
            try:
                plain = self._fernet.decrypt(value[len(SEALED) :].encode("ascii")).decode("utf-8")
                sealed = json.loads(plain) if v2 else {"owner": "default", "value": plain}
                owner, secret = sealed["owner"], sealed["value"]
            except (InvalidToken, ValueError, KeyError, TypeError):
                raise JobSpecError(
                    f"secret {name!r} cannot be unsealed with this worker's TANDEM_SECRETS_KEY: "
                    "give clients and workers the same key"
                ) from None
            if owner != spec.owner or not isinstance(secret, str):
                raise JobSpecError(
                    f"secret {name!r} was sealed for another tenant than this job's owner "
                    f"{spec.owner!r}: a job uses only secrets sealed for its own tenant (submit the "
                    "value again in this tenant's spec)"
                )
            clear[name] = secret
        return clear
