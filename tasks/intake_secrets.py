"""The secrets of an intake message (``tandem.infer``): never in clear in a message a worker holds.

``celery inspect active|reserved|scheduled`` (and Flower's worker page, which asks the same) show
the arguments a worker decoded from the message it holds, not its display copy (``argsrepr``). So
the message itself must not carry a secret in clear:

- ``send_intake`` (``submit``, the reconciler's re-send) leaves a secret still in clear (a client
  without ``TANDEM_SECRETS_KEY``) in the job's intake key (``tandem:{<id>}:intake``, written by
  ``submit`` before the message, with the job's TTL) and sends ``STORED`` in its place; a sealed
  value (a client with the key) travels as it is. The message then says spec version
  ``stored_header(version)``, which a worker of the release before reads as too new and hands
  back untouched, so no worker takes the marker for the secret.
- the intake reads a ``STORED`` value back from that key (``resolve``) each time it runs, so a
  duplicate message finds it too;
- a message that arrives with a secret in clear anyway (a bare Celery client, Flower's
  ``async-apply``, a message of the previous release) is run as before, but the worker's copy
  shows ``***`` (``conceal``, when the worker receives it), and the copies it sends again (a
  hand-back, a retry) carry the value sealed.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.tasks.errors import JobSpecError
from tandem.tasks.sealing import SecretBox, is_sealed
from tandem.toolkit.redaction import MASK

STORED = "stored:intake"
"""A secret's value in an intake message whose clear value is in the job's intake key."""
STORED_VERSION_OFFSET = 1000
"""Added to the spec version an intake message holding ``STORED`` values says (header
``tandem_spec_version``): a release that reads this module takes it off (``spec_version_of``);
the release before reads the sum as a spec too new for it and hands the message back untouched,
and no real spec version reaches it."""


def stored_header(spec_version: int) -> int:
    """The ``tandem_spec_version`` header of an intake message of ``spec_version`` holding
    ``STORED`` values."""
    return spec_version + STORED_VERSION_OFFSET


def spec_version_of(header: int) -> int:
    """The spec version an intake message's header says (``stored_header`` undone)."""
    return header - STORED_VERSION_OFFSET if header >= STORED_VERSION_OFFSET else header


def _clear(value: Any) -> bool:
    return isinstance(value, str) and value != STORED and value != MASK and not is_sealed(value)


def _secrets(spec: Any) -> dict[str, Any] | None:
    secrets = spec.get("secrets") if isinstance(spec, dict) else None
    return secrets if isinstance(secrets, dict) else None


def for_wire(spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``spec`` as its intake message carries it (every clear secret replaced by ``STORED``), and
    whether any was; ``spec`` itself is left as it is."""
    secrets = _secrets(spec)
    if not secrets or not any(_clear(v) for v in secrets.values()):
        return spec, False
    stored = {name: STORED if _clear(value) else value for name, value in secrets.items()}
    return {**spec, "secrets": stored}, True


def holds_stored(spec: Any) -> bool:
    """Whether ``spec`` has a secret left in the job's intake key."""
    secrets = _secrets(spec)
    return bool(secrets) and STORED in secrets.values()  # type: ignore[union-attr]


def resolve(spec: Any, intake: str | None, job_id: str) -> Any:
    """``spec`` with each ``STORED`` secret read from ``intake`` (the job's intake key, JSON);
    ``JobSpecError`` naming the secret when the key is gone or does not hold it."""
    if not holds_stored(spec):
        return spec
    try:
        kept = _secrets(json.loads(intake)) if intake is not None else None
    except ValueError:
        kept = None
    secrets: dict[str, Any] = dict(spec["secrets"])
    for name, value in secrets.items():
        if value != STORED:
            continue
        found = kept.get(name) if kept else None
        if not isinstance(found, str) or found == STORED:
            raise JobSpecError(
                f"secret {name!r} of job {job_id!r} was left in the job's intake key "
                f"(tandem:{{{job_id}}}:intake), which no longer holds it (expired after "
                "TANDEM_MEMORY_TTL, or deleted): submit the job again"
            )
        secrets[name] = found
    return {**spec, "secrets": secrets}


def concealed(spec: Any, box: SecretBox | None) -> Any:
    """``spec`` with ``conceal`` applied to a copy (``spec`` itself is left as it is)."""
    secrets = _secrets(spec)
    if not secrets or not any(_clear(v) for v in secrets.values()):
        return spec
    copy = {**spec, "secrets": dict(secrets)}
    conceal(copy, box)
    return copy


def conceal(spec: Any, box: SecretBox | None) -> None:
    """Replace, in place, every secret of ``spec`` still in clear: sealed for the spec's owner
    when ``box`` has a key, else ``***`` (a worker without a key refuses secrets anyway)."""
    secrets = _secrets(spec)
    if not secrets:
        return
    owner = spec.get("owner")
    owner = owner if isinstance(owner, str) and owner else "default"
    for name, value in list(secrets.items()):
        if _clear(value):
            secrets[name] = box.seal(value, owner) if box is not None and box.has_key else MASK


__all__ = [
    "STORED",
    "STORED_VERSION_OFFSET",
    "conceal",
    "concealed",
    "for_wire",
    "holds_stored",
    "resolve",
    "spec_version_of",
    "stored_header",
]
