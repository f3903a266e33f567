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

from typing import TYPE_CHECKING, Any

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.record import JobRecord

if TYPE_CHECKING:
    from tandem.tasks.runtime import Runtime


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


def refused_request(
    machine: JobMachine, job_id: Any, owner: Any, pause_id: Any, awaits: str
) -> dict[str, Any] | None:
    """The answer refusing a request on a job's pause (``awaits``: "decision", "answer") whose
    ``job_id`` is no job id or names another tenant's job (refused as an unknown one); ``None``
    when the request may go on."""
    if not isinstance(job_id, str) or not job_id:
        return {
            "job_id": job_id,
            "accepted": False,
            "error": f"job_id must be a job id string, got {job_id!r}",
            "reason": "refused",
        }
    if foreign(machine, job_id, owner):
        return {
            "job_id": job_id,
            "accepted": False,
            "error": f"job {job_id!r} awaits no {awaits}: no such job is known",
            "reason": "refused",
            "pause_id": pause_id if isinstance(pause_id, str) else None,
            "current_pause": None,
        }
    return None


def enter_scope_of(rt: Runtime, job_id: Any, owner: Any) -> None:
    """Enter the secret scope of ``job_id`` when the request may act on it (its own tenant's):
    what a control task writes of it then masks the job's own secrets."""
    from tandem.tasks.steps.context import enter_job_scope  # the steps import the control tasks

    if isinstance(job_id, str) and job_id and not foreign(rt.machine, job_id, owner):
        spec = rt.store.spec(job_id)
        if spec is not None:
            enter_job_scope(rt, job_id, spec)


__all__ = ["enter_scope_of", "foreign", "owner_of", "refused_request", "requester"]
