"""Sealing ``JobSpec.secrets``: per-job credentials are encrypted (Fernet) before they are stored.

A sealed value is ``"sealed:v1:<Fernet token>"``. ``tandem.tasks.submit`` seals on the client when it
has ``TANDEM_SECRETS_KEY``, so not even the broker message holds the clear value; ``tandem.infer``
seals whatever still arrives in clear before the spec is stored. Workers unseal only to inject the
values into tools (``ToolCallContext.secrets``) and to mask them in the job's own records (the job's
``SecretScope``, ``tandem.toolkit.redaction``: never process-wide, where they would mask other jobs' text).

Without ``TANDEM_SECRETS_KEY`` a spec with secrets is refused: storing them in clear is not an option.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.tasks.errors import JobSpecError

if TYPE_CHECKING:
    from tandem.tasks.spec import JobSpec

SEALED = "sealed:v1:"


def is_sealed(value: str) -> bool:
    """True for a value ``SecretBox.seal`` produced."""
    return value.startswith(SEALED)


class SecretBox:
    """Seals and unseals secret values with one Fernet key (``TANDEM_SECRETS_KEY``), or refuses them
    all when ``key`` is ``None``."""

    def __init__(self, key: str | None) -> None:
        self._fernet = None
        if key:
            from cryptography.fernet import Fernet

            self._fernet = Fernet(key.encode())

    def _require(self, spec: JobSpec) -> None:
        if self._fernet is None:
            names = ", ".join(sorted(spec.secrets))
            raise JobSpecError(
                f"the spec carries secrets ({names}) but no TANDEM_SECRETS_KEY is configured to seal them: "
                "set the same TANDEM_SECRETS_KEY on the workers (and clients), or drop 'secrets'"
            )

    def seal(self, value: str) -> str:
        """``value`` sealed (a sealed value is returned as it is)."""
        if is_sealed(value):
            return value
        assert self._fernet is not None
        return SEALED + self._fernet.encrypt(value.encode("utf-8")).decode("ascii")

    def seal_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` with every secret sealed; ``JobSpecError`` if it has secrets and there is no key."""
        if not spec.secrets:
            return spec
        self._require(spec)
        return spec.model_copy(update={"secrets": {k: self.seal(v) for k, v in spec.secrets.items()}})

    def unseal(self, spec: JobSpec) -> dict[str, str]:
        """The clear values of ``spec.secrets`` (registered nowhere: the caller scopes them to the job).

        ``JobSpecError`` when a value cannot be unsealed (another key, or tampered with).
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
            else:
                try:
                    clear[name] = self._fernet.decrypt(value[len(SEALED) :].encode("ascii")).decode("utf-8")
                except (InvalidToken, ValueError):
                    raise JobSpecError(
                        f"secret {name!r} cannot be unsealed with this worker's TANDEM_SECRETS_KEY: "
                        "give clients and workers the same key"
                    ) from None
        return clear
