"""Broker clients bound to their tenant by the certificate that signed their messages.

With message signing on, Celery's ``auth`` serializer checks a message's signature against the
certificate its payload names, but does not tell the task which one that was. ``SignerSerializer``
does the same check and then writes the certificate's id into the decoded body's options
(``embed``), where Celery's request picks it up as the ``tandem_signer`` attribute. Whatever a
sender put under that name is overwritten: only a verified signature sets it.

``bind_tenant`` then applies ``TANDEM_SIGNING_TENANTS`` (``tandem.broker_config.signing``): a
message signed by a tenant's certificate

- may start a job (``tandem.infer``) only for that tenant: a spec naming no owner gets it, a spec
  naming another is refused;
- may send a control task (one with an ``owner`` argument: decide, resume, fork, ...) only as that
  tenant: an ``owner`` left out becomes the tenant, another one is refused;
- may send no internal step (``tandem.run_tool``, ...): those come from workers.

A refused message is a logged no-op (``tandem.tasks.task_args.refusal_of``). A message signed by a
certificate no tenant has (the workers', the API's) acts for the tenant it names, as without tenants.

Why the certificate and not the Redis ACL user: the worker that acts on a message can check its
signature on every broker (RabbitMQ too); Redis does not record which user pushed a message.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from celery.security.serialization import SecureSerializer

SIGNER = "tandem_signer"
"""The name of the verified signer's certificate id in a decoded message's options."""

INTAKE = "tandem.infer"


class ForeignTenant(Exception):
    """A message signed by a tenant's certificate that asks for something that tenant may not do."""


class SignerSerializer(SecureSerializer):
    """Celery's ``auth`` serializer, telling the task which certificate signed its message."""

    def deserialize(self, data: Any) -> Any:
        """Verify and decode ``data`` (Celery's check), then record the signer in its options."""
        body = super().deserialize(data)
        signer = self._unpack(data)["signer"]
        if isinstance(body, list | tuple) and len(body) == 3 and isinstance(body[2], dict):
            body[2][SIGNER] = signer.decode("utf-8", "replace") if isinstance(signer, bytes) else str(signer)
        return body


def install(key: str, cert: str, store: str, digest: str = "sha256") -> None:
    """Register ``SignerSerializer`` as the ``auth`` serializer (after ``app.setup_security()``,
    which registered Celery's own under that name with the same key, certificate and store)."""
    from celery.security.certificate import Certificate, FSCertStore
    from celery.security.key import PrivateKey
    from kombu.serialization import registry

    with open(key, "rb") as fh:
        private = PrivateKey(fh.read())
    with open(cert, "rb") as fh:
        own = Certificate(fh.read())
    serializer = SignerSerializer(private, own, FSCertStore(store), digest, serializer="json")
    registry.register(
        "auth",
        serializer.serialize,
        serializer.deserialize,
        content_type="application/data",
        content_encoding="utf-8",
    )


def _takes_owner(run: Callable[..., Any]) -> bool:
    try:
        return "owner" in inspect.signature(run).parameters
    except (TypeError, ValueError):
        return False


def bind_tenant(
    task: str, run: Callable[..., Any], named: Mapping[str, Any], kwargs: dict[str, Any], tenant: str
) -> dict[str, Any]:
    """The keyword arguments ``task`` runs with when a certificate of ``tenant`` signed it:
    ``kwargs`` with the tenant filled in; ``ForeignTenant`` when the message asks for another
    tenant or is an internal step. ``named``: the arguments bound to ``run``'s signature."""
    if task == INTAKE:
        spec = named.get("spec")
        owner = spec.get("owner") if isinstance(spec, dict) else None
        if owner not in (None, tenant):
            raise ForeignTenant(
                f"{task}: signed with a certificate of tenant {tenant!r}, but its spec names owner {owner!r}"
            )
        if owner is None and isinstance(spec, dict):
            if "spec" not in kwargs:
                raise ForeignTenant(f"{task}: send the spec as the keyword argument 'spec'")
            return {**kwargs, "spec": {**spec, "owner": tenant}}
        return kwargs
    if not _takes_owner(run):
        raise ForeignTenant(
            f"{task}: signed with a certificate of tenant {tenant!r}, which may send only tandem.infer "
            "and the control tasks; internal steps come from workers"
        )
    owner = named.get("owner")
    if owner not in (None, "", tenant):
        raise ForeignTenant(
            f"{task}: signed with a certificate of tenant {tenant!r}, but asks as owner {owner!r}"
        )
    if owner in (None, ""):
        return {**kwargs, "owner": tenant}
    return kwargs


__all__ = ["SIGNER", "ForeignTenant", "SignerSerializer", "bind_tenant", "install"]
