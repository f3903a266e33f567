"""Who may act on a job by task name, and the one refusal for a job that is not the asker's.

Each control task (``tandem.decide``, ``answer``, ``message``, ``resume``, ``fork``,
``follow_up``) takes an optional ``owner`` kwarg, the tenant the request speaks for (``tandem api``
passes its token's tenant; a client that names none speaks for ``default``). Before it reads or
writes anything of the job, each asks ``visible``: does the job have a record, owned by that
tenant? If not, it answers ``unknown_job``, the same answer whether the job does not exist or is
another tenant's: the same ``reason`` (``unknown``), the same words (``no_such_job``), the same
fields, and nothing read, written, sent or traced for the job. So a request learns nothing of other
tenants' jobs and changes nothing of them: above all, a fork asked by another tenant never runs the
source job's sealed secrets (which unseal only in jobs of their own tenant, ``tandem.tasks.sealing``).

This binds a request to the tenant it *names*. The API checks its tokens before it names one; a
message signed by a tenant's certificate names that tenant, or gets this same refusal before it
runs (``tandem.tasks.signers``, docs/security.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.record import JobRecord

if TYPE_CHECKING:
    from tandem.tasks.runtime import Runtime

UNKNOWN = "unknown"
"""The ``reason`` of the one refusal for a job that does not exist or is another tenant's."""

PAUSE_TASKS = frozenset({"tandem.decide", "tandem.answer"})
"""The control tasks whose answers name the pause asked (``pause_id``, ``current_pause``)."""


def requester(owner: Any) -> str:
    """The tenant a request speaks for: ``owner``, or ``default`` when it names none."""
    return owner if isinstance(owner, str) and owner else DEFAULT_TENANT


def owner_of(machine: JobMachine, job_id: str) -> str | None:
    """The tenant owning ``job_id`` as its record says; ``None`` for a job with no record."""
    rec = JobRecord.parse(machine.record(job_id))
    return None if rec is None else rec.owner


def visible(machine: JobMachine, job_id: Any, owner: Any) -> bool:
    """True when ``job_id`` names a job with a record owned by the request's tenant (``owner``,
    ``default`` when none): the only jobs a request may act on, or learn anything of."""
    return isinstance(job_id, str) and bool(job_id) and owner_of(machine, job_id) == requester(owner)


def no_such_job(job_id: Any) -> str:
    """The words of the one refusal (the control tasks' ``error``, the API's 404 ``unknown_job``)."""
    return f"no job {job_id!r} is known (never submitted, or its records expired)"


def unknown_job(task: str, job_id: Any, pause_id: Any = None) -> dict[str, Any]:
    """The answer of control task ``task`` for a job that is not ``visible``: ``{"job_id",
    "accepted": false, "error", "reason": "unknown"}``, with the pause asked and no current one
    (``pause_id``, ``current_pause``) for a decision or an answer. It depends on the request only,
    never on the job, so a job of another tenant and no job at all get the same answer."""
    reply: dict[str, Any] = {
        "job_id": job_id if isinstance(job_id, str) else None,
        "accepted": False,
        "error": no_such_job(job_id),
        "reason": UNKNOWN,
    }
    if task in PAUSE_TASKS:
        reply["pause_id"] = pause_id if isinstance(pause_id, str) else None
        reply["current_pause"] = None
    return reply


def enter_scope_of(rt: Runtime, job_id: str) -> None:
    """Enter the secret scope of ``job_id`` (a ``visible`` job): what a control task writes or
    logs of it from then on masks the job's own secrets."""
    from tandem.tasks.steps.context import enter_job_scope  # the steps import the control tasks

    spec = rt.store.spec(job_id)
    if spec is not None:
        enter_job_scope(rt, job_id, spec)


__all__ = [
    "PAUSE_TASKS",
    "UNKNOWN",
    "enter_scope_of",
    "no_such_job",
    "owner_of",
    "requester",
    "unknown_job",
    "visible",
]
