"""Who may act on a job by task name: the worker-side owner check of ``tandem.decide``,
``tandem.resume`` and ``tandem.fork``.

Each task takes an optional ``owner`` kwarg, the tenant the request speaks for (``tandem api``
passes its token's tenant; a client that names none speaks for ``default``). A request for
another tenant's job is refused exactly like one for an unknown job, so it learns nothing, and
changes nothing: above all, a fork asked by another tenant never runs the source job's sealed
secrets (which unseal only in jobs of their own tenant, ``tandem.tasks.sealing``).

This binds a request to the tenant it *names*. The API checks its tokens before it names one; a
message signed by a tenant's certificate names that tenant or is refused before it runs
(``tandem.tasks.signers``, docs/security.md).
"""

from __future__ import annotations

from typing import Any

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.record import JobRecord


def requester(owner: Any) -> str:
    """The tenant a request speaks for: ``owner``, or ``default`` when it names none."""
    return owner if isinstance(owner, str) and owner else DEFAULT_TENANT


def owner_of(machine: JobMachine, job_id: str) -> str | None:
    """The tenant owning ``job_id`` as its record says; ``None`` for a job with no record."""
    rec = JobRecord.parse(machine.record(job_id))
    return None if rec is None else rec.owner


def foreign(machine: JobMachine, job_id: str, owner: Any) -> bool:
    """True when ``job_id`` has a record owned by another tenant than the request's ``owner``."""
    found = owner_of(machine, job_id)
    return found is not None and found != requester(owner)


__all__ = ["foreign", "owner_of", "requester"]
